"""The Sandblaster coordinator's own vector work per iteration at a wide model's size (local
state), piece by piece, against a read of the same bytes, all in one process and one run.

    python -m benchmarks.coordinator                  # 4,194,304 parameters, 10 pairs
    python -m benchmarks.coordinator --params 1048576 # a quick look
    python -m benchmarks.coordinator --params 1371996 --portions 20 --portion-columns 187000
        # what the coordinator of ctr at 1e6 rows works on (the parameters its rows move,
        # 20 portions of about 187,000 columns each): the recorded run

The pieces are what :class:`dasklbfgs.optim.lbfgs.LocalSpace` and the coordinator do between
two evaluations: the basis update after a step (the new pair's and the new gradient's dot
products with the stored pairs), the search direction (the pairs combined), the trial point,
the step's pair and its curvature test, the objective and gradient from the portions' sums
(the L2 penalty included), and adding the portions' compact sums (a sparse model's: each
portion's distinct columns). "Before" is how the coordinator did each piece until it was made
lean, kept here to measure against in the same run. With numba installed (the ``bench``
extra brings it), the products and the direction are also measured as loops numba compiles,
what a compiled core would start from. Each figure is the median of ``--repeats`` runs of the
piece.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks._common import machine, median_seconds, publish, report_header


def _filled_basis(n: int, m: int, rng: np.random.Generator) -> Any:
    from dasklbfgs.optim.basis import LocalBasis

    basis = LocalBasis(n, m)
    for _ in range(m):
        s = rng.normal(size=n)
        basis.push_pair(s, s + 0.1 * rng.normal(size=n))
    basis.set_gradient(rng.normal(size=n))
    return basis


def _advance_before(basis: Any, s: np.ndarray, y: np.ndarray, g: np.ndarray) -> None:
    """The step's pair, then the new gradient, each product a pass over the pairs (before
    ``LocalBasis.advance`` took them in one pass)."""
    basis.push_pair(s, y)
    basis.set_gradient(g)


def _combine_whole(basis: Any, delta: np.ndarray) -> np.ndarray:
    """Before: the direction as one whole-vector expression (five parameter-length arrays made)."""
    k = basis.k
    on_S, on_Y = np.empty(k), np.empty(k)
    on_S[basis.slots], on_Y[basis.slots] = delta[:k], delta[k : 2 * k]
    return on_S @ basis.S[:k] + on_Y @ basis.Y[:k] + delta[2 * k] * basis.g


def _combine_two_products(basis: Any, S: np.ndarray, Y: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Before: the direction as a product with the ``s`` rows, one with the ``y`` rows, added,
    each kept in a matrix of its own (``S``, ``Y``: contiguous copies of the basis's)."""
    from dasklbfgs.optim.vectors import add_scaled

    k = basis.k
    on_S, on_Y = np.empty(k), np.empty(k)
    on_S[basis.slots], on_Y[basis.slots] = delta[:k], delta[k : 2 * k]
    p = on_S @ S[:k]
    p += on_Y @ Y[:k]
    add_scaled(p, delta[2 * k], basis.g)
    return p


def _add_fancy(parts: list[Any], total: np.ndarray) -> None:
    """Before: each portion's compact sum added by a fancy-indexed ``+=``."""
    for part in parts:
        total[part.index.astype(np.intp, copy=False)] += part.values


def _penalty_whole(model: Any, params: np.ndarray, sums: np.ndarray, n: float) -> None:
    """Before: the penalty's gradient formed whole (a zeroed vector and ``l2 * W``), then added."""
    penalty, penalty_grad = model.penalty(params)
    grad = sums[: model.n_params] / n
    grad += penalty_grad


