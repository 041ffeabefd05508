"""A small persistent key → JSON store on SQLite: the LLM call cache (``kgreason.llm.cache``) and
the SPARQL response cache (``kgreason.kg.sparql``) both keep their entries in one.

Ground floor: imports nothing from kgreason but :mod:`kgreason.types`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from kgreason.types import to_jsonable

log = logging.getLogger(__name__)

MODES = ("readwrite", "readonly", "off")


class StoreMissing(LookupError):
    """A ``readonly`` store has no file to read."""


class StoreCorrupt(RuntimeError):
    """The store's file is damaged; the message names it and says what to do."""


class KeyValueStore:
    """Key → JSON value in one SQLite file (WAL, safe for several processes and threads).

    Modes: ``readwrite``; ``readonly`` (replay: nothing is written; a missing file raises
    :attr:`missing_error`); ``off`` (no file, every ``get`` misses).

    A file that is not a SQLite database or fails SQLite's quick check raises
    :class:`StoreCorrupt` once, when the store opens, naming the file; a stored value that is
    not valid JSON is reported as a miss by :meth:`get` (and replaced by the next ``put``), so a
    damaged entry is never handed out as a value.
    """

    missing_error: type[Exception] = StoreMissing

    def __init__(self, path: str | Path | None, mode: str = "readwrite", busy_timeout_ms: int = 30_000) -> None:
        if mode not in MODES:
            raise ValueError(f"cache mode must be one of {MODES}, got {mode!r}")
        self.mode, self.path = mode, (Path(path) if path is not None else None)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        if mode == "off":
            return
        if self.path is None:
            raise ValueError("CallStore needs a path unless mode='off'")
        if mode == "readonly" and not self.path.exists():
            raise self.missing_error(f"cache mode readonly but no cache file at {self.path}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=busy_timeout_ms / 1000, check_same_thread=False,
                                         isolation_level=None)
            self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            if self.path.exists() and self.path.stat().st_size:
                res = self._retry(lambda: self._conn.execute("PRAGMA quick_check").fetchall())
                if [r[0] for r in res] != ["ok"]:
                    raise StoreCorrupt(f"{self.path}: the cache file fails SQLite's quick check "
                                       f"({'; '.join(str(r[0]) for r in res[:3])}); move it away to start a new "
                                       "cache (cached replies in it are lost), or set the cache mode to off")
            if mode == "readwrite":
                self._retry(lambda: self._conn.execute("PRAGMA journal_mode=WAL"))
                self._retry(lambda: self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, backend TEXT, model TEXT, "
                    "method TEXT, value TEXT NOT NULL, created REAL)"))
            else:
                self._conn.execute("SELECT 1 FROM calls LIMIT 1").fetchall()
        except sqlite3.DatabaseError as e:
            self.close()
            raise StoreCorrupt(f"{self.path}: not a usable cache file ({e}); move it away to start a new cache, "
                               "or set the cache mode to off") from None

    @staticmethod
    def _retry(fn, tries: int = 50):
        for i in range(tries):
            try:
                return fn()
            except sqlite3.OperationalError as e:  # "database is locked" beyond busy_timeout
                if "locked" not in str(e) or i == tries - 1:
                    raise
                time.sleep(0.05 * (i + 1))

    def get(self, key: str) -> Any | None:
        if self._conn is None:
            return None
        with self._lock:
            row = self._retry(lambda: self._conn.execute("SELECT value FROM calls WHERE key=?", (key,)).fetchone())
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except (json.JSONDecodeError, TypeError):
            log.warning("%s: a stored value is not valid JSON; treated as a miss", self.path)
            return None

    def put(self, key: str, value: Any, *, backend: str = "", model: str = "", method: str = "") -> None:
        if self._conn is None or self.mode != "readwrite":
            return
        blob = json.dumps(to_jsonable(value), ensure_ascii=False)
        with self._lock:
            self._retry(lambda: self._conn.execute(
                "INSERT OR REPLACE INTO calls(key, backend, model, method, value, created) VALUES (?,?,?,?,?,?)",
                (key, backend, model, method, blob, time.time())))

    def __len__(self) -> int:
        if self._conn is None:
            return 0
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


__all__ = ["KeyValueStore", "StoreMissing", "StoreCorrupt", "MODES"]
