"""Human-readable rendering of sizes and dataset summaries for the command line, and
JSON other programs can read."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from dasklbfgs._format import human_bytes


def format_description(info: dict[str, Any]) -> str:
    """Render :meth:`ShardedDataset.describe` output as a short report."""
    y_shape = "x".join(map(str, info["y_shape"]))
    lines = [
        f"dataset   {info['path']}",
        f"X         {info['n_samples']} x {info['n_features']} {info['dtype']}"
        + (f", sparse (CSR): {info['nnz']} non-zeros, density {info['density']:.3g}, "
           f"{info['nnz'] / info['n_samples']:.1f} per row" if info.get("sparse") else ""),
        f"y         shape ({y_shape}), range [{info['y_min']:g}, {info['y_max']:g}]",
        *([f"weights   sample weights, total {info['total_weight']:.6g} "
            f"(mean {info['total_weight'] / info['n_samples']:.4g})"]
          if info.get("weighted") else []),
        f"shards    {info['n_shards']} of up to {info['shard_rows']} rows",
        # the ratio as the guide's codec measurements give it: stored / raw (below 1: compressed)
        f"size      {human_bytes(info['nbytes_stored'])} stored of {human_bytes(info['nbytes_in_memory'])} raw "
        f"(stored/raw {info['nbytes_stored'] / max(info['nbytes_in_memory'], 1):.2f})",
    ]
    counts = info.get("label_counts")
    if counts:
        total = sum(counts.values())
        shown = list(counts.items())[:20]
        names = info.get("classes") or []  # label k is the class names[k], where they are recorded
        parts = ", ".join(f"{names[int(k)] if 0 <= int(k) < len(names) else k}: {v} ({100 * v / total:.1f}%)"
                          for k, v in shown)
        more = f", ... {len(counts) - len(shown)} more" if len(counts) > len(shown) else ""
        lines.append(f"labels    {len(counts)} distinct: {parts}{more}")
    for key, value in info.get("attrs", {}).items():
        lines.append(f"attr      {key} = {_short_repr(value)}")
    return "\n".join(lines)


def _short_repr(value: Any, shown: int = 10) -> str:
    """``repr`` of an attribute, long lists (a text dataset's vocabulary) cut to their head."""
    if isinstance(value, list) and len(value) > shown + 2:
        head = ", ".join(map(repr, value[:shown]))
        return f"[{head}, ... {len(value) - shown} more]"
    return repr(value)


def json_text(value: Any) -> str:
    """``value`` as valid JSON, indented: a NaN or infinite number (a metric the data leaves
    undefined, such as the ROC AUC of one class) is ``null``, a numpy number a plain one."""
    return json.dumps(_finite(value), indent=2, allow_nan=False, default=float)


def _finite(value: Any) -> Any:
    """``value`` with numpy arrays and numbers made Python ones, and non-finite floats None."""
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_finite(item) for item in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value
