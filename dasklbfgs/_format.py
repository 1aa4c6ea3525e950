"""Human-readable quantities for log lines, reports and the command line."""

from __future__ import annotations

__all__ = ["human_bytes"]


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units, as Dask's dashboard shows memory)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
