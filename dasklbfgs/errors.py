"""The one exception hierarchy of dasklbfgs.

Every error raised on purpose by the package derives from :class:`DaskLBFGSError`, and
every message names the bad value, what was expected and where it was found (file,
array, shard or argument).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "MetricsWarning",
    "DaskLBFGSError",
    "DatasetError",
    "DatasetExistsError",
    "NotADatasetError",
    "InvalidDataError",
    "CorruptDatasetError",
    "StoreError",
    "ClusterConnectionError",
    "ConfigurationError",
    "UnknownOptionError",
    "PartitionError",
    "PartitionLostError",
    "CheckpointError",
    "ModelFileError",
    "OutputExistsError",
    "ModelDataMismatchError",
    "NonFiniteObjectiveError",
    "WorkerLostError",
    "InsufficientMemoryError",
    "DaskLBFGSWarning",
    "PerformanceWarning",
    "ConvergenceWarning",
    "CollinearityWarning",
]


class DaskLBFGSError(Exception):
    """Base class of every error dasklbfgs raises on purpose.

    ``parameters`` are the keyword arguments (or options) the message names, spelled as in
    the message (``n_workers``, ``overwrite=True``): a front end that calls them otherwise
    rewrites those words, as the command line does with its flags
    (:func:`dasklbfgs.cli.messages.in_flags`); the Python API's message keeps the keywords.
    """

    def __init__(self, *args: object, parameters: Iterable[str] = ()) -> None:
        super().__init__(*args)
        self.parameters: tuple[str, ...] = tuple(parameters)


class ConfigurationError(DaskLBFGSError, ValueError):
    """An argument or option has a bad value (unknown name, wrong type, out of range)."""


class UnknownOptionError(ConfigurationError, TypeError):
    """A solver was given an option it does not take (a ``TypeError`` too, like an
    unexpected keyword argument)."""


class PartitionError(ConfigurationError):
    """A model cannot be partitioned as asked: a model with no partition program, a bad
    partition count, or more partitions than a layer has units."""


class ClusterConnectionError(DaskLBFGSError, ConnectionError):
    """A Dask scheduler given by address or scheduler file did not answer in time."""


class DatasetError(DaskLBFGSError):
    """A sharded dataset cannot be written or read as asked."""


class DatasetExistsError(DatasetError, FileExistsError):
    """The target path already exists and ``overwrite=True`` was not given."""


class NotADatasetError(DatasetError):
    """A path does not hold a dasklbfgs sharded dataset (missing group, ``X`` or ``y``)."""


class InvalidDataError(DatasetError, ValueError):
    """The data itself is unusable: NaN/inf, wrong shape, non-numeric dtype, empty."""


class CorruptDatasetError(DatasetError):
    """A stored dataset's chunk file is missing, truncated or not decodable."""


class StoreError(DatasetError):
    """A store cannot be used as asked: a URL whose scheme no installed package reaches, a
    missing optional dependency (``pip install 'dasklbfgs[s3]'``), refused credentials, or a
    store that does not answer."""


class CheckpointError(DaskLBFGSError):
    """A checkpoint is missing, unreadable, truncated, corrupted or of another kind."""


class ModelFileError(DaskLBFGSError, ValueError):
    """A saved model file (the ``.npz`` of a model's configuration and parameters that
    ``save_params`` and ``dasklbfgs train --output`` write) is missing, or is some other file."""


class OutputExistsError(DaskLBFGSError, FileExistsError):
    """A command's output file exists already and replacing it was not asked for."""


class ModelDataMismatchError(DaskLBFGSError, ValueError):
    """A model does not fit the data: feature count, label range or parameter length."""


class WorkerLostError(DaskLBFGSError, RuntimeError):
    """State held on a worker that died cannot be restored (e.g. a parameter shard with no
    checkpoint to rebuild it from)."""


class InsufficientMemoryError(DaskLBFGSError, MemoryError):
    """A run would hold more on a worker than Dask lets the worker use (checked before the
    run starts): partition the model, use fewer replicas a worker, or larger workers."""


class PartitionLostError(WorkerLostError):
    """A partition of a model replica was lost with its worker (or stopped answering): the
    computation it took part in is void; Sandblaster re-creates the replica and starts the
    evaluation over."""


class DaskLBFGSWarning(UserWarning):
    """Base class of warnings dasklbfgs emits (turned into errors in the test-suite)."""


class PerformanceWarning(DaskLBFGSWarning):
    """A setting that works but will be much slower than it needs to be."""


class ConvergenceWarning(DaskLBFGSWarning):
    """A replica method's run ended without success (it made no progress on its start, or
    diverged): the result is returned, ``result.success`` is False and the message says
    what happened and what to change. The estimators turn it into scikit-learn's."""


class CollinearityWarning(DaskLBFGSWarning):
    """The Hessian of an unpenalised model is singular at the start of a Newton run: some
    columns are linear combinations of others (or hold no value), so their coefficients are
    not unique. The warning names them; the run takes the least-squares step (statsmodels'
    pseudo-inverse) and goes on."""


class MetricsWarning(DaskLBFGSWarning):
    """A training event did not reach the scheduler (the dashboard will miss it); training goes on."""


class NonFiniteObjectiveError(DaskLBFGSError, FloatingPointError):
    """The objective or its gradient is NaN or infinite where a finite value is required."""

