"""A tracker that records nothing (``tracking=none``)."""

from __future__ import annotations

from typing import Any


class NullTracker:
    def __init__(self, **_: Any) -> None:
        pass

    def log_config(self, record) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        pass

    def log_table(self, name, rows) -> None:
        pass

    def log_histogram(self, name, counts) -> None:
        pass

    def log_image(self, name, path) -> None:
        pass

    def close(self) -> None:
        pass
