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

Kinds: ``"start"`` (once: the run's ``name`` (its ``name`` option; None: unnamed), what its
steps count, ``unit``: "iteration" or "global step", and how many make an epoch,
``steps_per_epoch`` (None: the steps are not mini-batches), what its ``loss`` is,
``loss_name``, whether it reports per-replica progress, ``has_replicas``, the other figures
its steps carry, ``event_figures``, its model's ``task`` and whether it scores held-out data
as it goes, ``held_out``; the model, its number of parameters, the resolved options, the dataset's path and
shape, the number of workers, the wall-clock start ``started_at`` and whether it is scored at
its end, ``scored``), ``"step"`` (per
iteration or progress poll; the replica methods' last one has ``finished=True``) and
``"end"`` (once: ``status``, the solver's status name, ``success`` and ``message``; a run
scored at the end (``score=True``) adds its ``scores``, ``result.scores``: ``{"train":
metrics, "test": metrics}``, whose lists, the confusion matrix's rows, arrive as tuples; a
run whose solver raised has ``status="FAILED"`` and the ``error`` type). The run context
:func:`dasklbfgs.minimize` owns (:class:`~dasklbfgs.solvers.context.RunContext`) sends the
start and end events, the end while the run's cluster is still up.
"""

from __future__ import annotations

import os
import uuid
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs.errors import MetricsWarning
from dasklbfgs.scoring.names import held_out_names

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["TOPIC", "MetricsStream", "plain_event", "start_facts"]

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
    """Sends one run's metrics to the scheduler (about 0.4 ms per event). The run that owns
    it (:class:`~dasklbfgs.solvers.context.RunContext`) sends its start and end events."""

    def __init__(self, client: Client, solver: str) -> None:
        self.client = client
        self.solver = solver
        self.run = f"{solver}-{uuid.uuid4().hex[:8]}"

    def send(self, kind: str = "step", **metrics: Any) -> None:
        """Send one event of ``kind`` (checked against the schema here, where it is built)."""
        message = plain_event({"run": self.run, "solver": self.solver, "kind": kind, **metrics})
        try:
            self.client.log_event(TOPIC, message)
        except Exception as exc:  # noqa: BLE001 - metrics must never stop training, but must be seen
            warnings.warn(f"a training event of run {self.run!r} did not reach the scheduler (the dashboard "
                          f"will miss it): {type(exc).__name__}: {exc}", MetricsWarning, stacklevel=2)


def start_facts(solver: Any, model: Any, dataset: Any, options: Any, held_out: bool) -> dict[str, Any]:
    """What the start event says of a run of ``solver`` (a registered
    :class:`~dasklbfgs.solvers.registry.Solver`), but for its cluster; ``held_out``: whether
    it scores held-out data as it goes."""
    return plain_event({"name": getattr(options, "name", None), "unit": solver.stats.unit,
                        "loss_name": solver.stats.loss_name, "has_replicas": solver.stats.has_replicas,
                        "event_figures": solver.stats.event_figures, "task": model.task, "held_out": held_out,
                        "held_out_metrics": list(held_out_names(model)),
                        "steps_per_epoch": options.planned_work(dataset.n_samples).per_epoch,
                        "model": repr(model), "n_params": model.n_params,
                        "options": options.to_json(), "dataset": {"path": dataset.url, "n_samples": dataset.n_samples,
                                    "n_features": dataset.n_features}}, f"{solver.name} start event")