def _numba_kernels() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The basis update's products and the direction as loops compiled by numba (fastmath:
    free to vectorise and reassociate), or None without numba (it comes with the ``bench``
    extra, through dask-glm). What a compiled core of the coordinator would start from."""
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(fastmath=True, boundscheck=False)
    def products(rows: np.ndarray, s: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        out = np.empty((rows.shape[0], 3))
        for k in range(rows.shape[0]):
            row, on_s, on_y, on_g = rows[k], 0.0, 0.0, 0.0
            for i in range(row.size):
                on_s += row[i] * s[i]
                on_y += row[i] * y[i]
                on_g += row[i] * g[i]
            out[k, 0], out[k, 1], out[k, 2] = on_s, on_y, on_g
        return out

    @numba.njit(fastmath=True, boundscheck=False)
    def direction(coefficients: np.ndarray, rows: np.ndarray, on_g: float, g: np.ndarray) -> np.ndarray:
        p = on_g * g
        for k in range(rows.shape[0]):
            row, c = rows[k], coefficients[k]
            for i in range(row.size):
                p[i] += c * row[i]
        return p

    return products, direction


def measure(n: int, m: int, repeats: int, portions: int, columns: int) -> dict[str, Any]:
    from dasklbfgs.models import Logistic
    from dasklbfgs.models.sums import (
        BlockCuts,
        SparseSum,
        add_sums_dense,
        as_dense,
        reduce_in_blocks,
        reduce_in_groups,
    )
    from dasklbfgs.optim.vectors import max_abs

    rng = np.random.default_rng(0)
    basis = _filled_basis(n, m, rng)
    S, Y = np.ascontiguousarray(basis.S), np.ascontiguousarray(basis.Y)  # as they were kept before
    x, g, p = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    x_new, g_new = x + 0.5 * p, g + 0.1 * rng.normal(size=n)
    s, y = x_new - x, g_new - g
    model = Logistic(n - 1, l2=1e-4)
    sums = rng.normal(size=n)
    delta = rng.normal(size=2 * basis.k + 1)
    columns = min(columns, n // 2)
    compact = [SparseSum(n, np.sort(rng.choice(n - 1, size=columns, replace=False)).astype(np.intp),
                         rng.normal(size=columns)) for _ in range(portions)]
    four_bytes = [SparseSum(n, part.index.astype(np.int32), part.values) for part in compact]
    parts = [(1.0, part) for part in compact]
    known = BlockCuts([part.index for part in compact])  # as the evaluator keeps them (cut in the warm-up call)
    total = np.zeros(n)
    # 64 MiB read before each adding: in a run the portions' sums arrive fresh and the gradient
    # was last touched an iteration ago, while a loop of calls would find much of them in the cache
    flush = np.ones(2**23)
    out: dict[str, Any] = {
        "read_pairs": median_seconds(lambda: [float(row @ row) for row in (*basis.S, *basis.Y)], repeats),
        "advance_before": median_seconds(lambda: _advance_before(basis, s, y, g_new), repeats),
        "advance": median_seconds(lambda: basis.advance((s, y), g_new), repeats),
        "direction_before": median_seconds(lambda: _combine_whole(basis, delta), repeats),
        "direction": median_seconds(lambda: basis.combine(delta), repeats),
        "direction_two_products": median_seconds(lambda: _combine_two_products(basis, S, Y, delta), repeats),
        "trial_point": median_seconds(lambda: x + 0.5 * p, repeats),
        "pair_and_test": median_seconds(lambda: (float((x_new - x) @ (g_new - g)), float(g @ (x_new - x))), repeats),
        "objective_before": median_seconds(lambda: _penalty_whole(model, x, sums, 1e5), repeats),
        "objective": median_seconds(lambda: model.objective_from_sums(x, 1.0, sums, 1e5), repeats),
        "add_sums": median_seconds(lambda: reduce_in_blocks(parts, known), repeats, before=flush.sum),
        "add_tree_whole": median_seconds(lambda: as_dense(reduce_in_groups(parts, add_sums_dense)[1]), repeats,
                                         before=flush.sum),
        "add_flat_fancy": median_seconds(lambda: _add_fancy(four_bytes, total), repeats),
        "add_flat": median_seconds(lambda: [part.add_to(total) for part in compact], repeats),
        "add_flat_four_bytes": median_seconds(lambda: [part.add_to(total) for part in four_bytes], repeats),
        "gmax_before": median_seconds(lambda: float(np.max(np.abs(g))), repeats),
        "gmax": median_seconds(lambda: max_abs(g), repeats),
    }
    kernels = _numba_kernels()
    if kernels is not None:
        products, direction = kernels
        rows, coefficients = basis._rows[: 2 * basis.k], rng.normal(size=2 * basis.k)
        out["numba_products"] = median_seconds(lambda: products(rows, s, y, g_new), repeats)
        out["numba_direction"] = median_seconds(lambda: direction(coefficients, rows, 0.5, g), repeats)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", type=int, default=2**22)
    parser.add_argument("--history", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--portions", type=int, default=10, help="portions whose compact sums are added")
    parser.add_argument("--portion-columns", type=int, default=400_000,
                        help="distinct columns of a portion (ctr at 200,000 rows: about this many)")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.coordinator",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    out = {"command": command, "machine": machine(), "params": args.params, "history": args.history,
           "portions": args.portions, "portion_columns": args.portion_columns,
           "seconds": measure(args.params, args.history, args.repeats, args.portions, args.portion_columns)}
    publish("coordinator", out, render)


#: (key, what it is, how many parameter-length vectors it must read at least, given the pairs m)
PIECES: tuple[tuple[str, str, Callable[[int], int] | None], ...] = (
    ("advance", "basis update after a step: the pair's and the gradient's products with the pairs",
     lambda m: 2 * m + 3),
    ("direction", "search direction: the pairs and the gradient combined", lambda m: 2 * m + 1),
    ("trial_point", "a trial point x + alpha p", lambda m: 2),
    ("pair_and_test", "the step's pair s, y and its curvature test", lambda m: 4),
    ("objective", "objective and gradient from the sums, L2 penalty included", lambda m: 2),
    ("add_sums", "adding the portions' compact sums (the evaluator's tree of groups, by blocks; caches flushed)",
     None),
    ("gmax", "max abs g (the convergence test)", lambda m: 1),
)


def render(out: dict[str, Any]) -> str:
    t, m, n = out["seconds"], out["history"], out["params"]
    # a read of one vector from memory: the pairs read one by one (a single vector's read
    # repeated would come from the cache, which holds a few tens of MiB)
    per_vector = t["read_pairs"] / (2 * m)
    lines = report_header("The Sandblaster coordinator's vector work per iteration", out["command"], out["machine"])
    lines += [
        f"{n:,} parameters, {m} curvature pairs (local state), in one process; medians of the repeats. A read of "
        f"one parameter vector ({n * 8 / 2**20:.0f} MiB) from memory takes {1e3 * per_vector:.2f} ms "
        f"({n * 8 / per_vector / 1e9:.1f} GB/s: the {2 * m} pair vectors read one by one, "
        f"{1e3 * t['read_pairs']:.1f} ms). "
        f"Adding sums: {out['portions']} portions of {out['portion_columns']:,} distinct columns.", "",
        "| piece | ms | reads at least (vectors) | against that read |", "|---|---:|---:|---:|",
    ]
    total = 0.0
    for key, label, reads in PIECES:
        seconds = t[key]
        total += seconds
        vectors = reads(m) if reads else None
        against = f"{seconds / (vectors * per_vector):.2f}x" if vectors else ""
        lines.append(f"| {label} | {1e3 * seconds:.1f} | {vectors or ''} | {against} |")
    lines += [f"| **all of it** | **{1e3 * total:.1f}** | | |", "",
              "Before these were made lean, in the same run:", "",
              "| piece | before ms | now ms | now / before |", "|---|---:|---:|---:|",
              f"| basis update (the pair's, then the gradient's products, a pass over the pairs each) | "
              f"{1e3 * t['advance_before']:.1f} | {1e3 * t['advance']:.1f} | "
              f"{t['advance'] / t['advance_before']:.2f}x |",
              f"| adding the portions' compact sums (the tree of groups into whole-length totals, caches flushed) | "
              f"{1e3 * t['add_tree_whole']:.1f} | {1e3 * t['add_sums']:.1f} | "
              f"{t['add_sums'] / t['add_tree_whole']:.2f}x |",
              f"| one portion's sums into one total (a fancy-indexed `+=`; now `np.add.at`, in a loop: warm) | "
              f"{1e3 * t['add_flat_fancy']:.1f} | {1e3 * t['add_flat']:.1f} | "
              f"{t['add_flat'] / t['add_flat_fancy']:.2f}x |",
              f"| one portion's sums into one total (`np.add.at` with a 4-byte index, converted at each call) | "
              f"{1e3 * t['add_flat_four_bytes']:.1f} | {1e3 * t['add_flat']:.1f} | "
              f"{t['add_flat'] / t['add_flat_four_bytes']:.2f}x |",
              f"| search direction (a product with S, one with Y, added: before S and Y were one matrix) | "
              f"{1e3 * t['direction_two_products']:.1f} | {1e3 * t['direction']:.1f} | "
              f"{t['direction'] / t['direction_two_products']:.2f}x |",
              f"| search direction (one whole-vector expression) | {1e3 * t['direction_before']:.1f} | "
              f"{1e3 * t['direction']:.1f} | {t['direction'] / t['direction_before']:.2f}x |",
              f"| max abs g (`np.abs(g)` formed whole) | {1e3 * t['gmax_before']:.1f} | "
              f"{1e3 * t['gmax']:.1f} | {t['gmax'] / t['gmax_before']:.2f}x |",
              f"| objective and gradient (the penalty's gradient formed whole) | {1e3 * t['objective_before']:.1f} | "
              f"{1e3 * t['objective']:.1f} | {t['objective'] / t['objective_before']:.2f}x |"]
    if "numba_products" in t:
        lines += ["", "The same pieces as loops compiled by numba (fastmath), in the same run:", "",
                  "| piece | numpy ms | numba ms | numba / numpy |", "|---|---:|---:|---:|",
                  f"| the basis update's products (the pairs with s, y and g) | {1e3 * t['advance']:.1f} | "
                  f"{1e3 * t['numba_products']:.1f} | {t['numba_products'] / t['advance']:.2f}x |",
                  f"| search direction | {1e3 * t['direction']:.1f} | {1e3 * t['numba_direction']:.1f} | "
                  f"{t['numba_direction'] / t['direction']:.2f}x |"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
