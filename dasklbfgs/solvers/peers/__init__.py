"""The synchronous and decentralized alternatives to Downpour's parameter servers:
all-reduce SGD, elastic averaging, gossip and neighbour exchange (docs/algorithms.md §6, §7).

Each is registered as a solver with its own options class; they share Downpour's replicas,
rows, batches, update rules, result, history and metrics events, and the coordinator's
watch loop (:mod:`dasklbfgs.solvers._replicas`). Each replica owns a ``PeerMailbox`` actor
on its worker; messages between replicas go through mailboxes, never through the client.
"""

from dasklbfgs.solvers.peers.options import EASGDOptions, GossipOptions, NeighbourOptions, SyncOptions
from dasklbfgs.solvers.registry import PlannedBy, Solver, register, solver_function
from dasklbfgs.solvers.stats import PeerStats

__all__ = ["EASGDOptions", "GossipOptions", "NeighbourOptions", "SyncOptions", "easgd", "gossip_sgd",
           "neighbour_sgd", "sync_sgd"]

#: The peers' coordinator (Dask), imported when a run is planned.
plan_peers = PlannedBy("dasklbfgs.solvers.peers.coordinator", "plan_peers")

_RESULT = """

    Replica r trains on the r-th contiguous block of rows with the same seeded mini-batches
    as a Downpour replica. Returns a :class:`~dasklbfgs.solvers.result.Result` like
    Downpour's: ``x``, ``fun``, ``nit`` (global steps), ``status``, ``message``,
    ``history``, ``stats`` (updates/s, examples/s,
    messages and bytes between replicas, steps per replica, ``replica_restarts``) and
    ``replicas``: each replica's final parameters, steps and, with ``eval_data``, held-out
    metrics.

    A worker lost mid-run (its mailboxes, EASGD's center shards) does not end the run: the
    replicas restart from the survivors' states on the live workers, at most
    ``max_restarts`` times (docs/algorithms.md §6, "Losing a worker")."""

SYNC_SUMMARY = """Synchronous all-reduce SGD (Jin et al.; docs/algorithms.md §6).

    Every step each replica computes the row sums of its mini-batch; the sums are added up
    a binary tree of replicas (children send to parents through their mailboxes), the root
    turns the total into the mean objective and gradient of the union of the batches, and
    sends that gradient back down. Every replica applies the same update, so the run
    equals single-process SGD on batches of ``n_replicas * batch_size`` rows. Replicas
    with fewer rows add empty batches once theirs run out. A replica that waits longer
    than ``wait_timeout`` seconds for a peer raises :class:`WorkerLostError`.""" + _RESULT
register(Solver('sync', SyncOptions, plan_peers, SYNC_SUMMARY, PeerStats))
sync_sgd = solver_function('sync_sgd', 'sync', SyncOptions, SYNC_SUMMARY)

EASGD_SUMMARY = """Elastic averaging SGD, asynchronous form (Zhang et al.; docs/algorithms.md §6).

    Replicas take local steps with their own rule (SGD, or Nesterov momentum via
    ``optimizer="momentum", optimizer_options={"nesterov": True}``). Every ``tau`` steps a
    replica sends its parameters to the center, held by ``n_param_shards`` parameter-shard
    actors; each shard computes ``d = alpha (x_i - x~)`` and adds it to its slice of the
    center in one atomic call, and the replica subtracts ``d``. ``alpha`` is the moving
    rate; give it, or the elastic coupling ``rho`` (``alpha = learning_rate * rho``), or
    neither for the paper's choice ``alpha = 0.9 / n_replicas``. The center is returned.""" + _RESULT
register(Solver('easgd', EASGDOptions, plan_peers, EASGD_SUMMARY, PeerStats))
easgd = solver_function('easgd', 'easgd', EASGDOptions, EASGD_SUMMARY)

GOSSIP_SUMMARY = """Gossiping SGD (Jin et al.; docs/algorithms.md §6): no central state.

    Pull (default): every step a replica reads the parameters a random peer last
    published and moves to ``(x_i + x_k) / 2`` plus its own step. ``push_sum=True``: a
    replica keeps a numerator and a weight and trains at numerator / weight; every step it
    adds its step times its weight to the numerator (so numerator / weight moves by one
    step of the rule), adds the shares it received, keeps half of both and sends the other
    half to a random peer. Mixing never changes the totals, so the weighted average stays
    unbiased. The replicas' average is returned.""" + _RESULT
register(Solver('gossip', GossipOptions, plan_peers, GOSSIP_SUMMARY, PeerStats))
gossip_sgd = solver_function('gossip_sgd', 'gossip', GossipOptions, GOSSIP_SUMMARY)

NEIGHBOURS_SUMMARY = """Nearest-neighbour gradient exchange (Viviani et al.; docs/algorithms.md §7).

    Replicas sit on a ``"ring"`` (2 neighbours) or a 2-D ``"torus"`` (4 neighbours;
    ``torus_shape=(rows, cols)``, default the most nearly square grid of at least 2 x 2).
    After each mini-batch a replica applies its gradient and sends it to its neighbours;
    gradients received are applied as extra steps between its own batches. Each step is
    weighted by lazy Metropolis weights (own gradient 2/3 and each neighbour's 1/6 on a
    ring): applying the neighbours' raw gradients is unstable, since the mode where
    neighbours err in opposite directions grows every step
    (:func:`dasklbfgs.optim.collective.exchange_weights`). There is no barrier and
    replicas are not kept equal. The replica with the lowest held-out
    objective is returned (without ``eval_data``: the lowest recent training loss), and
    all replicas are reported in ``replicas``.""" + _RESULT
register(Solver('neighbours', NeighbourOptions, plan_peers, NEIGHBOURS_SUMMARY, PeerStats))
neighbour_sgd = solver_function('neighbour_sgd', 'neighbours', NeighbourOptions, NEIGHBOURS_SUMMARY)
