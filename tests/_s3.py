"""An S3-compatible server on loopback for the session (moto's server mode, as zarr-python's
and s3fs's own suites use), reached over HTTP through s3fs by this process and the workers;
and one a test module owns, to stop, slow down and make fail (:class:`LoopbackS3`)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3():
    """``(bucket URL, storage_options)`` of a fresh bucket on a moto server at 127.0.0.1."""
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k",
                     aws_secret_access_key="s").create_bucket(Bucket="dasklbfgs-tests")
        options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
        yield "s3://dasklbfgs-tests", options
    finally:
        server.stop()


class LoopbackS3:
    """A moto S3 server on 127.0.0.1 that a test may stop and start again at the same port
    (moto keeps its buckets in this process meanwhile), seeing the requests it serves: how
    many were in flight at once, and answering 503 to the next ``fail_next`` of them.

    Each connection carries one request (HTTP/1.0), so a stopped server refuses every
    request at once: no kept-alive connection outlives ``stop``.
    """

    def __init__(self, bucket: str) -> None:
        import boto3

        self.port, self.bucket = free_port(), bucket
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.options = {"key": "k", "secret": "s",
                        "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}}
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request served
        self.in_flight = self.most_in_flight = 0
        self.fail_next = 0  # answer 503 to this many of the next requests
        self.delay = 0.0  # seconds each GET of an object is held before it is answered
        self.got_a_get = threading.Event()  # set when a GET of an object arrives
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.start()
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="k",
                     aws_secret_access_key="s").create_bucket(Bucket=bucket)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}"

    def start(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        class OneRequestPerConnection(MotoRequestHandler):
            protocol_version = "HTTP/1.0"

        moto = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", self.port, self._app(moto), threaded=True,
                                   request_handler=OneRequestPerConnection)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving; the port refuses connections until :meth:`start`."""
        self._server.shutdown()  # werkzeug closes the listening socket as serve_forever returns
        assert self._thread is not None
        self._thread.join()

    def outage(self, seconds: float) -> threading.Thread:
        """Stop now and start again after ``seconds``, in a thread (joined by the caller)."""
        self.stop()
        thread = threading.Thread(target=lambda: (time.sleep(seconds), self.start()), daemon=True)
        thread.start()
        return thread

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()
            self.most_in_flight = 0
        self.got_a_get.clear()

    def _app(self, moto: Any) -> Any:
        def app(environ: dict[str, Any], start_response: Any) -> Any:
            method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
            with self._lock:
                self.requests.append((method, path))
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                failing = self.fail_next > 0
                self.fail_next -= failing
            try:
                if method == "GET" and path.count("/") > 1:  # an object, not a bucket listing
                    self.got_a_get.set()
                    time.sleep(self.delay)
                if failing:
                    start_response("503 Service Unavailable", [("Content-Type", "application/xml")])
                    return [b"<Error><Code>ServiceUnavailable</Code><Message>try again</Message></Error>"]
                return list(moto(environ, start_response))  # answered before it counts as done
            finally:
                with self._lock:
                    self.in_flight -= 1

        return app


@pytest.fixture(scope="module")
def s3_server():
    """A :class:`LoopbackS3` of the module's own (tests stop it, slow it and make it fail)."""
    pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)  # requests cut off by stopped servers and killed workers
    server = LoopbackS3("dasklbfgs-outages")
    try:
        yield server
    finally:
        server.stop()


def storage_flags(options: dict, prefix: str = "") -> list[str]:
    """``storage_options`` as the commands' ``--storage-option KEY=VALUE`` flags (nested keys dotted)."""
    flags = []
    for key, value in options.items():
        if isinstance(value, dict):
            flags += storage_flags(value, f"{prefix}{key}.")
        else:
            flags += ["--storage-option", f"{prefix}{key}={value}"]
    return flags
