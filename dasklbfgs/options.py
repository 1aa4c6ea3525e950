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

import dataclasses
import difflib
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np

from dasklbfgs.errors import ConfigurationError, UnknownOptionError

__all__ = ["OptionSpec", "Options", "option", "override", "describe_default"]

KINDS = ("int", "float", "bool", "choice", "path", "ints", "mapping", "bool_or_auto", "optional_bool")


@dataclass(frozen=True)
class OptionSpec:
    """How one option is checked and shown (its default lives on the dataclass field)."""

    help: str
    kind: str
    minimum: float | None = None
    below: float | None = None             # exclusive upper bound
    positive: bool = False                 # > 0 rather than >= minimum
    choices: tuple[Any, ...] = ()
    nullable: bool = False                 # None is a valid value (with the meaning in ``none_means``)
    none_means: str = ""
    aliases: tuple[str, ...] = ()          # older spellings accepted by the CLI and YAML
    length: int | None = None              # ``ints``: exact number of integers

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option kind must be one of {KINDS}, got {self.kind!r}")

    def check(self, name: str, value: Any, owner: str) -> Any:
        """``value`` normalised, or :class:`ConfigurationError` saying what is valid."""
        if value is None:
            if self.nullable:
                return None
            raise ConfigurationError(f"{owner} option {name} must be {self.expected()}, got None")
        checker = getattr(self, f"_check_{self.kind}")
        result = checker(value)
        if result is _BAD:
            raise ConfigurationError(f"{owner} option {name} must be {self.expected()}, got {value!r}")
        return result

    def expected(self) -> str:
        """What a valid value is, in words (used in error messages and help)."""
        kind = self.kind
        if kind == "choice":
            text = f"one of {self.choices!r}"
        elif kind == "bool":
            text = "True or False"
        elif kind == "optional_bool":
            text = "True, False or None"
        elif kind == "bool_or_auto":
            text = "True, False or 'auto'"
        elif kind == "path":
            text = "a path"
        elif kind == "mapping":
            text = "a mapping of names to values"
        elif kind == "ints":
            text = f"{self.length} integers" if self.length else "a list of integers"
        else:
            text = self._expected_number()
        return text + (" or None" if self.nullable and kind != "optional_bool" else "")

    def _expected_number(self) -> str:
        if self.kind == "int":
            return f"an integer >= {self.minimum:g}" if self.minimum is not None else "an integer"
        noun = "number"
        if self.positive:
            return f"a positive {noun}"
        if self.minimum == 0 and self.below is not None:
            return f"a {noun} in [0, {self.below:g})"
        if self.minimum == 0:
            return f"a non-negative {noun}"
        if self.minimum is not None:
            return f"a {noun} >= {self.minimum:g}"
        return "a finite number"

    # -- one checker per kind; each returns the normalised value or _BAD -----------------

    def _in_range(self, value: float) -> bool:
        if self.positive and not value > 0:
            return False
        if self.minimum is not None and value < self.minimum:
            return False
        return self.below is None or value < self.below

    def _check_int(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            return _BAD
        return int(value) if self._in_range(value) else _BAD

    def _check_float(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            return _BAD
        value = float(value)
        return value if math.isfinite(value) and self._in_range(value) else _BAD

    def _check_bool(self, value: Any) -> Any:
        return bool(value) if isinstance(value, (bool, np.bool_)) else _BAD

    def _check_optional_bool(self, value: Any) -> Any:
        return self._check_bool(value)

    def _check_bool_or_auto(self, value: Any) -> Any:
        return value if value == "auto" else self._check_bool(value)

    def _check_choice(self, value: Any) -> Any:
        return value if isinstance(value, str) and value in self.choices else _BAD

    def _check_path(self, value: Any) -> Any:
        return value if isinstance(value, (str, os.PathLike)) and str(value) else _BAD

    def _check_ints(self, value: Any) -> Any:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            return _BAD
        items = list(value)
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
            return _BAD
        if self.length is not None and len(items) != self.length:
            return _BAD
        return tuple(int(v) for v in items)

    def _check_mapping(self, value: Any) -> Any:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            return _BAD
        return dict(value)


_BAD = object()


def option(default: Any, help: str, kind: str, **spec: Any) -> Any:
    """A dataclass field for one option: ``default`` and its :class:`OptionSpec`."""
    return field(default=default, metadata={"option": OptionSpec(help=help, kind=kind, **spec)})


def override(base: type[Options], name: str, *, default: Any) -> Any:
    """The field ``name`` of ``base`` with another default (same help text and checks).

    For a solver whose natural default differs (Downpour's optimizer is Adagrad, the peer
    methods' is SGD); the option is still described once.
    """
    spec = base.spec(name)
    return field(default=default, metadata={"option": spec})


def describe_default(value: Any, spec: OptionSpec) -> str:
    """A default as shown in help text and tables."""
    if value is None:
        return spec.none_means or "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


T = TypeVar("T", bound="Options")


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

    # -- the vocabulary, for front ends ------------------------------------------------------

    @classmethod
    def default(cls, name: str) -> Any:
        """The declared default of option ``name``."""
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
        resolved: dict[str, Any] = {}
        for key, value in values.items():
            name = aliases.get(key, key)
            if name not in known:
                close = difflib.get_close_matches(key, [*known, *aliases], n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise UnknownOptionError(
                    f"{where}{cls.solver} does not take option {key!r}{hint}; its options: {sorted(known)}"
                )
            if name in resolved:
                raise ConfigurationError(f"{where}{cls.solver} option {name} given twice (as {key!r} and another spelling)")
            resolved[name] = value
        try:
            return cls(**resolved)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}{exc}") from None

    def replace(self: T, **values: Any) -> T:
        """A copy with ``values`` changed (checked like a new object)."""
        return type(self).from_mapping({**self.to_dict(), **values})

    def to_dict(self) -> dict[str, Any]:
        """The values, by option name (plain Python types)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
