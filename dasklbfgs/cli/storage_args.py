"""``--storage-option KEY=VALUE``: the ``storage_options`` of the URLs a command is given
(datasets, checkpoints, report folders), as fsspec takes them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dasklbfgs.data.location import has_scheme
from dasklbfgs.errors import ConfigurationError

__all__ = ["add_storage_arguments", "merged_storage_options", "storage_options_from_args"]


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE",
        help="an option of the filesystem of the datasets, model files, checkpoint and output given as URLs "
             "(s3://, gs://, ...), repeatable; dotted keys nest (client_kwargs.endpoint_url=http://...), values "
             "are JSON where they parse (true, 3, {...}), else strings")


def storage_options_from_args(args: argparse.Namespace, where: str | None = None) -> dict[str, Any] | None:
    """The ``--storage-option`` flags as one nested dict (None: none given, or ``where`` is
    a local path: the flags are for the URLs among a command's locations)."""
    if where is not None and not has_scheme(where):
        return None
    options: dict[str, Any] = {}
    for item in args.storage_option:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"--storage-option takes KEY=VALUE, got {item!r}")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        *parents, last = key.split(".")
        node = options
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigurationError(f"--storage-option {item!r}: {part!r} was given a value already")
            node = child
        node[last] = value
    return options or None


def merged_storage_options(base: dict[str, Any] | None, flags: dict[str, Any] | None) -> dict[str, Any] | None:
    """``base`` (a config's ``storage_options``) with the ``--storage-option`` flags laid over
    it, nested keys merged (a flag wins over the value it names)."""
    if not flags:
        return base
    merged = dict(base or {})
    for key, value in flags.items():
        below = merged.get(key)
        merged[key] = merged_storage_options(below, value) if isinstance(below, dict) and isinstance(value, dict) \
            else value
    return merged
