"""Model parallelism: one model replica partitioned across K partitions (docs/algorithms.md §4).

Pure numpy: partition programs (generators yielding :class:`Exchange` steps), the plan of who
owns which parameters, and the in-process executor. Nothing here imports Dask.
"""

from dasklbfgs.parallel.base import PartitionedModel
from dasklbfgs.parallel.exchanges import Exchange, payload_bytes
from dasklbfgs.parallel.in_process import InProcessRun, run_in_process
from dasklbfgs.parallel.plan import PARTITIONERS, partition

__all__ = ["Exchange", "payload_bytes", "InProcessRun", "run_in_process", "PartitionedModel", "PARTITIONERS",
           "partition"]
