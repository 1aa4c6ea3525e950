"""An S3-compatible server on loopback for the session (moto's server mode, as zarr-python's
and s3fs's own suites use), reached over HTTP through s3fs by this process and the workers."""

from __future__ import annotations

import logging
import socket

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


def storage_flags(options: dict, prefix: str = "") -> list[str]:
    """``storage_options`` as the commands' ``--storage-option KEY=VALUE`` flags (nested keys dotted)."""
    flags = []
    for key, value in options.items():
        if isinstance(value, dict):
            flags += storage_flags(value, f"{prefix}{key}.")
        else:
            flags += ["--storage-option", f"{prefix}{key}={value}"]
    return flags
