"""Options declared once: a typed field with its default, help text and check.

Every solver's options are a frozen dataclass whose fields are declared with
:func:`option`. That declaration is the one place an option's name, default, type, valid
values and help text are written; the Python API (keyword arguments and their
signatures), the ``dasklbfgs train`` flags, the YAML ``train:`` schema, the estimators and
the documentation tables all read it. Values are checked when an options object is built,
and a bad one raises :class:`~dasklbfgs.errors.ConfigurationError` naming the option, the
value and what is valid.

Pure Python: nothing here imports Dask.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple, TypeVar

import numpy as np

from dasklbfgs.errors import ConfigurationError, UnknownOptionError

__all__ = ["Kind", "KINDS", "OptionSpec", "Options", "PlannedWork", "option", "override", "describe_default",
           "options_doc", "parse_ints", "parse_floats", "parse_mapping"]

_BAD = object()  # what a kind's normaliser returns for a value of the wrong type


def _number(value: Any, integral: bool) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer) if integral else (int, float, np.number)):
        return _BAD
    return int(value) if integral else (float(value) if math.isfinite(value) else _BAD)


def _boolean(value: Any) -> Any:
    return bool(value) if isinstance(value, (bool, np.bool_)) else _BAD


def _ints(value: Any) -> Any:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return _BAD
    items = list(value)
    ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items)
    return tuple(int(v) for v in items) if ok else _BAD


def _floats(value: Any) -> Any:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return _BAD
    items = [_number(v, False) for v in value]
    return tuple(items) if items and all(v is not _BAD for v in items) else _BAD


def _is_location(value: Any) -> bool:
    """Whether ``value`` is a location object carrying its own ``storage_options``
    (:class:`~dasklbfgs.data.location.Location`, duck-typed: this module sits below
    ``dasklbfgs.data``)."""
    return isinstance(getattr(value, "url", None), str) and isinstance(getattr(value, "storage_options", None),
                                                                       Mapping)


def _path(value: Any) -> Any:
    """A path or URL (str, ``os.PathLike``), or a location object."""
    if isinstance(value, (str, os.PathLike)):
        return value if str(value) else _BAD
    return value if _is_location(value) else _BAD


def _parse_bool_or_auto(text: str) -> bool | str:
    choices: dict[str, bool | str] = {"true": True, "false": False, "auto": "auto"}
    if text.lower() not in choices:
        raise argparse.ArgumentTypeError(f"must be true, false or auto, got {text!r}")
    return choices[text.lower()]


def parse_ints(text: str) -> tuple[int, ...]:
    """``256,256`` as a command-line value."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers like 256,256, got {text!r}") from None


def parse_floats(text: str) -> tuple[float, ...]:
    """``0.1,0.01,1e-3`` as a command-line value."""
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers like 0.1,0.01, got {text!r}") from None


def parse_mapping(text: str) -> dict[str, Any]:
    """``name=value,name=value`` with YAML values (``beta=0.9,nesterov=true``)."""
    import yaml

    pairs = [item.split("=", 1) for item in text.split(",") if item]
    if not pairs or any(len(pair) != 2 or not pair[0] for pair in pairs):
        raise argparse.ArgumentTypeError(f"must look like name=value,name=value, got {text!r}")
    return {key.strip(): yaml.safe_load(value) for key, value in pairs}


@dataclass(frozen=True)
class Kind:
    """One kind of option: how a value is checked and how each front end takes one."""

    normalise: Callable[[Any], Any]        # the value normalised, or _BAD for the wrong type
    expected: str                          # what a valid value is, in words
    flag: dict[str, Any]                   # argparse keywords of its command-line flag
    yaml: tuple[type, ...]                 # the types its value may have in a YAML config


_SWITCH = {"action": argparse.BooleanOptionalAction}

