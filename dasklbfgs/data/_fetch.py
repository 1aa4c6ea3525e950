"""Fetching many objects of a remote store at once, retrying what the store fails to answer.

A remote dataset's read asks for every object it needs in one concurrent batch (the async
filesystem's ``_cat_file`` of each key, gathered on fsspec's event loop, as ``fs.cat`` of a
list does): an object store serves many requests at once several times faster than one after
another (docs/guide.md, "Remote reads, retries and the budget"; ``python -m
benchmarks.remote``).

Transient failures (a refused or dropped connection, a timeout, a 5xx or 429 answer) are
retried, the failed keys only, with exponential backoff, for as long as the store makes
progress: a read gives up once no object has arrived for the *retry budget* (dask config
``dasklbfgs.store.retry-budget``, default 60 s; on workers set it in their config or as
``DASK_DASKLBFGS__STORE__RETRY_BUDGET=30s``) and raises a :class:`StoreError` naming the URL
and a key still missing. Every request is bounded by the budget too, so a store that
accepts connections and never answers is a StoreError, never a hang. An S3 client (s3fs)
used for these reads tries each request once, within connect and read timeouts, and gets
an object with one GET, unless ``storage_options`` say otherwise (``config_kwargs``,
``max_concurrency``): the retrying is this module's, against one budget. Missing objects
are not retried: the caller hears which (a damaged dataset).
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable, Iterator
from typing import Any

from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, StoreError

__all__ = ["fetch", "retry_budget", "RETRY_BUDGET_KEY", "DEFAULT_RETRY_BUDGET"]

#: the dask config key of the retry budget (a duration: seconds, or a string such as "30s")
RETRY_BUDGET_KEY = "dasklbfgs.store.retry-budget"
DEFAULT_RETRY_BUDGET = "60s"
#: requests in flight at once (fsspec's own default batch is 128 for files held in memory)
IN_FLIGHT = 64
#: the first wait before a retry, and the longest (doubled after each round that failed)
FIRST_BACKOFF, LONGEST_BACKOFF = 0.1, 4.0
#: botocore's client settings for these reads where the user gave none: one try a request
#: (this module retries), and a connection or a silent socket given up on in bounded time
S3_READ_CONFIG = {"connect_timeout": 10, "read_timeout": 30, "retries": {"total_max_attempts": 1}}
#: s3fs's own settings for these reads where the user gave none: one GET an object (by
#: default s3fs first asks each object's size, a HEAD, to split large ones into ranges:
#: twice the requests, while the objects of a read are fetched concurrently anyway)
S3_READ_OPTIONS = {"max_concurrency": 1}
#: errno values of a connection that failed or dropped: worth another try
_TRANSIENT_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE,
                     errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EAGAIN}


def retry_budget() -> float:
    """The retry budget in seconds (:data:`RETRY_BUDGET_KEY` in this process's dask config)."""
    import dask.config
    from dask.utils import parse_timedelta

    value = dask.config.get(RETRY_BUDGET_KEY, default=DEFAULT_RETRY_BUDGET)
    try:
        seconds = parse_timedelta(value, default="seconds")
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigurationError(f"dask config {RETRY_BUDGET_KEY!r} must be a duration such as 60 or '60s', "
                                 f"got {value!r}") from exc
    if seconds is None or not seconds > 0:
        raise ConfigurationError(f"dask config {RETRY_BUDGET_KEY!r} must be a positive duration, got {value!r}")
    return float(seconds)


def fetch(location: Location, keys: list[str], budget: float | None = None,
          on_object: Callable[[str, Any], None] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The objects ``keys`` (below ``location``, a remote one) fetched concurrently:
    ``(found, missing)``, ``found`` mapping each key that exists to its bytes, or to None
    once ``on_object(key, its bytes)`` took them: called on threads as each object arrives,
    so that decoding overlaps the fetching and each object's bytes go once decoded.

    Raises
    ------
    StoreError
        The store gave no object for ``budget`` seconds (default :func:`retry_budget`) while
        failing transiently, or failed in a way retrying does not mend (refused credentials,
        a malformed answer); it names the URL and a key.
    Exception
        What ``on_object`` raised, as it raised it.
    """
    budget = retry_budget() if budget is None else budget
    fs, root = _read_location(location).filesystem()
    found: dict[str, Any] = {}
    missing: list[str] = []
    pending = list(dict.fromkeys(keys))
    progress, backoff = time.monotonic(), FIRST_BACKOFF
    while pending:
        answers = _fetch_round(fs, root, pending, budget, on_object)
        failed: dict[str, BaseException] = {}
        for key, answer in zip(pending, answers, strict=True):
            if isinstance(answer, _Refused):
                raise answer.exc
            if not isinstance(answer, BaseException):
                found[key] = answer
            elif isinstance(answer, FileNotFoundError):
                missing.append(key)
            elif is_transient(answer):
                failed[key] = answer
            else:
                raise _store_error(location, key, answer) from answer
        if len(failed) < len(pending):
            progress, backoff = time.monotonic(), FIRST_BACKOFF
        pending = list(failed)
        if not pending:
            break
        if time.monotonic() - progress + backoff > budget:
            key, exc = next(iter(failed.items()))
            raise StoreError(
                f"{location.url!r} did not answer for {budget:g} s (the retry budget, dask config "
                f"{RETRY_BUDGET_KEY!r}): the object {key!r} and {len(failed) - 1} more could not be read "
                f"(last error {type(exc).__name__}: {exc}); check that the store is up and reachable") from exc
        time.sleep(backoff)
        backoff = min(2 * backoff, LONGEST_BACKOFF)
    return found, missing


class _Refused:
    """What ``on_object`` raised on an object (re-raised by :func:`fetch`, never retried)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _fetch_round(fs: Any, root: str, keys: list[str], budget: float,
                 on_object: Callable[[str, Any], None] | None) -> list[Any]:
    """Each key's bytes (None once ``on_object`` took them), the exception fetching it raised,
    or a :class:`_Refused`: all requested at once (an async filesystem), or one after the
    other (a filesystem without async methods)."""
    if getattr(fs, "async_impl", False):
        from fsspec.asyn import sync

        return list(sync(fs.loop, _gather, fs, root, keys, budget, on_object))
    paths = [f"{root}/{key}" for key in keys]
    answers = fs.cat(paths, on_error="return")
    return [_took(on_object, key, answers[fs._strip_protocol(path)]) for key, path in zip(keys, paths, strict=True)]


def _took(on_object: Callable[[str, Any], None] | None, key: str, answer: Any) -> Any:
    """``answer`` as :func:`_fetch_round` gives it, ``on_object`` called on it if it is bytes."""
    if on_object is None or isinstance(answer, BaseException):
        return answer
    try:
        on_object(key, answer)
    except Exception as exc:
        return _Refused(exc)
    return None


async def _gather(fs: Any, root: str, keys: list[str], budget: float,
                  on_object: Callable[[str, Any], None] | None) -> list[Any]:
    slots = asyncio.Semaphore(IN_FLIGHT)
    loop = asyncio.get_running_loop()

    async def one(key: str) -> Any:
        async with slots:
            try:  # bounded: a store that accepts a request and never answers it is a failure, not a hang
                answer = await asyncio.wait_for(fs._cat_file(f"{root}/{key}"), budget)
            except Exception as exc:  # returned: the caller sorts missing, transient and fatal
                return exc
        if on_object is None:
            return answer
        # on a thread of the loop's executor: decoding (Blosc, Zstd release the GIL) while other objects arrive
        return await loop.run_in_executor(None, _took, on_object, key, answer)

    return list(await asyncio.gather(*(one(key) for key in keys)))


def _read_location(location: Location) -> Location:
    """``location`` with the settings of :data:`S3_READ_OPTIONS` and :data:`S3_READ_CONFIG`
    where it is an S3 URL and the user set none of them."""
    if location.url.split("://", 1)[0] not in ("s3", "s3a"):
        return location
    options = {**S3_READ_OPTIONS, **location.storage_options}
    options["config_kwargs"] = {**S3_READ_CONFIG, **options.get("config_kwargs", {})}
    return Location(location.url, options)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _transient_types() -> tuple[type[BaseException], ...]:
    """The clients' own exception types for connections that failed, dropped or timed out."""
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        import botocore.exceptions as boto

        types += [boto.ConnectionError, boto.HTTPClientError, boto.ResponseStreamingError]
    except ImportError:
        pass
    try:
        import aiohttp

        types += [aiohttp.ClientConnectionError, aiohttp.ClientPayloadError]
    except ImportError:
        pass
    return tuple(types)


def _status(exc: BaseException) -> int | None:
    """The HTTP status of an error answer (botocore's, aiohttp's, gcsfs's), if it has one."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return status if isinstance(status, int) else None
    for name in ("status", "code"):
        value = getattr(exc, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether another try may succeed: the connection failed, dropped or timed out, or the
    store answered 5xx (its own trouble) or 429 (slow down)."""
    transient = _transient_types()
    for link in _chain(exc):
        if isinstance(link, transient):
            return True
        if isinstance(link, OSError) and link.errno in _TRANSIENT_ERRNOS:
            return True
        status = _status(link)
        if status is not None and (status >= 500 or status == 429):
            return True
    return False


def _store_error(location: Location, key: str, exc: BaseException) -> StoreError:
    if isinstance(exc, PermissionError):
        return StoreError(f"{location.url!r} refused access to {key!r}: {exc}; check the credentials in "
                          "storage_options")
    return StoreError(f"{location.url!r} did not answer as a store should for {key!r} ({type(exc).__name__}: "
                      f"{exc}); check the URL, the network and storage_options")
