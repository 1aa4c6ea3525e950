"""One run of a solver as :func:`~dasklbfgs.solvers.registry.minimize` owns it.

``minimize`` checks the inputs once (:meth:`RunContext.checked`: the datasets against the
model, ``x0``, the callback), lets the solver plan
its run without a cluster (so that bad input fails before one starts), then connects
(:meth:`RunContext.connected`: the client, the metrics stream and its start event) and
runs the plan. Every solver reports its iterations or progress polls through the same
three calls, in this order: :meth:`RunContext.evaluation_due` (held-out metrics every
``eval_every``), :meth:`RunContext.checkpoint_if_due` (every ``checkpoint_every``) and
:meth:`RunContext.report` (the step event, the user's callback and the stopping hooks),
so the cadences and the callback contract are written here only. The end event is sent
while the run's cluster is still up, also when the solver raised.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed import Client
from scipy.optimize import OptimizeResult

from dasklbfgs._typing import Dataset, DatasetLike
from dasklbfgs.cluster import resolve_client
from dasklbfgs.data.masked import validation_split
from dasklbfgs.data.sharded import as_dataset
from dasklbfgs.errors import ConfigurationError, MetricsWarning
from dasklbfgs.models.base import Model
from dasklbfgs.monitor.events import MetricsStream, start_facts
from dasklbfgs.optim.lbfgs import MSG_CALLBACK, Status
from dasklbfgs.options import Options
from dasklbfgs.scoring import held_out_metrics
from dasklbfgs.solvers.early_stopping import EarlyStopping

if TYPE_CHECKING:
    from dasklbfgs.solvers.registry import Solver
    from dasklbfgs.solvers.sandblaster.cached import CachedDataset

__all__ = ["Cadence", "IntermediateResult", "RunContext", "StopRule"]

#: A stopping hook: given a history entry, the reason to stop the run there, or None to go on.
StopRule = Callable[[dict[str, Any]], "str | None"]


class Cadence:
    """Every ``every`` steps (None: never): due once a step reaches the next multiple of
    ``every`` after ``start``. Steps may jump (a poll sees many global steps at once): one
    due step covers every multiple it passed."""

    def __init__(self, every: int | None, start: int = 0) -> None:
        self.every = every
        self.next = None if every is None else (start // every + 1) * every

    def due(self, step: int) -> bool:
        if self.next is None or self.every is None or step < self.next:
            return False
        while self.next <= step:
            self.next += self.every
        return True


class IntermediateResult(OptimizeResult):
    """What a callback receives after each iteration or progress poll (scipy's
    ``intermediate_result``): the history entry's fields (``step``, ``time``, ``loss``,
    ``eval_*``, ...), ``fun`` (the entry's loss, when it has one) and ``x``, the current
    parameters, fetched from the cluster only if the callback reads it, while it runs (the
    parameters move on after it returns: a ``x`` read then is kept, one not read is gone)."""

    def __init__(self, entry: dict[str, Any], params: Callable[[], np.ndarray]) -> None:
        super().__init__(entry)
        if "loss" in entry:
            self["fun"] = entry["loss"]
        # an attribute, not a key: OptimizeResult stores what is set on it as keys
        object.__setattr__(self, "_params", params)

    def __missing__(self, key: str) -> Any:
        if key != "x":
            raise KeyError(key)
        if self._params is None:
            raise RuntimeError(f"the parameters of step {self.get('step')} are read while the callback runs: "
                               "read intermediate_result.x in the callback to keep them")
        self["x"] = x = self._params()
        return x

    def settle(self) -> None:
        """The callback has returned: ``x``, if not read, is no longer to be had."""
        object.__setattr__(self, "_params", None)


#: above this many classes, a run's scores leave out the ranking metrics (their sorted score
#: counts hold about rows x classes numbers) and the confusion matrix; ``evaluate`` gives them
MANY_CLASSES = 100


class RunContext:
    """One run's checked inputs, cluster, metrics stream, cadences and stopping hooks.

    Attributes a solver reads: ``solver`` (its :class:`~dasklbfgs.solvers.registry.Solver`),
    ``model``, ``dataset``, ``eval_set`` (None without held-out data), ``options``, ``x0``
    (checked, or None: the model's initialisation, :meth:`x_start`), and once connected,
    ``client``, ``metrics`` and ``started`` (the run's clock, ``time.perf_counter()``).
    ``stop_rules`` are asked after every reported entry, after the user's callback: the
    place for early stopping on held-out loss.
    """

    def __init__(self, solver: Solver, model: Model, dataset: Dataset, options: Options, *, x0: np.ndarray | None,
                 callback: Callable[[OptimizeResult], Any] | None, eval_set: Dataset | None,
                 scoring: bool = False, cached: CachedDataset | None = None,
                 eval_cached: CachedDataset | None = None) -> None:
        self.solver, self.model, self.dataset, self.options = solver, model, dataset, options
        self.x0, self.callback, self.eval_set = x0, callback, eval_set
        # the datasets given as dasklbfgs.cached(...): their shards already in the workers' memory
        self.cached, self.eval_cached = cached, eval_cached
        self.scoring = scoring  # score the data with every metric at the end (result.scores)
        #: how a solver with a faster way scores the held-out data (Sandblaster's direct calls,
        #: :mod:`dasklbfgs.solvers.sandblaster.held_out`); None: :func:`held_out_metrics`
        self.held_out: Callable[[np.ndarray], dict[str, Any]] | None = None
        self.score_seconds = 0.0  # what that took (result.stats["score_seconds"])
        self.score_curves: dict[str, dict[str, Any]] = {}  # by split, what the score figures draw
        self.stop_rules: list[StopRule] = []
        self.stopped: str | None = None  # the first reason a callback or stop rule gave
        # early_stopping: the best held-out objective and its parameters (None: not asked for)
        self.early: EarlyStopping | None = None
        if getattr(options, "early_stopping", False):
            self.early = EarlyStopping(options.n_iter_no_change, options.min_improvement)  # type: ignore[attr-defined]
        self.client: Client | None = None
        self.metrics: MetricsStream | None = None
        self.started = time.perf_counter()
        self.evaluations = Cadence(None)
        self.checkpoints = Cadence(None)

    @classmethod
    def checked(cls, solver: Solver, model: Model, data: DatasetLike, options: Options, *, x0: Any = None,
                callback: Callable[[OptimizeResult], Any] | None = None, eval_data: DatasetLike | None = None,
                score: bool | None = None) -> RunContext:
        """The run's inputs, checked once for every solver: the datasets fit the model and
        ``x0`` is a parameter vector of it."""
        if callback is not None and not callable(callback):
            raise ConfigurationError(f"callback must be callable, got {callback!r}")
        from dasklbfgs.solvers.sandblaster.cached import CachedDataset

        cached = data if isinstance(data, CachedDataset) else None
        eval_cached = eval_data if isinstance(eval_data, CachedDataset) else None
        for given in (cached, eval_cached):
            if given is not None:
                given.check_open()
        dataset = as_dataset(cached.dataset if cached is not None else data)
        model.check_data(dataset)
        eval_set = None
        if eval_data is not None:
            eval_set = as_dataset(eval_cached.dataset if eval_cached is not None else eval_data)
        if eval_set is not None:
            model.check_data(eval_set)
        checked_x0 = None if x0 is None else model.check_params(x0, "x0")
        fraction = getattr(options, "validation_fraction", None)
        if fraction is not None:
            if eval_set is not None:
                raise ConfigurationError("give eval_data or validation_fraction (rows of data held out), not both",
                                         parameters=("validation_fraction",))
            if cached is not None:
                raise ConfigurationError("validation_fraction holds out rows of a dataset read from its store; a "
                                         "cached dataset's held-out rows are eval_data (another cached dataset)",
                                         parameters=("validation_fraction",))
            dataset, eval_set = validation_split(dataset, fraction)
        if getattr(options, "early_stopping", False):
            if eval_set is None:
                raise ConfigurationError("early_stopping stops on the held-out objective: give eval_data (--test) "
                                         "or validation_fraction", parameters=("early_stopping",))
            if getattr(options, "eval_every", None) is None:
                raise ConfigurationError("early_stopping needs eval_every, how often to score the held-out data",
                                         parameters=("eval_every",))
        if score is not None and not isinstance(score, (bool, np.bool_)):
            raise ConfigurationError(f"score must be True or False, got {score!r}")
        return cls(solver, model, dataset, options, x0=checked_x0, callback=callback, eval_set=eval_set,
                   scoring=bool(score), cached=cached, eval_cached=eval_cached)

    def x_start(self) -> np.ndarray:
        """The starting parameters: ``x0``, else the model's initialisation."""
        return self.model.init_params(None) if self.x0 is None else self.x0

    @property
    def run_id(self) -> str:
        """The id of the run's metrics events (``result.run_id``)."""
        if self.metrics is None:
            raise RuntimeError("the run has no metrics stream before it is connected")
        return self.metrics.run

    # -- the cluster and the start and end events -------------------------------------------

    @contextlib.contextmanager
    def connected(self, client: Client | None) -> Iterator[Client]:
        """The run's client (``client``, the default one, or an embedded cluster closed at the
        end) with the start event sent; the end event of a run that raises is sent here,
        before an embedded cluster closes. Call :meth:`finish` with the result."""
        given = [c for c in (self.cached, self.eval_cached) if c is not None]
        if client is None and given:  # the cluster their shards are on
            client = given[0].client
        with resolve_client(client) as active:
            for cached in given:
                cached.shard_cache(active)  # refused on another client, before the run starts
            self.model.check_workers(active)  # code the workers import (a torch module's factory), before any work
            self.client, self.metrics = active, MetricsStream(active, self.solver.name)
            self.started = time.perf_counter()
            workers = len(active.scheduler_info(n_workers=-1)["workers"])
            self.metrics.send(kind="start", **start_facts(self.solver, self.model, self.dataset, self.options,
                                                               self.eval_set is not None),
                              n_workers=workers, started_at=time.time(), scored=self.scoring)
            try:
                yield active
            except BaseException as exc:  # Ctrl-C too: the page must not show the run as running forever
                if active.status == "running":  # a client closed under the run has no scheduler to tell
                    self.metrics.send(kind="end", status="FAILED", success=False, error=type(exc).__name__,
                                      message=str(exc))
                raise

    def finish(self, result: OptimizeResult) -> None:
        """The end event of a run that returned ``result``, with its ``scores`` if it was
        scored (:meth:`final_scores`, after the solver's loop: this is sent after them)."""
        assert self.metrics is not None, "finish() belongs inside connected()"
        status = getattr(result.status, "name", result.status)
        scores = {"scores": result.scores} if "scores" in result else {}
        self.metrics.send(kind="end", status=status, success=bool(result.success), message=str(result.message),
                          **scores)

    # -- each iteration or progress poll ----------------------------------------------------

    def restart_clock(self) -> None:
        """Start the run's clock (history entries' ``time``, rates) now: when training starts,
        after a solver's setup (actors created, state restored)."""
        self.started = time.perf_counter()

    def start_cadences(self, step: int = 0) -> None:
        """Held-out scoring and checkpoints due every ``eval_every`` / ``checkpoint_every``
        steps from ``step`` (a resumed run's count) on."""
        every = getattr(self.options, "eval_every", None) if self.eval_set is not None else None
        self.evaluations = Cadence(every, step)
        self.checkpoints = Cadence(getattr(self.options, "checkpoint_every", None), step)

    def score(self, params: np.ndarray, *, by_workers: bool = False) -> dict[str, float]:
        """Held-out metrics of ``params`` (``eval_*`` keys): by the run's workers when the
        solver leaves them idle between steps (``by_workers``), else in this process."""
        assert self.eval_set is not None, "scored only with held-out data"
        if by_workers and self.held_out is not None:
            return self.held_out(params)
        if not by_workers:
            return held_out_metrics(self.model, params, self.eval_set)
        return held_out_metrics(self.model, params, self.eval_set, self.client, self._shards_of(self.eval_cached))

    def _shards_of(self, cached: CachedDataset | None) -> list[Any] | None:
        """The futures of a cached dataset's shards, for scoring where they are (None: read the store)."""
        if cached is None:
            return None
        assert self.client is not None, "scored once connected"
        return cached.shards_for(self.client)

    def final_scores(self, params: np.ndarray, cached: list[Any] | None = None) -> dict[str, dict[str, Any]]:
        """Every metric of the model's task at ``params`` on the training data (``cached``:
        futures of its shards in the workers' memory, scored where they are) and the
        held-out data, by the workers: ``result.scores`` of a run with ``score=True``; the
        figures' curves of each go to :attr:`score_curves`. Scoring that fails leaves them
        empty with a :class:`~dasklbfgs.errors.MetricsWarning`: the run's result is kept."""
        from dasklbfgs.scoring.evaluation import evaluated
        from dasklbfgs.scoring.summaries import METRICS, RANKING

        started = time.perf_counter()
        names = METRICS[self.model.task]
        if getattr(self.model, "n_classes", 2) > MANY_CLASSES:  # sorted counts of every class: rows x classes
            names = tuple(name for name in names if name not in (*RANKING, "confusion_matrix"))
        splits = {"train": (self.dataset, self.cached), **({"test": (self.eval_set, self.eval_cached)}
                                                            if self.eval_set else {})}
        scores: dict[str, dict[str, Any]] = {}
        try:
            for split, (data, given) in splits.items():
                shards = cached if split == "train" and cached is not None else self._shards_of(given)
                scores[split] = evaluated(self.model, params, data, names, self.client, shards, curves=True)
        except Exception as exc:  # noqa: BLE001 - the fit is worth more than its scores
            warnings.warn(f"scoring the run's result failed ({type(exc).__name__}: {exc}); the result is kept, "
                          "without scores: score it with dasklbfgs.evaluate", MetricsWarning, stacklevel=2)
            scores = {}
        curves_by_split = {split: found.pop("curves", {}) for split, found in scores.items()}
        self.score_curves = {split: drawn for split, drawn in curves_by_split.items() if drawn}
        self.score_seconds = time.perf_counter() - started
        return scores

    def evaluation_due(self, step: int) -> bool:
        """Whether held-out scoring is due at ``step`` (every ``eval_every``)."""
        return self.eval_set is not None and self.evaluations.due(step)

    def checkpoint_if_due(self, step: int, write: Callable[[int], None]) -> None:
        """``write(step)`` when a checkpoint is due at ``step``."""
        if self.checkpoints.due(step):
            write(step)

    def report(self, entry: dict[str, Any], params: Callable[[], np.ndarray], **event: Any) -> str | None:
        """Stream ``entry`` (with the solver's extra ``event`` fields), call the callback with
        an :class:`IntermediateResult` and ask the stop rules; the reason to stop, if the
        callback raised ``StopIteration`` or a stop rule gave one (only the first time)."""
        assert self.metrics is not None, "report() belongs inside connected()"
        self.metrics.send(**entry, **event)
        if self.stopped is not None:
            return None
        if self.callback is not None:
            intermediate = IntermediateResult(entry, params)
            try:
                self.callback(intermediate)
            except StopIteration as stop:
                self.stopped = str(stop) or MSG_CALLBACK
                return self.stopped
            finally:
                intermediate.settle()
        if self.early is not None and (reason := self.early.update(entry, params)) is not None:
            self.stopped = reason
            return reason
        for rule in self.stop_rules:
            if (reason := rule(entry)) is not None:
                self.stopped = reason
                return reason
        return None

    def settle_early_stopping(self, result: OptimizeResult) -> None:
        """A run ``early_stopping`` stopped returns the parameters of its best held-out scoring
        (its ``fun``, ``jac`` and ``history`` stay the last iterate's), with status
        ``EARLY_STOPPED``; every run that asked for it records ``result.early_stopping``."""
        if self.early is None:
            return
        result.early_stopping = self.early.summary()
        if self.early.reason is None or self.early.best_params is None:
            return
        result.x = self.early.best_params
        result.status, result.success, result.message = Status.EARLY_STOPPED, True, self.early.reason
        if self.scoring:  # what the solver scored was the last iterate
            result.scores = self.final_scores(result.x)
