"""``python -m dasklbfgs``: the ``dasklbfgs`` command (:mod:`dasklbfgs.cli`)."""

import sys

from dasklbfgs.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
