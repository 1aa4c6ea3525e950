"""English text already on every machine: the docstrings of Python standard library modules.

The corpus is collected from a fixed, sorted list of modules that import cleanly and with
no side effects (no deprecated, platform-only or optional-extension modules), walked in
sorted name order, so it is the same on every run of the same Python version.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import warnings
from typing import Any

STDLIB_MODULES = (
    "abc", "argparse", "ast", "base64", "bisect", "calendar", "cmd", "codecs", "collections",
    "colorsys", "concurrent.futures", "configparser", "contextlib", "copy", "csv",
    "dataclasses", "datetime", "decimal", "difflib", "email.message", "enum", "fnmatch",
    "fractions", "ftplib", "functools", "getopt", "gettext", "glob", "graphlib", "gzip",
    "hashlib", "heapq", "hmac", "html.parser", "http.client", "imaplib", "inspect", "io",
    "ipaddress", "itertools", "json", "logging", "math", "numbers", "operator", "optparse",
    "os", "pathlib", "pickle", "pprint", "queue", "random", "re", "sched", "secrets",
    "selectors", "shlex", "shutil", "smtplib", "socket", "statistics", "string", "struct",
    "subprocess", "tarfile", "tempfile", "textwrap", "threading", "tokenize", "traceback",
    "types", "typing", "unittest", "urllib.parse", "uuid", "warnings", "weakref",
    "xml.etree.ElementTree", "zipfile",
)  # fmt: skip

WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
SENTENCE_END = re.compile(r"(?<=[.!?:])\s+|\n\s*\n")
BOUNDARY = "<s>"


@functools.cache
def stdlib_docstrings(modules: tuple[str, ...] = STDLIB_MODULES) -> tuple[str, ...]:
    """The distinct docstrings of ``modules`` (:func:`module_docstrings` without the modules)."""
    return tuple(doc for _, doc in module_docstrings(modules))


@functools.cache
def module_docstrings(modules: tuple[str, ...] = STDLIB_MODULES) -> tuple[tuple[str, str], ...]:
    """``(module, docstring)`` for the distinct docstrings of ``modules``: each module's, then
    those of its public classes and functions (defined in that module or its private twin,
    e.g. ``_json``) and of the public methods of those classes, all in sorted name order. A
    docstring seen before (inherited boilerplate such as ``"Return repr(self)."``) is kept
    once, with the first module it was seen in."""
    docs: dict[str, str] = {}  # docstring -> module, insertion-ordered

    def add(doc: Any) -> None:
        if isinstance(doc, str) and (text := inspect.cleandoc(doc)):
            docs.setdefault(text, name)

    with warnings.catch_warnings():
        # typing.io / typing.re warn when their docstrings are read
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in sorted(modules):
            module = importlib.import_module(name)
            add(module.__doc__)
            for attr, obj in sorted(vars(module).items()):
                if attr.startswith("_") or not _defined_in(obj, name):
                    continue
                add(obj.__doc__)
                members = sorted(vars(obj).items()) if inspect.isclass(obj) else []
                for method_name, method in members:
                    if isinstance(method, (staticmethod, classmethod)):
                        method = method.__func__
                    if isinstance(method, property):
                        method = method.fget
                    if not method_name.startswith("_") and inspect.isroutine(method):
                        add(method.__doc__)
    return tuple((module, doc) for doc, module in docs.items())


def _defined_in(obj: Any, module_name: str) -> bool:
    if not (inspect.isclass(obj) or inspect.isroutine(obj)):
        return False
    home = (getattr(obj, "__module__", None) or "").lstrip("_")
    return home == module_name or home.startswith(module_name + ".")


def tokenize(docstring: str) -> list[str]:
    """Lowercase words of ``docstring``, with ``"<s>"`` closing every sentence.

    Sentences end at ``.``, ``!``, ``?`` or ``:`` followed by white space, and at blank
    lines (docstring paragraphs, parameter lists and examples).
    """
    tokens: list[str] = []
    for sentence in SENTENCE_END.split(docstring.lower()):
        if words := WORD.findall(sentence):
            tokens += [*words, BOUNDARY]
    return tokens
