"""Where a dataset lives: a local folder or any fsspec URL (``s3://``, ``gs://``, ``abfs://``,
``memory://``, ...), with the ``storage_options`` Dask and pandas take.

A string with a scheme (``scheme://...``) is never a local path: ``file://`` URLs become
local folders, every other scheme is handed to fsspec, and an unknown scheme or a missing
optional package (``s3fs``: ``pip install 'dasklbfgs[s3]'``; ``gcsfs``: ``[gcs]``; ``adlfs``:
``[azure]``) is a :class:`~dasklbfgs.errors.StoreError` naming the URL. Local folders keep
their fast paths (chunk files decoded where they lie, writes renamed into place); object
stores have no rename, and :mod:`dasklbfgs.data._writer` commits them by writing the
dataset's schema last (docs/guide.md, "Datasets on object stores").
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dasklbfgs.errors import ConfigurationError, StoreError

__all__ = ["COMMITS", "FILES_COMMIT", "WRITING_MARKER", "Location", "has_scheme", "options_for", "refuse_url"]

#: URL scheme -> (the package that reaches it, the dasklbfgs extra that installs it)
EXTRAS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
          "abfs": ("adlfs", "azure"), "abfss": ("adlfs", "azure"), "az": ("adlfs", "azure")}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)(://|::)")
#: the object a dataset write puts first and removes once committed: what it leaves if killed
WRITING_MARKER = ".dasklbfgs-writing"
#: the description a write of a folder of plain files (predictions as Parquet) puts last, as a Zarr
#: store's ``zarr.json`` is; Parquet readers skip names starting with "_"
FILES_COMMIT = "_dasklbfgs.json"
#: the objects whose presence makes a write at a URL count: it is put last, and removed first
COMMITS = ("zarr.json", FILES_COMMIT)


def has_scheme(where: str) -> bool:
    """Whether ``where`` is a URL (``scheme://...``, or a chained ``scheme::...``), never a local path."""
    return _SCHEME.match(where) is not None


def options_for(where: os.PathLike[str] | str, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``storage_options`` for ``where`` if it is a URL, else None: the options a command or
    a pipeline is given are for the URLs among its locations (local paths take none)."""
    return storage_options if has_scheme(os.fspath(where)) else None


def refuse_url(where: os.PathLike[str] | str, why: str) -> None:
    """A :class:`ConfigurationError` if ``where`` is a URL where only a local path is taken
    (rather than a folder named like the URL on local disk)."""
    if has_scheme(os.fspath(where)):
        raise ConfigurationError(f"{why}, got the URL {os.fspath(where)!r}: write to a local path, or write a "
                                 "dataset at a URL with ShardedDataset.create(url, X, y, ...)")


@dataclass(frozen=True)
class Location:
    """A local folder (``url`` an absolute path) or a URL with its ``storage_options``;
    picklable, so workers reach the same store."""

    url: str
    # not in the repr: credentials must not reach logs and tracebacks
    storage_options: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, where: Location | os.PathLike[str] | str, storage_options: dict[str, Any] | None = None
           ) -> Location:
        """The location ``where`` names (a path, a URL or a Location), checked: an unknown
        scheme, a missing package, or ``storage_options`` given with a local path are errors."""
        if isinstance(where, Location):
            if storage_options:
                return cls(where.url, {**where.storage_options, **storage_options})
            return where
        if not isinstance(where, (str, os.PathLike)):
            raise ConfigurationError(f"a location is a path, a URL or a Location, got {type(where).__name__}")
        text = os.fspath(where)
        match = _SCHEME.match(text)
        if match is None or match.group(1).lower() in ("file", "local"):
            if storage_options:
                raise ConfigurationError(f"storage_options apply to URLs (s3://, gs://, ...); {text!r} is a "
                                         "local path")
            local = text if match is None else text[len(match.group(0)):]
            return cls(str(Path(local).absolute()))
        scheme, rest = match.group(1).lower(), text[len(match.group(0)):]
        if match.group(2) == "::":
            raise StoreError(f"chained URLs such as {text!r} (a cache in front of a store) are not supported; give "
                             "the store's own URL")
        if not rest.strip("/"):
            raise StoreError(f"{text!r} names no location in the {scheme!r} store: give a bucket or folder")
        _filesystem_class(scheme, text)
        return cls(f"{scheme}://{rest.rstrip('/')}", dict(storage_options or {}))

    @property
    def is_local(self) -> bool:
        return not has_scheme(self.url)

    @property
    def path(self) -> Path:
        """The local folder (only for a local location)."""
        if not self.is_local:
            raise ConfigurationError(f"{self.url!r} is not a local path (a URL: use .url)")
        return Path(self.url)

    def __str__(self) -> str:
        return self.url

    def __truediv__(self, name: str) -> Location:
        """The location ``name`` below this one."""
        return Location(str(self.path / name)) if self.is_local else Location(f"{self.url}/{name}",
                                                                               self.storage_options)

    def filesystem(self) -> tuple[Any, str]:
        """The fsspec filesystem and this location's path in it, with no listing cached from
        earlier calls (another process may have written since: the answers here decide
        what a write replaces and whether a chunk is missing); options the filesystem does
        not take are a :class:`StoreError` naming the URL."""
        import fsspec.core

        try:
            fs, path = fsspec.core.url_to_fs(self.url, **self.storage_options)
            fs.invalidate_cache(path)
            return fs, path
        except ImportError as exc:
            raise _missing_package(self.url, exc) from exc
        except (TypeError, ValueError) as exc:
            raise StoreError(f"cannot reach {self.url!r} with storage_options {sorted(self.storage_options)}: "
                             f"{exc}") from exc

    def zarr_store(self, *, read_only: bool) -> Any:
        """The Zarr store at this location (a path for local folders)."""
        if self.is_local:
            return self.url
        from zarr.storage import FsspecStore

        self.filesystem()  # a missing package or refused options: a StoreError naming the URL
        return FsspecStore.from_url(self.url, storage_options=self.storage_options, read_only=read_only)

    def exists(self, key: str = "") -> bool:
        """Whether ``key`` (a file below this location; "" this location itself) exists."""
        if self.is_local:
            return (self.path / key).exists() if key else self.path.exists()
        fs, path = self.filesystem()
        return _store_call(self.url, lambda: fs.exists(f"{path}/{key}" if key else path))

    def missing(self, keys: list[str]) -> list[str]:
        """Those of ``keys`` (files below this location) that do not exist."""
        if self.is_local:
            return [key for key in keys if not (self.path / key).is_file()]
        fs, path = self.filesystem()
        return [key for key in keys if not _store_call(self.url, lambda key=key: fs.isfile(f"{path}/{key}"))]

    def groups_below(self) -> list[str]:
        """The names of the Zarr groups directly below this location (a folder of splits)."""
        if self.is_local:
            if not self.path.is_dir():
                return []
            names = [p.name for p in self.path.iterdir() if p.is_dir()]
        else:
            names = self.children()
        return sorted(name for name in names
                      if not name.startswith(".") and self._node_type(f"{name}/zarr.json") == "group")

    def _node_type(self, key: str) -> str | None:
        """The ``node_type`` in the Zarr metadata document ``key`` (None: no such document)."""
        try:
            return str(json.loads(self.read(key)).get("node_type"))
        except (FileNotFoundError, NotADirectoryError, ValueError, AttributeError):
            return None

    def is_replaceable(self) -> bool:
        """Whether ``overwrite=True`` may replace this location: a Zarr store or a folder of
        files a write committed (:data:`COMMITS`), what a killed write left
        (:data:`WRITING_MARKER`), or a folder holding Zarr stores only."""
        if self.is_local:
            raise ConfigurationError("local folders are replaced by rename (dasklbfgs.data._writer)")
        if any(self.exists(key) for key in (*COMMITS, WRITING_MARKER)):
            return True
        names = self.children()
        return bool(names) and all(self.exists(f"{name}/zarr.json") for name in names)

    def children(self) -> list[str]:
        """The names directly below this location (remote)."""
        fs, path = self.filesystem()
        entries = _store_call(self.url, lambda: fs.ls(path, detail=False)) if self.exists() else []
        return sorted(str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in entries)

    def put(self, key: str, data: bytes) -> None:
        """Write the object ``key`` below this location ("" this location itself): at a URL
        one put, so readers find the old object or the whole new one; a local file is
        written in place (local writes are made atomic by renaming their folder)."""
        if self.is_local:
            (self.path / key if key else self.path).write_bytes(data)
            return
        fs, path = self.filesystem()
        _store_call(self.url, lambda: fs.pipe_file(f"{path}/{key}" if key else path, data))

    @property
    def parent(self) -> Location:
        """The location this one is directly below (a URL's parent is its bucket at most)."""
        if self.is_local:
            return Location(str(self.path.parent))
        above, sep, _ = self.url.partition("://")[2].rpartition("/")
        if not sep:
            raise ConfigurationError(f"{self.url!r} names a bucket, not a file or folder in it")
        return Location(f"{self.url.partition('://')[0]}://{above}", self.storage_options)

    @property
    def is_bucket(self) -> bool:
        """Whether this location (remote) is a bucket's root, which has no parent to write beside."""
        return "/" not in self.url.partition("://")[2]

    def copy_to(self, other: Location, *, last: str) -> None:
        """Copy every object below this location to the same key below ``other`` (remote,
        same filesystem: copied store-side), the object ``last`` after all the others."""
        fs, path = self.filesystem()
        _, other_path = other.filesystem()
        keys = [str(key)[len(path) + 1:] for key in _store_call(self.url, lambda: fs.find(path))]
        first = [key for key in keys if key != last]
        if first:  # at once: an async filesystem (s3fs, gcsfs) copies them concurrently
            _store_call(self.url, lambda: fs.copy([f"{path}/{key}" for key in first],
                                                  [f"{other_path}/{key}" for key in first]))
        if last in keys:
            _store_call(self.url, lambda: fs.cp_file(f"{path}/{last}", f"{other_path}/{last}"))

    def check_writable(self, what: str) -> None:
        """Put and delete a small object below this location (remote), so that a store
        refusing writes (credentials, a missing bucket) is a :class:`ConfigurationError`
        naming ``what`` before the work whose result would go there, not after."""
        probe = f".dasklbfgs-probe-{uuid.uuid4().hex[:8]}"
        try:
            self.put(probe, b"")
            self.remove(probe)
        except (StoreError, FileNotFoundError) as exc:  # FileNotFoundError: a missing bucket
            raise ConfigurationError(f"{what} cannot be written: {exc}") from None

    def read(self, key: str = "") -> bytes:
        """The bytes of the file ``key`` below this location ("" this location itself); a
        missing one is ``FileNotFoundError``."""
        if self.is_local:
            return (self.path / key).read_bytes() if key else self.path.read_bytes()
        fs, path = self.filesystem()
        return bytes(_store_call(self.url, lambda: fs.cat_file(f"{path}/{key}" if key else path)))

    def remove_all_but(self, keep: str) -> None:
        """Delete everything below this location except the object ``keep`` (remote)."""
        for name in self.children():
            if name != keep:
                self.remove(name)

    def remove(self, key: str = "") -> None:
        """Delete ``key`` (a file below this location; "" everything here). Remote only."""
        fs, path = self.filesystem()
        target = f"{path}/{key}" if key else path
        if _store_call(self.url, lambda: fs.exists(target)):
            _store_call(self.url, lambda: fs.rm(target, recursive=True))

    def stored_bytes(self) -> int:
        if self.is_local:
            return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())
        fs, path = self.filesystem()
        return int(_store_call(self.url, lambda: fs.du(path)))


def _filesystem_class(scheme: str, url: str) -> type:
    import fsspec

    try:
        return fsspec.get_filesystem_class(scheme)
    except ImportError as exc:
        raise _missing_package(url, exc) from exc
    except ValueError:
        raise StoreError(f"unknown URL scheme {scheme!r} in {url!r}: no installed fsspec filesystem reaches it "
                         "(a local path has no scheme; s3://, gs://, abfs://, memory:// and file:// are "
                         "reached with the right package installed)") from None


def _missing_package(url: str, exc: ImportError) -> StoreError:
    scheme = _SCHEME.match(url)
    package, extra = EXTRAS.get(scheme.group(1).lower() if scheme else "", (None, None))
    hint = f"pip install 'dasklbfgs[{extra}]' (it installs {package})" if extra else f"install what it names: {exc}"
    return StoreError(f"{url!r} needs a package that is not installed: {hint}")


def _store_call(url: str, call: Any) -> Any:
    """``call()``, with whatever the store's client raises (refused credentials, no answer,
    options it does not take) as a StoreError naming the URL; a missing object stays
    ``FileNotFoundError``."""
    try:
        return call()
    except FileNotFoundError:
        raise
    except PermissionError as exc:
        raise StoreError(f"{url!r} refused access: {exc}; check the credentials in storage_options") from exc
    except Exception as exc:  # botocore's, aiohttp's, gcsfs's own types: what the store said
        raise StoreError(f"{url!r} did not answer as a store should ({type(exc).__name__}: {exc}); check the URL, "
                         "the network and storage_options") from exc
