"""The exchange primitive, its helpers and the in-process executor's protocol checks."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dasklbfgs.errors import ConfigurationError, PartitionError
from dasklbfgs.parallel import Exchange, payload_bytes, run_in_process
from dasklbfgs.parallel.exchanges import all_gather, all_sum, halo, reduce_scatter


def test_all_gather_concatenates_in_partition_order_and_counts_bytes() -> None:
    blocks = [np.full((2, p + 1), float(p)) for p in range(3)]

    def program(p):
        return (yield from all_gather("g", p, 3, blocks[p], axis=1))

    run = run_in_process([program(p) for p in range(3)])
    for gathered in run.results:
        np.testing.assert_array_equal(gathered, np.concatenate(blocks, axis=1))
    # each partition sends its block to the two others
    assert run.bytes_sent == [{"g": 2 * blocks[p].nbytes} for p in range(3)]
    assert run.total_bytes == run.bytes_of("g") == 2 * sum(b.nbytes for b in blocks)


def test_reduce_scatter_hands_each_partition_the_sum_of_its_columns() -> None:
    bounds = (0, 2, 3, 5)
    partials = [np.random.default_rng(p).normal(size=(4, 5)) for p in range(3)]

    def program(p):
        return (yield from reduce_scatter("r", p, bounds, partials[p]))

    run = run_in_process([program(p) for p in range(3)])
    expected = partials[0] + partials[1] + partials[2]  # partition order 0..K-1: the same bits
    for p, part in enumerate(run.results):
        np.testing.assert_array_equal(part, expected[:, bounds[p] : bounds[p + 1]])
    # partition p sends every other one the columns that one owns
    assert [sent["r"] for sent in run.bytes_sent] == [4 * 8 * (5 - (bounds[p + 1] - bounds[p])) for p in range(3)]


def test_halo_and_all_sum() -> None:
    def program(p):
        nxt = {p + 1: np.array([10.0 * p])} if p < 2 else {}
        received = yield from halo("h", nxt, (p - 1,) if p else ())
        total = yield from all_sum("s", p, 3, float(p) + sum(float(a[0]) for a in received.values()))
        return received, total

    run = run_in_process([program(p) for p in range(3)])
    assert [sorted(received) for received, _ in run.results] == [[], [0], [1]]
    assert float(run.results[2][0][1][0]) == 10.0
    assert {total for _, total in run.results} == {0.0 + 1.0 + 12.0}
    assert run.bytes_of("h") == 2 * 8


def test_received_arrays_are_copies() -> None:
    block = np.zeros(3)

    def sender():
        yield Exchange("x", {1: block}, ())

    def receiver():
        received = yield Exchange("x", {}, (0,))
        received[0][:] = 7.0

    run_in_process([sender(), receiver()])
    assert not block.any()


def test_payload_bytes() -> None:
    assert payload_bytes(Exchange("k", {1: np.zeros(3), 2: np.zeros((2, 2), np.float32)}, ())) == 24 + 16


def _yielding(*exchanges):
    def program():
        for exchange in exchanges:  # noqa: UP028 - the runtime send()s replies: a yield from a tuple cannot take them
            yield exchange
    return program()


@pytest.mark.parametrize(("programs", "match"), [
    (lambda: [_yielding(Exchange("a", {}, ())), _yielding(Exchange("b", {}, ()))],
     r"partitions yielded different keys in one round: \{0: 'a', 1: 'b'\}"),
    (lambda: [_yielding(Exchange("a", {1: np.zeros(1)}, ())), _yielding(Exchange("a", {}, ()))],
     r"under key 'a' partition 1 expects arrays from \[\], but \[0\] sent to it"),
    (lambda: [_yielding(Exchange("a", {}, (1,))), _yielding(Exchange("a", {}, ()))],
     r"under key 'a' partition 0 expects arrays from \[1\], but \[\] sent to it"),
    (lambda: [_yielding(Exchange("a", {}, ()), Exchange("a", {}, ())), _yielding(Exchange("a", {}, ()),
                                                                                   Exchange("a", {}, ()))],
     r"key 'a' was used twice"),
    (lambda: [_yielding(Exchange("a", {}, ())), _yielding()],
     r"partition\(s\) \[1\] returned while partition\(s\) \[0\] still exchange \(keys \['a'\]\)"),
    (lambda: [_yielding(Exchange("a", {0: np.zeros(1)}, ())), _yielding(Exchange("a", {}, ()))],
     r"partition 0 sends under key 'a' to \[0\], which are not other partitions of 0..1"),
    (lambda: [_yielding(Exchange("a", {5: np.zeros(1)}, ())), _yielding(Exchange("a", {}, ()))],
     r"partition 0 sends under key 'a' to \[5\]"),
    (lambda: [_yielding("a"), _yielding("a")], r"must yield Exchange objects, got str"),
])
def test_protocol_errors_name_the_key_and_partitions(programs, match) -> None:
    with pytest.raises(PartitionError, match=match):
        run_in_process(programs())


def test_partition_error_is_a_configuration_error() -> None:
    import dasklbfgs.errors

    assert issubclass(PartitionError, ConfigurationError) and "PartitionError" in dasklbfgs.errors.__all__


def test_parallel_package_imports_no_dask() -> None:
    """The parallel package and everything of dasklbfgs it imports are pure numpy: loaded
    without the top-level package (whose API sets up clusters), no dask module comes in."""
    code = (
        "import importlib.util, sys, types\n"
        "spec = importlib.util.find_spec('dasklbfgs')\n"
        "package = types.ModuleType('dasklbfgs'); package.__path__ = list(spec.submodule_search_locations)\n"
        "sys.modules['dasklbfgs'] = package\n"
        "import dasklbfgs.parallel, dasklbfgs.parallel.local\n"
        "assert 'dasklbfgs.parallel.mlp' in sys.modules\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
