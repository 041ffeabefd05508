"""Tracker that appends every logged item as a JSON line to ``<run dir>/tracking.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from kgreason.types import to_jsonable


class JsonlTracker:
    def __init__(self, out_dir: str, run_config: Mapping[str, Any] | None = None, **_: Any) -> None:
        self.path = Path(out_dir) / "tracking.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write({"type": "config", "config": run_config or {}})

    def _write(self, obj: Mapping[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(to_jsonable(obj), sort_keys=True) + "\n")

    def log_config(self, record) -> None:
        """The run record (``run.json``'s content) as a ``config`` line."""
        self._write({"type": "config", "config": dict(record)})

    def log_metrics(self, metrics, step=None) -> None:
        self._write({"type": "metrics", "step": step, "metrics": dict(metrics)})

    def log_table(self, name, rows) -> None:
        self._write({"type": "table", "name": name, "rows": list(rows)})

    def log_histogram(self, name, counts) -> None:
        self._write({"type": "histogram", "name": name, "counts": dict(counts)})

    def log_image(self, name, path) -> None:
        self._write({"type": "image", "name": name, "path": str(path)})

    def close(self) -> None:
        pass
