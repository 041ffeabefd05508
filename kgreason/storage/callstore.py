"""A persistent key → JSON store that many processes on many hosts can share: the LLM call cache
(``kgreason.storage.llm_calls``, used by ``kgreason.llm.cache``) and the SPARQL response cache (``kgreason.kg.sparql``) keep their entries
in one.

**Layout.** A store is a directory of append-only *shard* files, one per writing process
(``<host>-<pid>-<random>.jsonl``): a process only ever appends to its own shard, so no two
processes write one file and no lock is needed, on a local disk or on NFS/Lustre/GPFS. There is
no SQLite file and no WAL (SQLite's WAL needs shared memory on one host). Each line is one record::

    {"sha256":"<hex of the rec text>","rec":{"key":...,"t":...,"backend":...,"model":...,"method":...,"value":...}}

written with one ``O_APPEND`` ``write`` (the shard is opened for each record, so a compaction that
renames it never swallows a later record). JSON is written with ``ensure_ascii=True``, so any
Python string is storable (lone UTF-16 surrogates included) and a line never holds a raw newline.

**Reading.** Each store object keeps an index key → (shard, offset, length, time), built from every
shard when it opens and refreshed on a miss by reading the bytes each shard gained since (new
shards included). A line is indexed only when it ends with a newline and its checksum matches: a
torn last line (a writer killed mid-write) is left alone, and a damaged line is skipped with a
warning, so neither is ever handed out. When a key has several records the newest (by ``t``)
wins: a later ``put`` replaces an earlier one, as ``INSERT OR REPLACE`` did.

**Older caches.** A store opened with ``legacy=`` (the SQLite file of kgreason ≤ 0.x,
``llm_calls.sqlite``) is migrated on first open in ``readwrite`` mode: its rows are copied into the
shard ``legacy-sqlite.jsonl`` (written to a temporary name and renamed, so two processes doing it
at once are harmless) and the SQLite file is not read or written again. In ``readonly`` mode the
SQLite file is read in place (nothing is written).

**Compaction.** :func:`merge` (``kgreason cache merge DIR``) folds every shard into one and
:func:`stats` (``kgreason cache stats DIR``) describes a directory (shards, records, keys, torn or
damaged lines).

Ground floor: imports nothing from kgreason but :mod:`kgreason.types`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import socket
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator

from kgreason.types import to_jsonable

log = logging.getLogger(__name__)

MODES = ("readwrite", "readonly", "off")
LLM_STORE, LLM_LEGACY = "llm_calls", "llm_calls.sqlite"  # the LLM call cache's names in an llm_cache.dir
SHARD_SUFFIX = ".jsonl"
LEGACY_SHARD = "legacy-sqlite.jsonl"
_PREFIX = b'{"sha256":"'
_MID = b'","rec":'
_HEAD = len(_PREFIX) + 64 + len(_MID)
MAX_OPEN_SHARDS = 64  # file descriptors kept open for reads (least recently used closed first)


class StoreMissing(LookupError):
    """A ``readonly`` store has nothing to read."""


class StoreCorrupt(RuntimeError):
    """The store's legacy SQLite file is damaged; the message names it and says what to do."""


def encode_record(key: str, value: Any, *, backend: str = "", model: str = "", method: str = "",
                  t: float | None = None) -> bytes:
    """One shard line (bytes, newline included) holding ``key → value`` and its checksum."""
    rec = json.dumps({"key": key, "t": time.time() if t is None else t, "backend": backend, "model": model,
                      "method": method, "value": to_jsonable(value)}, ensure_ascii=True, separators=(",", ":"))
    body = rec.encode("ascii")
    return _PREFIX + hashlib.sha256(body).hexdigest().encode("ascii") + _MID + body + b"}\n"


