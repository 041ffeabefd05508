"""Tracker protocol: a mirror of the run dir (metrics.json stays the source of truth)."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence


class Tracker(Protocol):
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def log_histogram(self, name: str, counts: Mapping[str, int]) -> None: ...

    def log_image(self, name: str, path: str) -> None: ...

    def close(self) -> None: ...
