"""The LLM call store: where :class:`~kgreason.llm.cache.CachedLLM` keeps its replies, and the
run's list of the keys it used.

* :class:`CallStore` – ``<llm_cache.dir>/llm_calls/``, a :class:`~kgreason.storage.callstore.KeyValueStore`
  (one append-only shard per writing process); an older ``<llm_cache.dir>/llm_calls.sqlite`` is
  migrated into it (``readwrite``) or read in place (``readonly``).
* :func:`read_call_log` – the keys of a run's ``calls.jsonl`` (written by
  :class:`~kgreason.llm.cache.CallLog`), which ``kgreason bundle export`` packs.

The LLM wrapper itself (keys, hits, misses, accounting) is :mod:`kgreason.llm.cache`: this module is
on the ground floor and knows nothing of LLMs. A ``readonly`` store with nothing to read raises
``missing_error`` (:class:`~kgreason.storage.callstore.StoreMissing` unless the opener names
another: :func:`kgreason.llm.cache.open_store` names :class:`~kgreason.llm.base.CacheMiss`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kgreason.storage.callstore import LLM_LEGACY, LLM_STORE, KeyValueStore

DB_NAME = LLM_LEGACY  # llm_calls.sqlite: the SQLite file of older versions (migrated, see CallStore.open)
SHARD_DIR = LLM_STORE  # llm_calls/
CALL_LOG = "calls.jsonl"


class CallStore(KeyValueStore):
    """Key → JSON value in ``<dir>/llm_calls/`` (one shard per writing process, safe for several
    processes and hosts)."""

    @classmethod
    def open(cls, dir: str | Path, mode: str = "readwrite",
             missing_error: type[Exception] | None = None) -> "CallStore":
        """The shard directory ``<dir>/llm_calls/`` (``dir`` = ``llm_cache.dir``); an older
        ``<dir>/llm_calls.sqlite`` is migrated into it (readwrite) or read in place (readonly).
        ``missing_error``: what a ``readonly`` store with nothing to read raises."""
        root = Path(os.path.expanduser(str(dir)))
        return cls(root / SHARD_DIR, mode=mode, legacy=root / DB_NAME, missing_error=missing_error)


def read_call_log(path: str | Path) -> list[str]:
    """The distinct keys of a ``calls.jsonl`` (first-seen order); damaged lines are skipped."""
    out: dict[str, None] = {}
    p = Path(path)
    if not p.is_file():
        return []
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            k = json.loads(line)["key"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(k, str):
            out[k] = None
    return list(out)
