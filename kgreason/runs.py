"""Run-dir I/O: the append-only prediction store, the run-dir lock, metrics.json, and secret
scrubbing.

``predictions.jsonl`` is the source of truth for a run: one JSON line per finished example,
appended and flushed to disk as soon as the example finishes. A crash can at worst leave a
partial last line; a damaged line anywhere (a torn last line, bytes lost in the middle) is set
aside in ``predictions.damaged.jsonl`` on reopen, never taking a good row with it, and only its
example is answered again (:class:`PredictionStore`).

One run writes to a run dir at a time: :func:`lock_run_dir` holds an exclusive ``flock`` on
``<run dir>/run.lock`` for the whole run; a second run on the dir stops at once
(:class:`RunDirLocked`). The kernel drops the lock when the process ends, however it ends, so a
killed run never leaves a lock that blocks the next one.

An id can have several rows: on resume an example whose last row is an error is answered again
(``retry_errors``) and its new row is appended. **The last row per id wins** everywhere the file
is read (:class:`PredictionStore`, ``kgreason.score``, ``kgreason.tables``); the earlier rows stay
in the file as the record of the failed attempts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from omegaconf import DictConfig, OmegaConf

from kgreason.secrets import REDACTED, SECRET_KEY as SECRET_KEYS, register, register_from_config, scrub
from kgreason.textio import utf8_safe

log = logging.getLogger("kgreason")

_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _top_level_id(text: str) -> str | None:
    """The top-level ``"id"`` string of a (possibly torn) JSON object line, when the damage
    left it readable; ids nested in ``extra`` or ``trace`` are not taken for it."""
    depth, i, n, key_next = 0, 0, len(text), False
    while i < n:
        ch = text[i]
        if ch == '"':
            m = _STR.match(text, i)
            if m is None:
                return None
            j = m.end()
            while j < n and text[j] in " \t":
                j += 1
            if depth == 1 and key_next and j < n and text[j] == ":" and m.group(1) == "id":
                v = _STR.match(text, j + 1 + len(text[j + 1:]) - len(text[j + 1:].lstrip()))
                if v is None:
                    return None
                try:
                    return json.loads(v.group(0))
                except ValueError:
                    return None
            key_next = False
            i = m.end()
            continue
        if ch in "{[":
            depth += 1
            key_next = ch == "{" and depth == 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 1:
            key_next = True
        i += 1
    return None

LOCK_NAME = "run.lock"


def damaged_path(path: str | Path) -> Path:
    """Where :class:`PredictionStore` sets aside the damaged lines of ``path``
    (``predictions.jsonl`` → ``predictions.damaged.jsonl``)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.damaged{path.suffix or '.jsonl'}")


