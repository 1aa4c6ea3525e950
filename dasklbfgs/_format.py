"""Human-readable quantities for log lines, reports and the command line."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["human_bytes", "table_lines"]


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units, as Dask's dashboard shows memory)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def table_lines(label: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A small table under a report's 10-wide label, columns right-aligned::

        staleness  updates behind  pushes
                                0     188
                                1       6
    """
    cells = [list(map(str, header)), *([str(value) for value in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in cells]
    return [f"{label if i == 0 else '':<10} {line}" for i, line in enumerate(lines)]
