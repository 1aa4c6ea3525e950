"""Where the Training page is served, and whether a scheduler serves it: what a command
prints, known without loading the page's bokeh (:mod:`dasklbfgs.monitor.dashboard`)."""

from __future__ import annotations

from typing import Any

__all__ = ["ROUTE", "served", "training_url"]

ROUTE = "/training"


def training_url(dashboard_link: str) -> str:
    """The page's address beside the dashboard's (``http://127.0.0.1:8787/status`` ->
    ``http://127.0.0.1:8787/training``)."""
    return dashboard_link.rsplit("/", 1)[0] + ROUTE


def served(dask_scheduler: Any) -> bool:
    """Whether this scheduler's dashboard serves the page (``client.run_on_scheduler(served)``).
    A page registered after the dashboard started, as a late import of the page's module
    does, is not: only a scheduler built with it registered (``--preload``) serves it."""
    http = getattr(dask_scheduler, "http_application", None)
    return any(ROUTE in getattr(app, "app_paths", ()) for app in getattr(http, "applications", ()))