def decode_line(line: bytes) -> dict[str, Any] | None:
    """The record of one complete shard line (newline included or not), or None when the line is
    damaged (bad checksum, not JSON, not a record)."""
    line = line.rstrip(b"\n")
    if len(line) < _HEAD + 2 or not line.startswith(_PREFIX) or line[_HEAD - len(_MID):_HEAD] != _MID \
            or not line.endswith(b"}"):
        return None
    body = line[_HEAD:-1]
    if hashlib.sha256(body).hexdigest().encode("ascii") != line[len(_PREFIX):len(_PREFIX) + 64]:
        return None
    try:
        rec = json.loads(body)
    except ValueError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), str) or "value" not in rec:
        return None
    return rec


_KEY_T = re.compile(rb'\{"key":"((?:[^"\\]|\\.)*)","t":([-0-9.eE+]+),')


def peek_line(line: bytes) -> tuple[str, float] | None:
    """(key, t) of one complete shard line whose checksum matches, without parsing its value;
    None when the line is damaged (the index is built with this; a value is parsed when read)."""
    line = line.rstrip(b"\n")
    if len(line) < _HEAD + 2 or not line.startswith(_PREFIX) or line[_HEAD - len(_MID):_HEAD] != _MID \
            or not line.endswith(b"}"):
        return None
    body = line[_HEAD:-1]
    if hashlib.sha256(body).digest().hex().encode("ascii") != line[len(_PREFIX):len(_PREFIX) + 64]:
        return None
    m = _KEY_T.match(body)
    if m is None:
        rec = decode_line(line)
        return None if rec is None else (rec["key"], float(rec.get("t") or 0.0))
    raw = m.group(1)
    try:
        key = json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode("ascii")
        return key, float(m.group(2))
    except ValueError:
        return None


def iter_shard(path: Path, start: int = 0, data: bytes | None = None,
               peek: bool = False) -> Iterator[tuple[int, int, Any]]:
    """(offset, length, record or None when damaged) of every complete line of ``path`` from byte
    ``start`` (or of ``data``, the bytes read from there); a last line without its newline (torn,
    or still being written) is not yielded. ``peek``: yield :func:`peek_line`'s (key, t) instead
    of the whole record."""
    if data is None:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read()
    pos = 0
    parse = peek_line if peek else decode_line
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            return
        yield start + pos, nl + 1 - pos, parse(data[pos:nl + 1])
        pos = nl + 1


#: what an older kgreason's merge, stopped half-way, left: a shard renamed ``.<name>.merging``
#: (hidden from every reader); read in place, and renamed back by the next read-write open or merge
LEGACY_ASIDE = re.compile(r"^\.(.+\.jsonl)\.merging$")
MERGE_LOCK = ".merge.lock"


def is_shard(name: str) -> bool:
    """A file name of the store's records: ``*.jsonl`` not hidden, or an older merge's leftover."""
    return (name.endswith(SHARD_SUFFIX) and not name.startswith(".")) or LEGACY_ASIDE.match(name) is not None


def shard_name() -> str:
    """A name no other process (on this or another host) uses: host, pid and a random token."""
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(4)}{SHARD_SUFFIX}"


def _legacy_rows(path: Path, readonly: bool) -> list[tuple[str, str, str, str, str, float]]:
    """Every row of an old SQLite store file; :class:`StoreCorrupt` naming it when it is damaged."""
    try:
        uri = f"file:{path}?mode=ro" if readonly else str(path)
        conn = sqlite3.connect(uri, uri=readonly, timeout=30)
        try:
            res = conn.execute("PRAGMA quick_check").fetchall()
            if [r[0] for r in res] != ["ok"]:
                raise StoreCorrupt(f"{path}: the cache file fails SQLite's quick check "
                                   f"({'; '.join(str(r[0]) for r in res[:3])}); move it away to start a new "
                                   "cache (cached replies in it are lost), or set the cache mode to off")
            return conn.execute("SELECT key, COALESCE(backend,''), COALESCE(model,''), COALESCE(method,''), value, "
                                "COALESCE(created, 0) FROM calls ORDER BY rowid").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise StoreCorrupt(f"{path}: not a usable cache file ({e}); move it away to start a new cache, "
                           "or set the cache mode to off") from None