def _append_damaged(side: Path, source: str, entries: list[dict[str, Any]]) -> None:
    """Append the set-aside lines to the side file (fsynced before the source is rewritten);
    an entry already there (a crash between the two steps) is not written twice."""
    seen: set[tuple[Any, Any]] = set()
    if side.exists():
        for raw in side.read_bytes().splitlines():
            try:
                old = json.loads(raw)
                seen.add((old.get("line"), old.get("raw")))
            except (ValueError, AttributeError):
                continue
    text = utf8_safe("".join(json.dumps({"file": source, **e}, ensure_ascii=False, sort_keys=True) + "\n"
                             for e in entries if (e["line"], e["raw"]) not in seen))
    if not text:
        return
    with open(side, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


class RunDirLocked(RuntimeError):
    """Another run holds the run dir (its ``run.lock``); the message names the dir and the holder."""


class RunDirUnsafe(RunDirLocked):
    """``<run dir>/run.lock`` is a symbolic link or not a regular file: nothing is written through
    it; the run stops at once, as on a held lock."""


@contextlib.contextmanager
def lock_run_dir(out_dir: str | Path):
    """Hold an exclusive, non-blocking ``flock`` on ``<out_dir>/run.lock`` while the block runs.

    The lock file records the holder (pid, host, start time) for the refusal message. On exit
    the file is removed while still locked; a process that opened the old file meanwhile finds
    its inode gone after locking it and tries again, so two runs never both hold the dir. A
    process killed by any signal loses its lock with it (the kernel drops it): a stale
    ``run.lock`` is only a file and never blocks.

    Raises:
        RunDirLocked: another live process holds the lock.
    """
    import fcntl

    import stat

    out_dir = Path(out_dir)
    path = out_dir / LOCK_NAME
    while True:
        try:  # never through a link (a planted run.lock -> file would be truncated), never a FIFO's open
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:
            what = "a symbolic link" if os.path.islink(path) else "not a regular file"
            raise RunDirUnsafe(f"{path} is {what} ({e.strerror}); kgreason writes its lock only to a plain file "
                               "of its own: remove it, or use another hydra.run.dir") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RunDirUnsafe(f"{path} is not a regular file; kgreason writes its lock only to a plain file "
                               "of its own: remove it, or use another hydra.run.dir")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.read(fd, 4096).decode("utf-8", errors="replace").strip()
            finally:
                os.close(fd)
            raise RunDirLocked(
                f"{out_dir} is in use by another run ({holder or 'holder unknown'}); two runs writing one "
                "run dir would answer its examples twice. Wait for it to end, or use another hydra.run.dir") from None
        except OSError as e:  # a file system without flock (some network mounts): say so, run unlocked
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            log.warning("%s: cannot lock the run dir (%s); running without the lock: do not start a second run "
                        "on this dir while this one runs", out_dir, e)
            fd = -1
            break
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as it ended: lock the new one
    if fd < 0:
        yield None
        return
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, since "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime())}\n".encode())
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def dir_in_use(out_dir: str | Path) -> bool:
    """Another live process holds ``<out_dir>/run.lock`` (:func:`lock_run_dir`); a stale lock
    file of a killed run is not a hold. Nothing is created or changed."""
    import fcntl

    try:
        fd = os.open(Path(out_dir) / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def finished_run(out_dir: str | Path) -> bool:
    """``out_dir`` holds a finished run that did not fail: its ``metrics.json`` says
    ``run/status: complete`` (or, from before the status, is not marked partial) and there is no
    ``failed.json``."""
    d = Path(out_dir)
    try:
        m = json.loads((d / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(m, dict):
        return False
    done = m.get("run/status", "partial" if m.get("run/partial") else "complete") == "complete"
    return done and not (d / "failed.json").exists()


def unfinished_run(out_dir: str | Path, digest: str) -> int | None:
    """The rows written so far when ``out_dir`` holds an unfinished run (stopped by a signal, a
    kill, a crash or a dead endpoint: no complete ``metrics.json``) made with the config whose
    fingerprint is ``digest`` (``fingerprint.json``, kgreason/record.py) and no live process
    holds it; else ``None``."""
    d = Path(out_dir)
    try:
        fp = json.loads((d / "fingerprint.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(fp, dict) or fp.get("sha256") != digest:
        return None
    try:
        m = json.loads((d / "metrics.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        m = {}
    except (OSError, ValueError):
        return None
    if not isinstance(m, dict) or m.get("run/status", "partial" if m.get("run/partial") or not m else "complete") == "complete":
        return None
    pred = d / "predictions.jsonl"
    if not pred.is_file() and not (d / "prepare_stopped.json").is_file():
        return None
    if dir_in_use(d):
        return None
    try:
        return sum(1 for line in pred.read_bytes().splitlines() if line.strip()) if pred.is_file() else 0
    except OSError:
        return None


def row_problem(row: Mapping[str, Any]) -> str | None:
    """Why a parsed row cannot be a run's row, or None: its ``id`` must be a string, its
    ``metrics`` (when present) an object of metric name -> number or null, its ``error`` (when
    present) text or null. A row of another shape would pass the resume and then stop every
    summary of the run (issue 57, L13)."""
    if not isinstance(row.get("id"), str):
        return f"'id' is {type(row.get('id')).__name__}, expected a string"
    if "metrics" in row:
        m = row["metrics"]
        if not isinstance(m, dict):
            return f"'metrics' is {type(m).__name__}, expected an object of metric name -> number or null"
        bad = [k for k, v in m.items() if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)))]
        if bad:
            return f"'metrics' holds {bad[0]!r}: {m[bad[0]]!r}, expected a number or null"
    if row.get("error") is not None and not isinstance(row["error"], str):
        return f"'error' is {type(row['error']).__name__}, expected text or null"
    return None


class PredictionStore:
    """Append-only JSONL keyed by example id (the last row per id wins).

    On open, every line that is not one complete JSON object with an ``id`` (a torn last line
    after a crash, bytes damaged in the middle of the file, a stray value) is **set aside**: it
    is appended to ``<name>.damaged.jsonl`` beside the file (``{"line", "raw", "reason", "id"}``),
    removed from the file, and named in the log. Every good line stays, in its order (a damaged
    line used to end the read and truncate every good row after it). An example whose row was set
    aside has no row any more, so a resumed run answers it, and only it, again. A complete last
    row that only lacks its newline is a good row: it is kept and the newline added.
    ``repair=False`` reads without changing anything on disk (``damaged`` lists what was found).
    ``required``: the keys a row must have (a run's rows: ``id``, ``metrics``, ``error``).
    """

    def __init__(self, path: str | Path, *, repair: bool = True, required: tuple[str, ...] = ("id",)) -> None:
        self.path = Path(path)
        self.required = tuple(required)
        self.rows: dict[str, dict[str, Any]] = {}
        self.damaged: list[dict[str, Any]] = []
        if repair:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self._load(repair)

    @property
    def damaged_path(self) -> Path:
        return damaged_path(self.path)

    def _load(self, repair: bool) -> None:
        data = self.path.read_bytes()
        good: list[bytes] = []
        pieces = data.split(b"\n")
        last = len(pieces) - 1  # pieces[last] is what follows the final newline ("" when none)
        for i, raw in enumerate(pieces, start=1):
            if not raw.strip():
                continue
            reason = None
            try:
                row = json.loads(raw)
            except ValueError as e:  # JSONDecodeError, or bytes that are not UTF-8
                row = None
                reason = ("torn last line (no newline: the writer stopped mid-line)" if i - 1 == last
                          else f"not JSON ({getattr(e, 'msg', type(e).__name__)})")
            if reason is None and not isinstance(row, dict):
                reason = "not a JSON object"
            if reason is None and any(k not in row for k in self.required):
                reason = "a JSON object without " + ", ".join(repr(k) for k in self.required if k not in row)
            if reason is None:
                reason = row_problem(row)
            if reason is None:
                self.rows[row["id"]] = row
                good.append(raw)
                continue
            text = raw.decode("utf-8", errors="backslashreplace")
            self.damaged.append({"line": i, "reason": reason, "id": _top_level_id(text), "raw": scrub(text)})
        if not self.damaged and (not data or data.endswith(b"\n")):
            return
        if not repair:
            return
        clean = b"".join(g + b"\n" for g in good)
        if clean == data:
            return
        if self.damaged:
            _append_damaged(self.damaged_path, self.path.name, self.damaged)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(clean)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self.path)
        if self.damaged:
            where = ", ".join(f"line {d['line']} ({'id ' + str(d['id']) + ': ' if d['id'] else ''}{d['reason']})"
                              for d in self.damaged[:10])
            more = f" and {len(self.damaged) - 10} more" if len(self.damaged) > 10 else ""
            log.warning("%s: %d damaged line(s) set aside in %s: %s%s; %d good row(s) kept; the examples of the "
                        "set-aside lines have no row now and are answered again", self.path, len(self.damaged),
                        self.damaged_path, where, more, len(good))

    def __contains__(self, example_id: str) -> bool:
        return example_id in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows.values())

    def append(self, row: Mapping[str, Any]) -> None:
        raw = json.dumps(row, ensure_ascii=False, sort_keys=True)
        line = scrub(utf8_safe(raw)) + "\n"  # a server error can quote the key back; a lone surrogate: U+FFFD
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
    always (non-finite numbers become ``null``, lone surrogates U+FFFD) and scrubbed of registered secrets."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json.dumps(json_safe(obj), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    tmp.write_text(scrub(utf8_safe(text)) + "\n", encoding="utf-8")
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