#: every kind of option, by the name :func:`option` takes
KINDS: dict[str, Kind] = {
    "int": Kind(lambda v: _number(v, True), "an integer", {"type": int, "metavar": "N"}, (int,)),
    "float": Kind(lambda v: _number(v, False), "a finite number", {"type": float, "metavar": "X"}, (int, float)),
    "bool": Kind(_boolean, "True or False", _SWITCH, (bool,)),
    "optional_bool": Kind(_boolean, "True, False or None", _SWITCH, (bool,)),
    "bool_or_auto": Kind(lambda v: v if v == "auto" else _boolean(v), "True, False or 'auto'",
                         {"type": _parse_bool_or_auto, "metavar": "{true,false,auto}"}, (bool, str)),
    "choice": Kind(lambda v: v, "one of", {}, (str,)),  # the flag's choices come from the spec
    "path": Kind(_path, "a path or URL", {"metavar": "PATH"}, (str,)),
    "text": Kind(lambda v: v if isinstance(v, str) and v.strip() else _BAD, "a non-empty string",
                 {"metavar": "TEXT"}, (str,)),
    "ints": Kind(_ints, "a list of integers", {"type": parse_ints, "metavar": "N,N"}, (list, int)),
    "floats": Kind(_floats, "a non-empty list of finite numbers", {"type": parse_floats, "metavar": "X,X"},
                   (list, int, float)),
    "mapping": Kind(lambda v: dict(v) if isinstance(v, Mapping) and all(isinstance(k, str) for k in v) else _BAD,
                    "a mapping of names to values", {"type": parse_mapping, "metavar": "NAME=VALUE,..."}, (dict,)),
}


@dataclass(frozen=True)
class OptionSpec:
    """How one option is checked and shown (its default lives on the dataclass field)."""

    help: str
    kind: str                              # a key of KINDS
    minimum: float | None = None
    below: float | None = None             # exclusive upper bound
    positive: bool = False                 # > 0 rather than >= minimum
    choices: tuple[Any, ...] = ()
    nullable: bool = False                 # None is a valid value, meaning ``none_means``
    none_means: str = ""
    aliases: tuple[str, ...] = ()          # older spellings accepted by the CLI and YAML
    length: int | None = None              # ``ints``: exact number of integers

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option kind must be one of {tuple(KINDS)}, got {self.kind!r}")

    def check(self, name: str, value: Any, owner: str) -> Any:
        """``value`` normalised, or :class:`ConfigurationError` saying what is valid."""
        if value is None and self.nullable:
            return None
        checked = _BAD if value is None else KINDS[self.kind].normalise(value)
        if checked is _BAD or not self._valid(checked):
            raise ConfigurationError(f"{owner} option {name} must be {self.expected()}, got {value!r}",
                                     parameters=(name,))
        return checked

    def _valid(self, value: Any) -> bool:
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind == "ints":
            return self.length is None or len(value) == self.length
        if self.kind == "floats":
            return all(self._in_range(v) for v in value)
        if self.kind not in ("int", "float"):
            return True
        return self._in_range(value)

    def _in_range(self, value: float) -> bool:
        return ((not self.positive or value > 0) and (self.minimum is None or value >= self.minimum)
                and (self.below is None or value < self.below))

    @property
    def flag(self) -> dict[str, Any]:
        """argparse keywords of the option's command-line flag."""
        return {"choices": self.choices} if self.kind == "choice" else KINDS[self.kind].flag

    def expected(self) -> str:
        """What a valid value is, in words (error messages, help, docs)."""
        text = KINDS[self.kind].expected
        if self.kind == "choice":
            text = f"one of {self.choices!r}"
        elif self.kind == "ints" and self.length:
            text = f"{self.length} integers"
        elif self.kind == "int" and self.minimum is not None:
            text = f"an integer >= {self.minimum:g}"
        elif self.kind == "float" and self.positive:
            text = f"a number in (0, {self.below:g})" if self.below is not None else "a positive number"
        elif self.kind == "floats" and self.minimum is not None:
            text = f"a non-empty list of numbers >= {self.minimum:g}"
        elif self.kind == "float" and self.minimum == 0:
            text = f"a number in [0, {self.below:g})" if self.below is not None else "a non-negative number"
        elif self.kind == "float" and self.minimum is not None:
            text = f"a number >= {self.minimum:g}"
        return text + (" or None" if self.nullable and self.kind != "optional_bool" else "")


def option(default: Any, help: str, kind: str, **spec: Any) -> Any:
    """A dataclass field for one option: ``default`` and its :class:`OptionSpec`."""
    return field(default=default, metadata={"option": OptionSpec(help=help, kind=kind, **spec)})


def override(base: type[Options], name: str, *, default: Any, **changes: Any) -> Any:
    """The field ``name`` of ``base`` with another default (same help text and checks, with
    ``changes`` to its :class:`OptionSpec` if given, such as ``nullable=True``).

    For a solver whose natural default differs (Downpour's optimizer is Adagrad, the peer
    methods' is SGD); the option is still described once.
    """
    return field(default=default, metadata={"option": replace(base.spec(name), **changes)})


def describe_default(value: Any, spec: OptionSpec) -> str:
    """A default as shown in help text and tables."""
    if value is None:
        return spec.none_means or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


