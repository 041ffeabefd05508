"""The embedder's text cache: vectors of texts that are not a KG's (questions, passages, generated
text), keyed by the SHA-256 of the text, in one SQLite file per model
(``<embedder.cache_dir>/texts-<model key>.sqlite``; :meth:`kgreason.embed.Embedder.fingerprint`
names the model and its settings, so another model never reads these vectors).

Locking is SQLite's: WAL journal, ``BEGIN IMMEDIATE`` writes and a 120 s busy wait, so the
processes of one machine share the file. A key is written once (``INSERT OR IGNORE``): the
vector of a text never changes for one model.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np


class TextCache:
    """Vectors by text hash in one SQLite file (shared by processes; WAL, busy wait)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), timeout=120, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (key BLOB PRIMARY KEY, v BLOB NOT NULL)")

    def get(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        out: dict[bytes, np.ndarray] = {}
        with self._lock:
            for s in range(0, len(keys), 500):
                part = keys[s:s + 500]
                q = f"SELECT key, v FROM vec WHERE key IN ({','.join('?' * len(part))})"
                for k, v in self._db.execute(q, part):
                    out[bytes(k)] = np.frombuffer(v, dtype=np.float32)
        return out

    def put(self, items: list[tuple[bytes, np.ndarray]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR IGNORE INTO vec (key, v) VALUES (?, ?)",
                                     [(k, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for k, v in items])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()
