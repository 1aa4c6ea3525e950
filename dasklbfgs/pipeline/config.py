"""Pipeline configs: YAML files validated against an explicit schema.

Unknown sections and keys are named, types are checked, and every message says where in
the file the problem is, before anything runs. The top-level ``storage_options:`` (as Dask
and pandas spell them, as fsspec takes them) apply to every URL of the run: the datasets,
the checkpoint and the report's output.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dasklbfgs.data.recipes import RecipeOptions
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.registry import ModelOptions
from dasklbfgs.options import KINDS, Options

__all__ = ["SCHEMA", "load_config", "validate_config", "validate_train", "validate_path", "validate_storage_options",
           "apply_overrides"]


def _keys(options: type[Options]) -> dict[str, tuple[tuple[type, ...], Any]]:
    return {name: (KINDS[spec.kind].yaml, default) for name, default, spec in options.items()}


# section -> key -> (accepted types, default); a default of ... means required.
SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], Any]]] = {
    "pipeline": {"name": ((str,), ...), "description": ((str,), "")},
    "data": {"recipe": ((str,), None), "path": ((str,), None), "train": ((str,), None), "test": ((str,), None),
             **_keys(RecipeOptions)},
    "model": {"name": ((str,), ...), **_keys(ModelOptions)},
    # "train": derived from the solvers' options classes (see validate_train)
    "cluster": {"workers": ((int,), None)},
}
#: the options classes that declare a section's keys and their older spellings (data.classes)
_OPTIONS: dict[str, type[Options]] = {"data": RecipeOptions, "model": ModelOptions}


def load_config(path: os.PathLike[str] | str, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Read a YAML pipeline config, apply ``section.key=value`` overrides, validate."""
    import yaml

    where = str(path)
    try:
        raw = yaml.load(Path(path).read_text(), Loader=_loader())
    except FileNotFoundError:
        raise ConfigurationError(f"pipeline config {where!r} does not exist") from None
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"pipeline config {where!r} is not valid YAML: {exc}") from None
    if isinstance(raw, dict) and overrides:
        raw = apply_overrides(raw, list(overrides))
    return validate_config(raw, where=where)


def validate_config(raw: Any, *, where: str = "<config>") -> dict[str, dict[str, Any]]:
    """Check ``raw`` against :data:`SCHEMA`; return it with defaults filled in."""
    if not isinstance(raw, dict):
        raise ConfigurationError(f"{where}: the config must be a mapping of sections, got {type(raw).__name__}")
    sections = [*SCHEMA, "train", "path", "storage_options"]
    unknown = sorted(set(raw) - set(sections))
    if unknown:
        raise ConfigurationError(f"{where}: unknown section(s) {unknown}; known sections: {sorted(sections)}")
    config: dict[str, Any] = {"train": validate_train(raw.get("train"), where=where),
                              "storage_options": validate_storage_options(raw.get("storage_options"), where=where)}
    config["path"] = validate_path(raw.get("path"), config["train"], where=where)
    for section, keys in SCHEMA.items():
        given = raw.get(section) or {}
        if not isinstance(given, dict):
            raise ConfigurationError(f"{where}: section {section!r} must be a mapping, got {type(given).__name__}")
        if section in _OPTIONS:
            given = _OPTIONS[section].canonical(given, where=f"{where}: ")
        unknown = sorted(set(given) - set(keys))
        if unknown:
            raise ConfigurationError(
                f"{where}: unknown key(s) {[f'{section}.{k}' for k in unknown]}; "
                f"known keys in {section!r}: {sorted(keys)}"
            )
        config[section] = {key: _value(section, key, given.get(key), types, default, where)
                           for key, (types, default) in keys.items()}
    data = config["data"]
    if (data["recipe"] is None) == (data["train"] is None):
        raise ConfigurationError(f"{where}: give exactly one of data.recipe (build a dataset) or data.train (use one)")
    if data["path"] is not None and data["recipe"] is None:
        raise ConfigurationError(f"{where}: data.path is where a recipe's datasets are written; "
                                 "it needs data.recipe (existing datasets are named by data.train and data.test)")
    return config


