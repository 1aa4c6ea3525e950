import sys

from dasklbfgs.cli.main import main

sys.exit(main())
