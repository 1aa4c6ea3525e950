"""Training metrics streamed to the Dask scheduler as events.

Every solver logs one event per iteration (Sandblaster) or per progress poll (Downpour and
the peer methods) on the topic :data:`TOPIC`; the dashboard page and anything else holding a
client can read them with ``client.get_events(TOPIC)``. Each message carries the ``run`` id
that the solver's result also reports, so concurrent runs can be told apart.

The payload schema: a dict with ``run``, ``solver`` and ``kind`` (str) and any other fields,
whose values are plain JSON types only: str, int, float, bool, None, lists of them and dicts
with str keys (:func:`plain_event` checks this where the event is built, and turns numpy
scalars into Python ones and paths into str). Dask refuses to serialize anything else, e.g.
a dict with int keys, and the event would be lost: a failure to send is a
:class:`~dasklbfgs.errors.MetricsWarning`.

Kinds: ``"start"`` (once: what the run's steps count, ``unit``: "iteration" or "global
step"; the model, its number of parameters, the resolved options, the dataset's path and
shape, the number of workers and the wall-clock start ``started_at``), ``"step"`` (per
iteration or progress poll; the replica methods' last one has ``finished=True``) and
``"end"`` (once: ``status``, the solver's status name, ``success`` and ``message``; a run
whose solver raised has ``status="FAILED"`` and the ``error`` type). :func:`recorded_run`,
around every solver run in :func:`dasklbfgs.minimize`, sends the start and end events.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import numpy as np
from distributed import Client

from dasklbfgs.errors import MetricsWarning

__all__ = ["TOPIC", "MetricsStream", "plain_event", "recorded_run", "RunRecord"]

TOPIC = "dasklbfgs.training"
_PLAIN = (str, bool, int, float, type(None))


def plain_event(value: Any, where: str = "event") -> Any:
    """``value`` as plain JSON types (numpy scalars become Python ones); ``TypeError`` naming
    the field (``where``) for anything the event schema does not allow."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return [plain_event(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"{where} has the key {key!r} ({type(key).__name__}): event dicts take str keys only")
        return {key: plain_event(v, f"{where}.{key}") for key, v in value.items()}
    raise TypeError(f"{where} is a {type(value).__name__}: events hold only str, int, float, bool, None, "
                    "lists and dicts with str keys")


class MetricsStream:
    """Sends one run's metrics to the scheduler (about 0.4 ms per event).

    The first stream a solver opens inside :func:`recorded_run` is that run's: it sends the
    start event as it opens, and the end event goes through it."""

    def __init__(self, client: Client, solver: str) -> None:
        self.client = client
        self.solver = solver
        self.run = f"{solver}-{uuid.uuid4().hex[:8]}"
        record = _ACTIVE_RUN.get()
        if record is not None and record.stream is None:
            record.stream = self
            workers = len(client.scheduler_info(n_workers=-1)["workers"])
            self.send(kind="start", **record.facts, n_workers=workers, started_at=time.time())

    def send(self, kind: str = "step", **metrics: Any) -> None:
        """Send one event of ``kind`` (checked against the schema here, where it is built)."""
        message = plain_event({"run": self.run, "solver": self.solver, "kind": kind, **metrics})
        try:
            self.client.log_event(TOPIC, message)
        except Exception as exc:  # noqa: BLE001 - metrics must never stop training, but must be seen
            warnings.warn(f"a training event of run {self.run!r} did not reach the scheduler (the dashboard "
                          f"will miss it): {type(exc).__name__}: {exc}", MetricsWarning, stacklevel=2)


class RunRecord:
    """One solver run as :func:`recorded_run` sees it: the facts of its start event and,
    once the solver has opened it, the run's :class:`MetricsStream`."""

    def __init__(self, facts: dict[str, Any]) -> None:
        self.facts = facts
        self.stream: MetricsStream | None = None

    def end(self, **outcome: Any) -> None:
        """Send the end event, if the solver opened a stream and its cluster is still up: an
        embedded cluster closes with the run, and its scheduler's events with it."""
        if self.stream is not None and self.stream.client.status == "running":
            self.stream.send(kind="end", **outcome)

    def finished(self, result: Any) -> None:
        """The end event of a run that returned ``result``."""
        status = getattr(result.status, "name", result.status)
        self.end(status=status, success=bool(result.success), message=str(result.message))


def start_facts(solver: Any, model: Any, dataset: Any, options: Any) -> dict[str, Any]:
    """What the start event says of a run before it has a client (:func:`recorded_run`)."""
    return plain_event({"unit": solver.unit, "model": repr(model), "n_params": model.n_params,
                        "options": options.to_dict(), "dataset": {"path": dataset.path, "n_samples": dataset.n_samples,
                                    "n_features": dataset.n_features}}, f"{solver.name} start event")


_ACTIVE_RUN: ContextVar[RunRecord | None] = ContextVar("dasklbfgs_active_run", default=None)


@contextlib.contextmanager
def recorded_run(solver: Any, model: Any, dataset: Any, options: Any) -> Iterator[RunRecord]:
    """Around one run of ``solver`` (a registered :class:`~dasklbfgs.solvers.registry.Solver`):
    the stream the solver opens sends the start event, and the end event is sent here, a
    failed one (error type and message) if the solver raises. Call
    :meth:`RunRecord.finished` with the result on a normal end."""
    record = RunRecord(start_facts(solver, model, dataset, options))
    token = _ACTIVE_RUN.set(record)
    try:
        yield record
    except BaseException as exc:  # Ctrl-C too: the page must not show the run as running forever
        record.end(status="FAILED", success=False, error=type(exc).__name__, message=str(exc))
        raise
    finally:
        _ACTIVE_RUN.reset(token)
