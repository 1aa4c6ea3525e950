"""Training metrics events (the public name; the implementation is :mod:`dasklbfgs.monitor.events`)."""

from dasklbfgs.monitor.events import TOPIC, MetricsStream

__all__ = ["TOPIC", "MetricsStream"]
