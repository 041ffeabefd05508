"""Run-dir I/O: the append-only prediction store, metrics.json, and secret scrubbing.

``predictions.jsonl`` is the source of truth for a run: one JSON line per finished example,
appended and flushed to disk as soon as the example finishes. A crash can at worst leave a
partial last line, which :class:`PredictionStore` ignores (and truncates) on reopen, so the run
resumes from the last complete example.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

from omegaconf import DictConfig, OmegaConf

SECRET_KEYS = re.compile(r"(api[_-]?key|password|secret|token)$", re.I)


class PredictionStore:
    """Append-only JSONL keyed by example id."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        good_bytes = 0
        with open(self.path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # a torn last line from a crash
                try:
                    row = json.loads(raw)
                except json.JSONDecodeError:
                    break
                self.rows[row["id"]] = row
                good_bytes += len(raw)
        if good_bytes != self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(good_bytes)

    def __contains__(self, example_id: str) -> bool:
        return example_id in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows.values())

    def append(self, row: Mapping[str, Any]) -> None:
        line = json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.rows[row["id"]] = dict(row)


def gold_fields(example: Any) -> dict[str, Any]:
    """The gold fields every metric reads, stored in each ``predictions.jsonl`` row so that
    ``python -m kgreason.score`` re-computes the run's ``metrics.json`` from the file alone:
    ``answers`` (all aliases), ``answer_groups`` (one alias list per distinct gold answer; empty
    = one group, ``answers``) and ``diagnoses`` (clinical tasks)."""
    return {
        "answers": list(example.answers),
        "answer_groups": [list(g) for g in example.answer_groups],
        "diagnoses": list(example.diagnoses),
    }


def write_json(path: str | Path, obj: Any) -> None:
    """Atomic JSON write (temp file + rename), keys sorted for byte-stable output."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    tmp.replace(path)


def scrub_secrets(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """Plain-dict copy of a config with every secret-looking key's value replaced."""
    data = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: ("<redacted>" if SECRET_KEYS.search(str(k)) and v not in (None, "") and not str(k).endswith("_env") else walk(v))
                    for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(data)