class KeyValueStore:
    """Key → JSON value in a directory of append-only shards (see the module doc).

    Modes: ``readwrite``; ``readonly`` (replay: nothing is written; a store with no shard and no
    legacy file raises :attr:`missing_error`); ``off`` (nothing is opened, every ``get`` misses).

    Args:
        path: the shard directory.
        legacy: an old SQLite store file to migrate (readwrite) or read in place (readonly).
        missing_error: what a ``readonly`` store with nothing to read raises (default: the class's
            :attr:`missing_error`; the LLM cache names its own, :func:`kgreason.llm.cache.open_store`).
    """

    missing_error: type[Exception] = StoreMissing

    def __init__(self, path: str | Path | None, mode: str = "readwrite", legacy: str | Path | None = None,
                 missing_error: type[Exception] | None = None) -> None:
        if missing_error is not None:
            self.missing_error = missing_error
        if mode not in MODES:
            raise ValueError(f"cache mode must be one of {MODES}, got {mode!r}")
        self.mode, self.path = mode, (Path(path) if path is not None else None)
        self.legacy = Path(legacy) if legacy is not None else None
        self._lock = threading.RLock()
        self._index: dict[str, tuple[int, int, int, float]] = {}  # key → (shard no, offset, length, t)
        self._shards: list[Path] = []
        self._shard_no: dict[str, int] = {}
        self._read_pos: dict[int, int] = {}
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._ino: dict[int, int] = {}  # shard no → the inode it was indexed from (a merge replaces files)
        self._legacy_values: dict[str, tuple[str, float]] = {}  # readonly, unmigrated legacy rows
        self._own: str | None = None
        self._open = False
        self.damaged = 0
        if mode == "off":
            return
        if self.path is None:
            raise ValueError("KeyValueStore needs a path unless mode='off'")
        has_legacy = self.legacy is not None and self.legacy.is_file()
        if mode == "readonly" and not self.path.is_dir() and not has_legacy:
            raise self.missing_error(f"cache mode readonly but no cache file at {self.path} "
                                     f"(no shard directory{'' if self.legacy is None else ' and no ' + str(self.legacy)})")
        if has_legacy:
            self._load_legacy()
        if mode == "readwrite" and self.path.is_dir():
            recover(self.path)
        self._open = True
        self._refresh()

    # ------------------------------------------------------------------ legacy SQLite file
    def _load_legacy(self) -> None:
        assert self.legacy is not None and self.path is not None
        target = self.path / LEGACY_SHARD
        if target.exists():
            return  # migrated before
        rows = _legacy_rows(self.legacy, readonly=self.mode == "readonly")
        if self.mode == "readonly":
            self._legacy_values = {k: (v, float(t)) for k, _b, _m, _f, v, t in rows}
            return
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".{LEGACY_SHARD}.{shard_name()}.tmp"
        with open(tmp, "wb") as f:
            for k, b, m, meth, v, t in rows:
                try:
                    value = json.loads(v)
                except (TypeError, ValueError):
                    continue  # a damaged row was a miss before and stays one
                f.write(encode_record(str(k), value, backend=b, model=m, method=meth, t=float(t)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        log.info("%s: %d entries of %s migrated to %s (the SQLite file is no longer used)", self.path, len(rows),
                 self.legacy, target)

    # ------------------------------------------------------------------ index
    def _refresh(self) -> None:
        """Index the lines every shard gained since the last look (new shards included). A shard
        this store indexed that was renamed, removed or replaced since (a merge) makes it index
        every shard again: its records are in the merged shard, or in the file it was renamed to."""
        if self.path is None or not self.path.is_dir():
            return
        with self._lock:
            try:
                names = sorted(n for n in os.listdir(self.path) if is_shard(n))
            except FileNotFoundError:
                return
            found: dict[str, os.stat_result] = {}
            for name in names:
                try:
                    found[name] = os.stat(self.path / name)
                except FileNotFoundError:
                    continue  # compacted away since listdir
            if any(name not in found or found[name].st_ino != self._ino.get(no)
                   for name, no in self._shard_no.items()):
                self._clear()
            for name, st in found.items():
                no = self._shard_no.get(name)
                if no is None:
                    no = self._add_shard(name, st.st_ino)
                size = st.st_size
                if size <= self._read_pos[no]:
                    continue
                end = self._read_pos[no]
                try:
                    data = os.pread(self._fd(no), size - end, end)
                except OSError:
                    continue  # replaced since the stat: the next look indexes it again
                lines = list(iter_shard(self._shards[no], end, data, peek=True))
                if lines and lines[-1][2] is None:
                    lines.pop()  # a last line that does not check out yet may still be landing: read it again later
                index = self._index
                for off, ln, kt in lines:
                    end = off + ln
                    if kt is None:
                        self.damaged += 1
                        log.warning("%s: a damaged line at byte %d is skipped", self._shards[no], off)
                        continue
                    key, t = kt
                    old = index.get(key)
                    if old is None or t >= old[3]:
                        index[key] = (no, off, ln, t)
                self._read_pos[no] = end

    def _add_shard(self, name: str, ino: int) -> int:
        """A new shard number for the file ``name`` (inode ``ino``), read from its start."""
        assert self.path is not None
        no = self._shard_no[name] = len(self._shards)
        self._shards.append(self.path / name)
        self._read_pos[no] = 0
        self._ino[no] = ino
        return no

    def _fd(self, no: int) -> int:
        """A read descriptor of shard ``no``: the very file it was indexed from (FileNotFoundError
        when its name now holds another file, or none)."""
        fd = self._fds.get(no)
        if fd is not None:
            self._fds.move_to_end(no)
            return fd
        fd = os.open(self._shards[no], os.O_RDONLY)
        if os.fstat(fd).st_ino != self._ino.get(no):
            os.close(fd)
            raise FileNotFoundError(f"{self._shards[no]}: replaced since it was indexed")
        self._fds[no] = fd
        while len(self._fds) > MAX_OPEN_SHARDS:
            os.close(self._fds.popitem(last=False)[1])
        return fd

    def _read(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            line = b""
            for attempt in (1, 2):
                at = self._index.get(key)
                if at is None:
                    return None
                no, off, ln, _t = at
                try:
                    line = os.pread(self._fd(no), ln, off)
                    break
                except OSError:  # the shard was merged away: index what the dir holds now, and look again
                    if attempt == 2:
                        return None
                    self._clear()
                    self._refresh()
        if len(line) != ln or not line.endswith(b"}\n"):
            return None
        try:  # the line's checksum was checked when it was indexed, and a shard is only appended to
            rec = json.loads(line[_HEAD:-2])
        except ValueError:
            return None
        return rec if isinstance(rec, dict) and "value" in rec else None

    def _clear(self) -> None:
        """Forget every shard (not the unmigrated legacy rows); the next refresh reads them all."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._index.clear()
        self._shards.clear()
        self._shard_no.clear()
        self._read_pos.clear()
        self._ino.clear()

    def _reset(self) -> None:
        self._clear()
        self._refresh()

    # ------------------------------------------------------------------ API
    def get(self, key: str) -> Any | None:
        if not self._open:
            return None
        if key not in self._index:
            self._refresh()
        rec = self._read(key)
        if rec is not None and rec.get("key") == key:
            return rec["value"]
        if rec is None and key in self._index:
            log.warning("%s: the entry of key %s does not read back whole; treated as a miss", self.path, key)
        if key in self._legacy_values:
            v, _t = self._legacy_values[key]
            try:
                return json.loads(v)
            except (TypeError, ValueError):
                log.warning("%s: a stored value is not valid JSON; treated as a miss", self.legacy)
        return None

    def put(self, key: str, value: Any, *, backend: str = "", model: str = "", method: str = "") -> None:
        if not self._open or self.mode != "readwrite":
            return
        t = time.time()
        line = encode_record(key, value, backend=backend, model=model, method=method, t=t)
        with self._lock:
            assert self.path is not None
            if self._own is None:
                self.path.mkdir(parents=True, exist_ok=True)
                self._own = shard_name()
            fd = os.open(self.path / self._own, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(line)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                end = os.lseek(fd, 0, os.SEEK_CUR)
                ino = os.fstat(fd).st_ino
            finally:
                os.close(fd)
            no = self._shard_no.get(self._own)
            if no is None or self._ino.get(no) != ino:  # new, or a merge renamed the old one away
                no = self._add_shard(self._own, ino)
            self._index[key] = (no, end - len(line), len(line), t)
            self._legacy_values.pop(key, None)

    def keys(self) -> list[str]:
        self._refresh()
        return sorted(set(self._index) | set(self._legacy_values))

    def record(self, key: str) -> dict[str, Any] | None:
        """The whole stored record of ``key`` (key, t, backend, model, method, value) or None."""
        if not self._open:
            return None
        if key not in self._index:
            self._refresh()
        rec = self._read(key)
        if rec is None and key in self._legacy_values:
            v, t = self._legacy_values[key]
            try:
                return {"key": key, "t": t, "backend": "", "model": "", "method": "", "value": json.loads(v)}
            except (TypeError, ValueError):
                return None
        return rec

    def __len__(self) -> int:
        if not self._open:
            return 0
        self._refresh()
        return len(set(self._index) | set(self._legacy_values))

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._open = False

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def shard_files(dir: str | Path) -> list[Path]:
    """The files of a shard directory that hold records (an older merge's leftovers included)."""
    d = Path(dir)
    return sorted(p for p in d.iterdir() if is_shard(p.name)) if d.is_dir() else []


def stats(dir: str | Path) -> dict[str, Any]:
    """What a shard directory holds: shards, records, distinct keys, damaged lines, torn tails,
    bytes, and entries per (backend, model, method)."""
    out: dict[str, Any] = {"dir": str(dir), "shards": 0, "records": 0, "keys": 0, "damaged_lines": 0,
                           "torn_tails": 0, "bytes": 0, "by_model": {}}
    keys: dict[str, tuple[str, str, str]] = {}
    for p in shard_files(dir):
        try:
            size = p.stat().st_size
            lines = list(iter_shard(p))
        except FileNotFoundError:
            continue  # merged away since it was listed: its records are in the merged shard
        out["shards"] += 1
        out["bytes"] += size
        end = 0
        for off, ln, rec in lines:
            end = off + ln
            if rec is None:
                out["damaged_lines"] += 1
                continue
            out["records"] += 1
            keys[rec["key"]] = (str(rec.get("backend", "")), str(rec.get("model", "")), str(rec.get("method", "")))
        if end < size:
            out["torn_tails"] += 1
    out["keys"] = len(keys)
    by: dict[str, int] = {}
    for b, m, f in keys.values():
        by[f"{b}/{m}/{f}"] = by.get(f"{b}/{m}/{f}", 0) + 1
    out["by_model"] = dict(sorted(by.items()))
    return out


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover(dir: str | Path) -> int:
    """Put back what an interrupted merge left, so that every record reads: an older kgreason's
    hidden ``.<name>.merging`` shards are renamed to visible shard names (this kgreason's merge
    never hides a shard). Returns how many were. Safe beside readers and writers; the files stay
    shards (the next merge folds them)."""
    d = Path(dir)
    n = 0
    for name in sorted(os.listdir(d)) if d.is_dir() else ():
        m = LEGACY_ASIDE.match(name)
        if m is None:
            continue
        target = d / m.group(1) if not (d / m.group(1)).exists() else d / f"recovered-{secrets.token_hex(4)}{SHARD_SUFFIX}"
        try:
            os.rename(d / name, target)
            n += 1
        except FileNotFoundError:
            continue  # another process recovered it
    if n:
        log.info("%s: %d shard(s) an interrupted merge had set aside are readable again", d, n)
    return n


def merge(dir: str | Path, grace_s: float = 2.0) -> dict[str, Any]:
    """Fold every shard of ``dir`` into one (the newest record of each key; damaged lines and torn
    tails dropped), so that no record is ever lost, whatever stops it and whoever writes beside it:

    1. an exclusive lock (``.merge.lock``, ``flock``): a second merge waits for the first;
    2. the leftovers of an interrupted merge are put back (:func:`recover`) and a merged file it
       did not finish is removed;
    3. each shard is renamed to a *visible* shard name (``merging-<token>-<n>.jsonl``): readers
       keep reading it, and a writer's next record goes to a fresh file of its own name;
    4. after ``grace_s`` seconds (a write opened just before the rename lands meanwhile) the set-
       aside shards are read and the merged shard is written to a temporary name, synced, renamed
       into place and the directory synced;
    5. only then is each set-aside shard removed, unless it grew since it was read (a write stalled
       longer than ``grace_s``): that one stays a shard, and the next merge folds it.

    A kill at any step leaves every record in a readable shard (at worst twice, which a lookup and
    the next merge resolve by time); a full disk stops at step 4 with the shards in place."""
    import fcntl

    d = Path(dir)
    lock = os.open(d / MERGE_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("%s: another merge is running; waiting for it to finish", d)
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _merge_locked(d, grace_s)
    finally:
        os.close(lock)  # releases the lock (also when the process is killed)


def _merge_locked(d: Path, grace_s: float) -> dict[str, Any]:
    recover(d)
    for p in d.iterdir():
        if p.name.startswith(".merged-") and p.name.endswith(".tmp"):  # a merge killed while writing
            p.unlink(missing_ok=True)
    shards = shard_files(d)
    if len(shards) <= 1:
        return {"merged": 0, "keys": stats(d)["keys"], "shards_before": len(shards)}
    token = secrets.token_hex(4)
    aside: list[Path] = []
    for i, p in enumerate(shards):
        q = d / f"merging-{token}-{i}{SHARD_SUFFIX}"
        try:
            os.rename(p, q)
        except FileNotFoundError:
            continue
        aside.append(q)
    time.sleep(grace_s)
    best: dict[str, tuple[float, bytes]] = {}
    read: dict[Path, int] = {}
    for q in aside:
        with open(q, "rb") as f:
            data = f.read()
        read[q] = len(data)
        for _off, _ln, rec in iter_shard(q, data=data):
            if rec is None:
                continue
            t = float(rec.get("t") or 0.0)
            if rec["key"] not in best or t >= best[rec["key"]][0]:
                best[rec["key"]] = (t, encode_record(rec["key"], rec["value"], backend=rec.get("backend", ""),
                                                      model=rec.get("model", ""), method=rec.get("method", ""), t=t))
    name = f"merged-{time.strftime('%Y%m%dT%H%M%S')}-{token}{SHARD_SUFFIX}"
    tmp = d / f".{name}.tmp"
    try:
        with open(tmp, "wb") as f:
            for k in sorted(best):
                f.write(best[k][1])
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, d / name)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(d)
    kept = 0
    for q in aside:
        try:
            grew = q.stat().st_size != read[q]
        except FileNotFoundError:
            continue
        if grew:  # a write that landed after it was read: it stays a shard until the next merge
            kept += 1
            continue
        os.unlink(q)
    _fsync_dir(d)
    return {"merged": len(aside) - kept, "keys": len(best), "shards_before": len(shards), "into": name,
            "kept": kept}


__all__ = ["LLM_STORE", "LLM_LEGACY", "KeyValueStore", "StoreMissing", "StoreCorrupt", "MODES", "encode_record", "decode_line", "iter_shard",
           "merge", "recover", "stats", "shard_files", "is_shard"]
