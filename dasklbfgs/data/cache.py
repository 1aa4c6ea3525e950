"""Recipe datasets built once and reused: a data folder outside the reports.

A pipeline that builds its data from a recipe writes it under :func:`data_home` (like
scikit-learn's ``~/scikit_learn_data``), in a folder named by the recipe and a digest of
its options, so re-running the same config reuses the data instead of writing it again and
a report folder holds reports only. ``$DASKLBFGS_DATA`` moves the data home (on a cluster,
point it at storage the workers can read); a config's ``data.path`` puts the datasets
exactly where asked.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from dasklbfgs._version import __version__
from dasklbfgs.data.location import refuse_url
from dasklbfgs.data.recipes import make_dataset, recipe_record
from dasklbfgs.data.sharded import ShardedDataset
from dasklbfgs.errors import DaskLBFGSError, DatasetExistsError

__all__ = ["DATA_HOME_VARIABLE", "data_home", "recipe_folder", "recipe_datasets"]

DATA_HOME_VARIABLE = "DASKLBFGS_DATA"


def data_home() -> Path:
    """``$DASKLBFGS_DATA``, else ``$XDG_CACHE_HOME/dasklbfgs``, else ``~/.cache/dasklbfgs``."""
    if os.environ.get(DATA_HOME_VARIABLE):
        return Path(os.environ[DATA_HOME_VARIABLE]).expanduser().absolute()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache).expanduser().absolute() / "dasklbfgs"


def recipe_folder(recipe: str, options: dict[str, Any]) -> Path:
    """Where :func:`recipe_datasets` keeps ``recipe`` built with ``options`` by default: the
    digest covers the options and the package version (a new release may write other data)."""
    described = json.dumps({"recipe": recipe_record(recipe, **options), "version": __version__},
                           sort_keys=True, default=str)
    return data_home() / f"{recipe}-{hashlib.sha256(described.encode()).hexdigest()[:12]}"


def recipe_datasets(recipe: str, options: dict[str, Any], path: os.PathLike[str] | str | None = None
                    ) -> tuple[dict[str, ShardedDataset], bool]:
    """The ``train``/``test`` datasets of ``recipe`` with ``options`` (:func:`make_dataset`'s),
    at ``path`` (default :func:`recipe_folder`), and whether they were reused.

    A folder whose datasets record the same recipe and options is reused as it is. The
    default folder is (re)written otherwise; a ``path`` the user chose that holds something
    else raises :class:`~dasklbfgs.errors.DatasetExistsError` (it is never replaced).
    :func:`make_dataset` writes both splits aside and renames, so a folder that opens is complete.
    """
    chosen = path is not None
    if path is not None:
        refuse_url(path, "data.path (where a recipe's datasets are written) is a local folder")
    target = Path(path).expanduser().absolute() if path is not None else recipe_folder(recipe, options)
    existing = _made_with(target, recipe_record(recipe, **options))
    if existing is not None:
        return existing, True
    if chosen and target.exists():
        raise DatasetExistsError(
            f"data.path {str(target)!r} already exists and does not hold the {recipe!r} recipe with these options; "
            "remove it or choose another data.path")
    return make_dataset(recipe, target, **options, overwrite=target.exists()), False


def _made_with(target: Path, record: dict[str, Any]) -> dict[str, ShardedDataset] | None:
    """The datasets at ``target`` if each split opens and records ``record`` as its recipe."""
    splits = ("train", "test") if record["test_fraction"] else ("train",)
    try:
        found = {name: ShardedDataset.open(target / name) for name in splits}
    except (DaskLBFGSError, OSError):
        return None
    as_stored = json.loads(json.dumps(record))  # the attribute went through JSON
    return found if all(d.attrs.get("recipe") == as_stored for d in found.values()) else None