def validate_storage_options(given: Any, *, where: str = "<config>") -> dict[str, Any]:
    """The ``storage_options:`` section: a mapping of the filesystem's option names (str) to
    values, nested mappings allowed (``client_kwargs: {endpoint_url: ...}``); {} when absent."""
    if given is None:
        return {}
    example = "e.g. {profile: ml} or {key: ..., secret: ..., client_kwargs: {endpoint_url: ...}}"
    if not isinstance(given, dict):
        raise ConfigurationError(f"{where}: storage_options must be a mapping of the filesystem's option names to "
                                 f"values ({example}), got {type(given).__name__} {given!r}")
    pending: list[tuple[str, dict[Any, Any]]] = [("storage_options", given)]
    while pending:
        path, mapping = pending.pop()
        for key, value in mapping.items():
            if not isinstance(key, str):
                raise ConfigurationError(f"{where}: {path} has the key {key!r} ({type(key).__name__}); option names "
                                         f"are strings ({example})")
            if isinstance(value, dict):
                pending.append((f"{path}.{key}", value))
    return dict(given)


def _value(section: str, key: str, value: Any, types: tuple[type[Any], ...], default: Any, where: str) -> Any:
    """``value`` checked against ``types`` (a number as a float), or the default if None."""
    if value is None:
        if default is ...:
            raise ConfigurationError(f"{where}: {section}.{key} is required")
        return default
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = " or ".join(t.__name__ for t in types)
        raise ConfigurationError(f"{where}: {section}.{key} must be {names}, got {type(value).__name__} {value!r}")
    return float(value) if float in types else value


def validate_train(given: Any, *, where: str = "<config>") -> dict[str, Any]:
    """The ``train:`` section: ``solver`` (default: the first registered) and that solver's
    options, checked by its options class (:mod:`dasklbfgs.solvers`); returns
    ``{"solver": name, "options": options object}``."""
    from dasklbfgs.solvers import get_solver, solver_names

    given = {} if given is None else given
    if not isinstance(given, dict):
        raise ConfigurationError(f"{where}: section 'train' must be a mapping, got {type(given).__name__}")
    values = {key: value for key, value in given.items() if value is not None}  # null: the default
    name = values.pop("solver", None) or solver_names()[0]
    if name not in solver_names():
        raise ConfigurationError(f"{where}: train.solver must be one of {solver_names()}, got {name!r}")
    options = get_solver(name).options.from_mapping(values, where=f"{where}: train: ")
    return {"solver": name, "options": options}


def validate_path(given: Any, train: dict[str, Any], *, where: str = "<config>") -> dict[str, Any] | None:
    """The ``path:`` section (absent: None, one fit): a regularization path instead of one fit,
    its penalties as :class:`~dasklbfgs.selection.options.PathOptions` declares them
    (``l1_values`` or ``l2_values``, else ``n_alphas`` and ``eps``) and ``cv`` (folds to
    choose by; default none: the held-out data's best, else the last fit). Every fit is
    Sandblaster's, with the ``train:`` options; those a path sets itself are refused."""
    from dasklbfgs.selection.options import PathOptions
    from dasklbfgs.selection.path import check_path_options

    if given is None:
        return None
    if not isinstance(given, dict):
        raise ConfigurationError(f"{where}: section 'path' must be a mapping, got {type(given).__name__}")
    values = {key: value for key, value in given.items() if value is not None}
    cv = values.pop("cv", None)
    if cv is not None and (not isinstance(cv, int) or isinstance(cv, bool) or cv < 2):
        raise ConfigurationError(f"{where}: path.cv must be an integer number of folds >= 2, got {cv!r}")
    penalties = PathOptions.from_mapping(values, where=f"{where}: path: ")
    if train["solver"] != "sandblaster":
        raise ConfigurationError(f"{where}: a path fits every penalty with Sandblaster L-BFGS; train.solver is "
                                 f"{train['solver']!r} (leave it out, or set it to sandblaster)")
    check_path_options(train["options"], where=f"{where}: train: ")
    return {**penalties.to_dict(), "cv": cv}


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` overrides (values parsed as YAML scalars)."""
    import yaml

    for item in overrides:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigurationError(f"override {item!r} must look like section.key=value")
        dotted, text = item.split("=", 1)
        section, key = dotted.split(".", 1)
        raw.setdefault(section, {})
        if not isinstance(raw[section], dict):
            raise ConfigurationError(f"override {item!r}: section {section!r} is not a mapping")
        raw[section][key] = yaml.load(text, Loader=_loader())
    return raw


def _loader() -> type:
    """PyYAML's safe loader reading numbers as YAML 1.2 does: ``1e-4`` is a float (YAML 1.1,
    PyYAML's, wants ``1.0e-4`` and reads ``1e-4`` as a string)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    number = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", number, list("-+0123456789."))
    return Loader