T = TypeVar("T", bound="Options")


class PlannedWork(NamedTuple):
    """What a progress display counts towards: ``total`` steps (None: unknown), the steps of
    one epoch (None: no epochs), and whether ``total`` is only a limit (L-BFGS's
    ``maxiter``: runs usually stop earlier) rather than the plan (epochs of mini-batches)."""

    total: int | None
    per_epoch: int | None
    total_is_limit: bool


@dataclass(frozen=True, kw_only=True)
class Options:
    """Base of every solver's options: checked at construction, immutable.

    Subclasses declare fields with :func:`option` and may check combinations of options
    in :meth:`check_together`.
    """

    solver: ClassVar[str] = "solver"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            checked = f.metadata["option"].check(f.name, getattr(self, f.name), self.solver)
            object.__setattr__(self, f.name, checked)
        self.check_together()

    def check_together(self) -> None:
        """Checks that involve more than one option (none by default)."""

    def planned_work(self, n_samples: int) -> PlannedWork:
        """The steps a run with these options plans on ``n_samples`` rows, for progress
        displays (unknown by default)."""
        return PlannedWork(None, None, True)

    # -- the vocabulary, for front ends ------------------------------------------------------

    @classmethod
    def default(cls, name: str) -> Any:
        return cls.fields()[name].default

    @classmethod
    def spec(cls, name: str) -> OptionSpec:
        return cls.fields()[name].metadata["option"]

    @classmethod
    def fields(cls) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(cls)}

    @classmethod
    def items(cls) -> Iterator[tuple[str, Any, OptionSpec]]:
        """``(name, default, spec)`` of every option, in declaration order."""
        for f in dataclasses.fields(cls):
            yield f.name, f.default, f.metadata["option"]

    @classmethod
    def aliases(cls) -> dict[str, str]:
        """Older spellings -> option names."""
        return {alias: name for name, _, spec in cls.items() for alias in spec.aliases}

    @classmethod
    def from_mapping(cls: type[T], values: Mapping[str, Any], where: str = "") -> T:
        """Options from a mapping (YAML, keyword arguments), aliases accepted.

        Unknown names are refused, naming the closest known one; ``where`` prefixes
        messages (a file name)."""
        known, aliases = cls.fields(), cls.aliases()
        for key in values:
            if aliases.get(key, key) not in known:
                close = difflib.get_close_matches(str(key), [*known, *aliases], n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise UnknownOptionError(
                    f"{where}{cls.solver} does not take option {key!r}{hint}; its options: {sorted(known)}"
                )
        try:
            return cls(**cls.canonical(values))
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}{exc}", parameters=exc.parameters) from None

    def replace(self: T, **values: Any) -> T:
        """A copy with ``values`` (option names or older spellings) changed, checked anew."""
        return type(self).from_mapping({**self.to_dict(), **self.canonical(values)})

    @classmethod
    def canonical(cls, values: Mapping[str, Any], where: str = "") -> dict[str, Any]:
        """``values`` with older spellings replaced by the option names (an option given
        under two spellings is refused)."""
        aliases, resolved = cls.aliases(), {}
        for key, value in values.items():
            name = aliases.get(key, key)
            if name in resolved:
                raise ConfigurationError(f"{where}{cls.solver} option {name} given twice (as {key!r} and another "
                                         "spelling)")
            resolved[name] = value
        return resolved

    def to_dict(self) -> dict[str, Any]:
        """The values, by option name (plain Python types)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_json(self) -> dict[str, Any]:
        """The values as JSON data (reports, metrics events): paths as str, a location as
        its URL (never its storage_options: credentials stay out of reports), tuples as lists."""
        def plain(value: Any) -> Any:
            if isinstance(value, os.PathLike):
                return os.fspath(value)
            if _is_location(value):
                return str(value.url)
            if isinstance(value, (tuple, list)):
                return [plain(v) for v in value]
            return {k: plain(v) for k, v in value.items()} if isinstance(value, Mapping) else value
        return {name: plain(value) for name, value in self.to_dict().items()}


def options_doc(options: type[Options], indent: str = "    ") -> str:
    """Numpydoc-style entries for every option of ``options`` (for generated docstrings)."""
    lines = []
    for name, default, spec in options.items():
        lines.append(f"{indent}{name} : {spec.expected()}, default {describe_default(default, spec)}")
        lines.append(f"{indent}    {spec.help[0].upper()}{spec.help[1:]}.")
    return "\n".join(lines)
