"""Run-dir I/O: the append-only prediction store, metrics.json, and secret scrubbing.

``predictions.jsonl`` is the source of truth for a run: one JSON line per finished example,
appended and flushed to disk as soon as the example finishes. A crash can at worst leave a
partial last line, which :class:`PredictionStore` ignores (and truncates) on reopen, so the run
resumes from the last complete example.

An id can have several rows: on resume an example whose last row is an error is answered again
(``retry_errors``) and its new row is appended. **The last row per id wins** everywhere the file
is read (:class:`PredictionStore`, ``kgreason.score``, ``kgreason.tables``); the earlier rows stay
in the file as the record of the failed attempts.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

from omegaconf import DictConfig, OmegaConf

from kgreason.secrets import REDACTED, SECRET_KEY as SECRET_KEYS, register, register_from_config, scrub


class PredictionStore:
    """Append-only JSONL keyed by example id (the last row per id wins)."""

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
        raw = json.dumps(row, ensure_ascii=False, sort_keys=True)
        line = scrub(raw) + "\n"  # a server error can quote the key back
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.rows[row["id"]] = dict(row) if line[:-1] == raw else json.loads(line)


def last_rows(rows: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row per ``id``, in the order ids first appear (how every reader of a
    ``predictions.jsonl`` sees it; rows without an id are kept as they are)."""
    out: dict[Any, dict[str, Any]] = {}
    loose: list[tuple[int, dict[str, Any]]] = []
    order: dict[Any, int] = {}
    for i, r in enumerate(rows):
        if isinstance(r, dict) and "id" in r:
            order.setdefault(r["id"], i)
            out[r["id"]] = r
        else:
            loose.append((i, r))
    ranked = sorted([(order[k], v) for k, v in out.items()] + loose, key=lambda t: t[0])
    return [v for _, v in ranked]


def json_safe(obj: Any) -> Any:
    """A copy with every NaN or infinity replaced by ``None``: JSON has no NaN, and a bare ``NaN``
    token makes the file unreadable to strict parsers (``jq``, JavaScript, W&B's importer)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


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
    """Atomic JSON write (temp file + rename), keys sorted for byte-stable output; valid JSON
    always (non-finite numbers become ``null``) and scrubbed of registered secrets."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json.dumps(json_safe(obj), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    tmp.write_text(scrub(text) + "\n")
    tmp.replace(path)


def scrub_file(path: str | Path) -> bool:
    """Rewrite a text file the run did not write itself (Hydra's ``.hydra/*.yaml``, written before
    any kgreason code runs) with every registered secret removed. Returns whether it changed."""
    path = Path(path)
    if not path.is_file():
        return False
    text = path.read_text(encoding="utf-8", errors="replace")
    clean = scrub(text)
    if clean == text:
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(clean, encoding="utf-8")
    tmp.replace(path)
    return True


def scrub_secrets(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """Plain-dict copy of a config with every secret-looking key's value replaced (and every
    secret value the config holds or names registered, so that :func:`kgreason.secrets.scrub`
    also removes it from free text)."""
    data = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    register_from_config(data)

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: (REDACTED if SECRET_KEYS.search(str(k)) and v not in (None, "") and not str(k).endswith("_env") else walk(v))
                    for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return scrub(x) if isinstance(x, str) else x

    return walk(data)


def protect_run_dir(cfg: DictConfig | Mapping[str, Any], out_dir: str | Path) -> None:
    """First thing a run does: learn every secret the config holds or names, refuse a key typed
    where a variable's name belongs, scrub log records from here on, and scrub what Hydra wrote
    into the run dir before kgreason got control (``.hydra/*.yaml``; the sweep's ``multirun.yaml``).

    Raises:
        ValueError: a secret sits where a name belongs (the message names the key, not the value).
    """
    from kgreason.secrets import install_log_filter

    data = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    problems = register_from_config(data)
    install_log_filter()
    # trackers record the command line (W&B's run metadata keeps sys.argv): a key typed as an
    # override must not be there either; Hydra has parsed the arguments already
    sys.argv[:] = [scrub(a) for a in sys.argv]
    out_dir = Path(out_dir)
    for f in [*sorted((out_dir / ".hydra").glob("*.yaml")), out_dir.parent / "multirun.yaml"]:
        scrub_file(f)
    if problems:
        raise ValueError("; ".join(problems))
