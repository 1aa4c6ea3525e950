"""The shared datasets fixture lives in tests/conftest.py."""

from tests._datasets import load_all, write  # noqa: F401
