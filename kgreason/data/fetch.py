"""Download, check and convert the datasets and KGs of :mod:`kgreason.data.catalog`.

Two thin network functions, :func:`download` (a URL → appended to a ``.part`` file, resuming with
an HTTP ``Range`` request) and :func:`hub_download` (a Hugging Face split → JSON Lines), are the
only code that touches the network. Everything after them — size and SHA-256 checks, unpacking,
conversion to the formats the loaders read, placing files under the data root — runs offline and
is tested on small files in the upstream formats (tests/data/test_data_cli.py).

Resuming: a download goes to ``<staging>/<name>.part``; an interrupted one leaves the bytes it got,
and the next ``kgreason data fetch`` asks the server for the rest (``Range: bytes=<have>-``; a
server that ignores it sends the whole file again, which replaces the part). Staged downloads stay
in ``<data root>/.downloads/<name>/`` (delete them once converted).

A download is believed only when it is whole (issue 44): a transfer never writes past the pinned
size (or, unpinned, past the file's ceiling); the part becomes the file only when its checks pass
(size and SHA-256 pins, the size the server announced, and for files the upstream does not pin a
check of their own: a whole-file parse, a closed last record, a row count, a zip's CRCs), and a
file is "already complete" only when it passes them again. Conversions run in a fresh staging
folder (archives unpacked there, refusing ``..``, absolute names, symlinks and anything past the
size and ratio ceilings) and are moved into the data root only when all of it passed; nothing is
written outside the data root whatever a variable says; one ``fetch`` / ``prepare`` of a dataset
at a time (a lock in its staging folder).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
import shutil
import stat
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import tempfile
import zipfile
import zlib
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path
from typing import Callable, Iterable

from kgreason.data.catalog import Recipe, Remote, Source
from kgreason.textio import utf8_safe

USER_AGENT = "kgreason-data/0.1 (+https://github.com/; python urllib)"
CHUNK = 1 << 20
#: the most bytes a download of a file without a pinned size (or a ceiling of its own) may write
MAX_UNPINNED_BYTES = 64 << 30
#: ceilings on what unpacking archives may write: in all, and as a multiple of the archives' size
MAX_UNPACK_BYTES = 256 << 30
MAX_UNPACK_RATIO = 200.0
#: how long a fetch or prepare waits for another one of the same dataset to finish
LOCK_WAIT_S = 6 * 3600.0


class FetchError(RuntimeError):
    """A download or conversion that cannot finish; the message says what to do next."""


class NoNetwork(FetchError):
    """A host name did not resolve: there is no network (or no DNS). ``kgreason data fetch``
    stops at the first one instead of trying every other source."""


#: what a failed name resolution says, in the exceptions urllib, requests/urllib3 and httpx raise
_NO_DNS = ("Name or service not known", "Temporary failure in name resolution", "nodename nor servname",
           "getaddrinfo failed", "No address associated with hostname", "NameResolutionError",
           "Failed to resolve", "Could not resolve host")


def no_network(e: BaseException) -> bool:
    """Whether ``e`` (or an exception it wraps) is a failed host-name resolution."""
    import socket

    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, socket.gaierror) or any(m in str(x) for m in _NO_DNS):
            return True
        reason = getattr(x, "reason", None)
        todo += [x.__cause__, x.__context__, reason if isinstance(reason, BaseException) else None]
    return False


# ----------------------------------------------------------------------------- network (thin)


class TooLong(OSError):
    """The server sent more bytes than the file can have (its pin, or its ceiling)."""


def _copy_capped(fin, fout, room: int | None) -> None:
    """Copy ``fin`` to ``fout``, at most ``room`` bytes; :class:`TooLong` (after writing exactly
    ``room`` bytes) when the source has more."""
    while True:
        want = CHUNK if room is None else min(CHUNK, room + 1)
        if want <= 0:
            return
        block = fin.read(want)
        if not block:
            return
        if room is not None and len(block) > room:
            fout.write(block[:room])
            raise TooLong(f"more than the {room:,} bytes still expected")
        fout.write(block)
        if room is not None:
            room -= len(block)


def download(url: str, part: Path, timeout: float = 60.0, limit: int | None = None) -> int | None:
    """Append the bytes of ``url`` that ``part`` lacks (``Range: bytes=<size of part>-``), never
    letting ``part`` grow past ``limit`` bytes (a pinned size or a ceiling: an endless or
    oversized body raises :class:`TooLong` at that size). Returns the whole file's size as the
    server announced it (``Content-Length`` of a 200, the total of a 206's ``Content-Range``),
    else None.

    ``file://`` URLs are read the same way (from the offset). A server answering 200 to a range
    request (it ignores ranges) restarts the part; 416 (range past the end) leaves it as it is.
    Raises whatever the transfer raises; the bytes already written stay in ``part``.
    """
    have = part.stat().st_size if part.exists() else 0
    room = None if limit is None else max(0, limit - have)
    if url.startswith("file://"):
        src = Path(urllib.request.url2pathname(url[len("file://"):]))
        with open(src, "rb") as fin, open(part, "ab") as fout:
            fin.seek(have)
            _copy_capped(fin, fout, room)
        return src.stat().st_size
    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left to send
            return None
        raise
    with resp:
        status = getattr(resp, "status", None) or resp.getcode()
        total = None
        if have and status == 206:
            rng = resp.headers.get("Content-Range", "")
            start = rng.split()[1].split("-")[0] if rng.startswith("bytes ") else str(have)
            if start != str(have):
                raise OSError(f"asked for bytes from {have}, the server sent {rng!r}")
            tail = rng.rsplit("/", 1)[-1]
            total = int(tail) if tail.isdigit() else None
        else:
            length = resp.headers.get("Content-Length", "")
            total = int(length) if length.isdigit() else None
        mode = "ab" if (have and status == 206) else "wb"
        if mode == "wb":
            room = limit
        with open(part, mode) as f:
            _copy_capped(resp, f, room)
        return total


def hub_download(hub_id: str, config: str | None, split: str, part: Path) -> None:
    """A Hugging Face dataset split → JSON Lines at ``part`` (needs ``pip install 'kgreason[hub]'``)."""
    from kgreason.data.kgqa import hub_records

    os.environ.pop("HF_HUB_OFFLINE", None)  # this command is the one place meant to download
    os.environ.pop("HF_DATASETS_OFFLINE", None)
    records = hub_records(hub_id, split, config)
    with open(part, "w", encoding="utf-8") as f:
        for r in records:
            f.write(utf8_safe(json.dumps(r, ensure_ascii=False, default=str)) + "\n")


# ----------------------------------------------------------------------------- one file


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def content_problem(path: Path, check: str | None) -> str | None:
    """What is wrong with ``path`` for a file whose upstream gives no pin, by its ``check``
    (:class:`~kgreason.data.catalog.Remote`): ``json`` (the whole file parses), ``jsonl`` (every
    line parses and the last one is closed by a newline), ``zip`` (the central directory at the
    end is there and every member's CRC matches), ``rows:N`` (a CSV of exactly N records after
    its header); None when it passes or there is no check."""
    if not check:
        return None
    try:
        if check == "json":
            with open(path, "rb") as f:
                json.load(f)
        elif check == "jsonl":
            n, last = 0, b"\n"
            with open(path, "rb") as f:
                for i, line in enumerate(f, 1):
                    last = line
                    if line.strip():
                        json.loads(line)
                        n += 1
            if not last.endswith(b"\n"):
                return f"its last line ({n} records read) is not closed by a newline: the file is cut"
            if n == 0:
                return "it holds no records"
        elif check == "zip":
            if not zipfile.is_zipfile(path):
                return "it is not a whole zip archive (no central directory at its end: cut or not a zip)"
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            if bad is not None:
                return f"its member {bad} fails its CRC check"
        elif check.startswith("rows:"):
            import csv

            want = int(check.split(":", 1)[1])
            with open(path, encoding="utf-8", newline="") as f:
                got = sum(1 for _ in csv.reader(f)) - 1
            if got != want:
                return f"{got:,} records after the header, expected {want:,}"
        else:
            raise ValueError(f"unknown check {check!r}")
    except (ValueError, UnicodeDecodeError, zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
        if isinstance(e, ValueError) and str(e).startswith("unknown check"):
            raise
        return f"it does not parse as {check} ({type(e).__name__}: {str(e)[:160]})"
    return None


def _check(path: Path, remote: Remote, verify: bool, announced: int | None = None) -> str | None:
    """``None`` when ``path`` is the whole file: its size and hash match the remote's pins, its
    size is what the server announced, and the remote's own content check passes (all skipped
    with ``verify`` off); else what differs, and what was expected."""
    if not verify:
        return None
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        return f"{size:,} bytes, expected {remote.size:,}"
    if announced is not None and size != announced:
        return f"{size:,} bytes, expected the {announced:,} the server announced"
    if remote.sha256:
        got = sha256_of(path)
        if got != remote.sha256:
            return f"SHA-256 {got}, expected {remote.sha256}"
    return content_problem(path, remote.check)


def _ceiling(remote: Remote) -> int:
    """The most bytes a download of ``remote`` may write: its pinned size, else its own ceiling."""
    return remote.size if remote.size is not None else (remote.max_size or MAX_UNPINNED_BYTES)


def fetch_remote(remote: Remote, staging: Path, *, verify: bool = True, log: Callable[[str], None] = print) -> Path:
    """Bring one upstream file into ``staging`` (resumable; skipped when already complete).

    The transfer goes to ``<name>.part`` and stops at the pinned size (or the remote's ceiling);
    the part becomes ``<name>`` only once :func:`_check` passes, and an existing ``<name>`` is
    "already complete" only when it passes the same checks (else it is fetched again).
    ``verify=False`` (``--no-verify``) accepts a transfer that ended without error whatever its
    size, hash and content."""
    staging.mkdir(parents=True, exist_ok=True)
    dest = staging / remote.name
    where = remote.url or f"hub:{remote.hub[0]}[{remote.hub[2]}]"  # type: ignore[index]
    if dest.is_symlink():
        dest.unlink()
    if dest.exists():
        bad = _check(dest, remote, verify)
        if bad is None:
            log(f"  {remote.name}: already complete ({dest.stat().st_size:,} bytes), not fetched again")
            return dest
        log(f"  {remote.name}: the file in {staging} has {bad}: fetched again")
        dest.unlink()
    part = dest.with_name(dest.name + ".part")
    if part.is_symlink() or (part.exists() and (remote.hub or part.stat().st_size > _ceiling(remote))):
        part.unlink()  # a hub split is written whole, never resumed; a part longer than the file: start over
    have = part.stat().st_size if part.exists() else 0
    log(f"  {remote.name}: {'resuming at ' + format(have, ',') + ' bytes from' if have else 'from'} {where}")
    announced = None
    if remote.size is None or have < remote.size:
        try:
            if remote.hub:
                hub_download(*remote.hub, part)
            else:
                announced = download(remote.url, part, limit=_ceiling(remote))  # type: ignore[arg-type]
        except ImportError:
            raise
        except TooLong as e:
            got = part.stat().st_size if part.exists() else 0
            bad_path = part.with_name(remote.name + ".mismatch")
            part.replace(bad_path)
            what = (f"the pinned size of {remote.size:,} bytes" if remote.size is not None
                    else f"this file's ceiling of {_ceiling(remote):,} bytes")
            raise FetchError(f"{where}: the server sent more than {what} (stopped at {got:,}; kept in {bad_path}): "
                             "not the expected file") from e
        except Exception as e:  # noqa: BLE001 - network errors of every kind end the same way
            got = part.stat().st_size if part.exists() else 0
            if no_network(e):
                host = urllib.parse.urlsplit(remote.url).hostname if remote.url else "huggingface.co"
                raise NoNetwork(f"no network: {host} could not be resolved ({type(e).__name__}); nothing more is "
                                f"tried. By hand: fetch {where} on a machine with a network and put it at {dest}, "
                                "then run the same command here (it checks and converts what it finds); licensed "
                                "and manual entries: kgreason data prepare NAME --from FILE (docs/data.md)") from e
            raise FetchError(f"{where}: download stopped ({type(e).__name__}: {e}); {got:,} bytes kept in "
                             f"{part}; run the same command again to resume") from e
    got = part.stat().st_size
    if verify and remote.size is not None and got < remote.size:
        raise FetchError(f"{where}: got {got:,} bytes, expected {remote.size:,} (kept in {part}). If the "
                         "transfer was cut, run the same command again to resume; if it stays short, the upstream "
                         "file changed or the pin in kgreason/data/catalog.py is wrong (--no-verify accepts it)")
    if verify and announced is not None and got < announced:
        raise FetchError(f"{where}: got {got:,} bytes, expected the {announced:,} the server announced (kept in "
                         f"{part}); run the same command again to resume")
    bad = _check(part, remote, verify, announced)
    if bad:
        bad_path = part.with_name(remote.name + ".mismatch")
        part.replace(bad_path)
        raise FetchError(f"{where} ({remote.name}): the downloaded file has {bad} (moved to {bad_path}). A cut "
                         "transfer: run the same command again; if it persists, the upstream file changed or the "
                         "entry in kgreason/data/catalog.py is wrong (check it, or pass --no-verify to accept it)")
    part.replace(dest)
    return dest


# ----------------------------------------------------------------------------- inputs


def _is_link(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


class Inputs:
    """Finds input files by name in a folder, a zip (nested zips too) or a single file, which
    is where a converter's upstream files are: the staging folder of a fetch, or ``--from``.

    Archive members are unpacked into ``unpack`` (a fresh, empty folder per conversion: nothing
    of an earlier archive is reused) and only the members asked for (and nested zips). An archive
    is refused, naming it and the member, when a member's name is absolute or has a ``..`` part,
    when a member is a symlink, when a member inflates past ``max_ratio`` times its compressed
    size (past 1 MiB), or when everything unpacked passes ``max_bytes`` or ``max_ratio`` times the
    archives' own size: a zip bomb stops at the ceiling, having written no more than it."""

    def __init__(self, src: Path, unpack: Path, max_bytes: int | None = None, max_ratio: float | None = None) -> None:
        self.src, self.work = Path(src), Path(unpack)
        if not self.src.exists():
            raise FetchError(f"{self.src}: no such file or folder")
        self.max_bytes = MAX_UNPACK_BYTES if max_bytes is None else int(max_bytes)
        self.max_ratio = MAX_UNPACK_RATIO if max_ratio is None else float(max_ratio)
        self.unpacked = 0        # bytes written out of archives so far
        self.packed = 0          # bytes of the archives opened so far
        self._seen: dict[str, list[str]] = {}  # archive → its safe member names
        self._arcs: dict[str, str] = {}        # archive → its folder under ``unpack``

    def _files(self) -> Iterable[Path]:
        if self.src.is_dir():
            yield from sorted(p for p in self.src.rglob("*") if p.is_file()  # reading through a link is harmless
                              and not p.name.endswith((".part", ".mismatch")) and not p.name.startswith(".")
                              and not any(q.startswith(".") for q in p.relative_to(self.src).parts[:-1]))
        else:
            yield self.src

    def find(self, *patterns: str, required: bool = True) -> Path | None:
        """The file whose name (or path inside a folder or archive) matches the first pattern that
        matches anything; archives, and archives inside them, are opened as needed."""
        for pattern in patterns:
            hit = self._find_one(pattern)
            if hit is not None:
                return hit
        if required:
            raise FetchError(f"{self.src}: no file named {' or '.join(patterns)} (in it or in its archives)")
        return None

    def _unpack(self, z: zipfile.ZipFile, arc: Path, m: str, out: Path) -> None:
        info = z.getinfo(m)
        room = min(self.max_bytes - self.unpacked, int(self.max_ratio * max(self.packed, 1)) - self.unpacked)
        member_cap = max(1 << 20, int(self.max_ratio * max(info.compress_size, 1)))
        if info.file_size > room or info.file_size > member_cap:
            raise FetchError(self._bomb(arc, m, info.file_size))
        out.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        try:
            with z.open(m) as fin, open(out, "xb") as fout:
                for block in iter(lambda: fin.read(CHUNK), b""):
                    written += len(block)
                    if written > min(room, member_cap, info.file_size):  # the header lied about the size
                        raise FetchError(self._bomb(arc, m, written))
                    fout.write(block)
        except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError) as e:
            raise FetchError(f"{arc}: member {m} cannot be unpacked ({type(e).__name__}: {e}); expected a whole, "
                             "readable zip (a damaged download: delete it and fetch it again)") from e
        self.unpacked += written

    def _bomb(self, arc: Path, m: str, size: int) -> str:
        return (f"{arc}: member {m} would unpack to {size:,} bytes, past the ceiling (at most {self.max_ratio:g} "
                f"times the archive's size and {self.max_bytes:,} bytes in all; {self.unpacked:,} unpacked so far): "
                "not a release archive")

    def _find_one(self, pattern: str) -> Path | None:
        def hit(name: str) -> bool:
            return fnmatch(name.rsplit("/", 1)[-1], pattern) or fnmatch(name, pattern) or fnmatch(name, "*/" + pattern)

        archives = []
        for f in self._files():
            rel = f.relative_to(self.src).as_posix() if self.src.is_dir() else f.name
            if hit(rel):
                return f
            if zipfile.is_zipfile(f):
                archives.append(f)
        while archives:  # breadth-first through (nested) archives
            arc = archives.pop(0)
            key = str(arc)
            try:
                z = zipfile.ZipFile(arc)
            except (zipfile.BadZipFile, OSError) as e:
                raise FetchError(f"{arc}: not a readable zip ({e}); expected a whole archive") from e
            with z:
                if key not in self._seen:
                    self._seen[key] = self._safe_members(z, arc)
                    self.packed += arc.stat().st_size
                for m in self._seen[key]:
                    if hit(m) or m.endswith(".zip"):
                        if key not in self._arcs:  # a fresh folder per archive (also across Inputs sharing work)
                            self.work.mkdir(parents=True, exist_ok=True)
                            self._arcs[key] = tempfile.mkdtemp(prefix="arc-", dir=self.work)
                        out = Path(self._arcs[key]) / m
                        if not out.exists():
                            self._unpack(z, arc, m, out)
                        if hit(m):
                            return out
                        archives.append(out)
        return None

    @staticmethod
    def _safe_members(z: zipfile.ZipFile, arc: Path) -> list[str]:
        """The archive's file members; :class:`FetchError` naming the first unsafe one."""
        out = []
        for info in z.infolist():
            m = info.filename
            parts = m.replace("\\", "/").split("/")
            if m.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", m) or ".." in parts:
                raise FetchError(f"{arc}: member {m!r} would unpack outside its folder (an absolute path or a '..' "
                                 "part); expected relative names: not unpacked")
            if _is_link(info):
                raise FetchError(f"{arc}: member {m!r} is a symbolic link; expected plain files: not unpacked")
            if m.endswith("/") or "__MACOSX" in parts:
                continue
            out.append(m)
        return out


# ----------------------------------------------------------------------------- writing


def _place(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dest)
    return dest


def _write_jsonl(records: Iterable[dict], dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(utf8_safe(json.dumps(r, ensure_ascii=False)) + "\n")
    tmp.replace(dest)
    return dest


def _validated(path: Path, parse, label: str) -> list[dict]:
    """Records of ``path`` (JSON list / JSON Lines), each checked by a loader's record parser."""
    from kgreason.data.kgqa import read_records

    recs = read_records(path)
    for i, r in enumerate(recs):
        parse(r, f"{path}: record {i}")
    return recs


def env_target(var: str, default: Path) -> Path:
    """Where a setting that reads ``$VAR`` looks: the variable when set, else ``default``.
    (Only for telling the user; the converters write under the data root whatever it says.)"""
    v = os.environ.get(var)
    return Path(v) if v else default


# ----------------------------------------------------------------------------- converters
# Each takes (inputs, root, targets) and returns the files it wrote. ``targets`` is the text after
# the ':' in a recipe's ``convert`` (comma-separated paths under the root), or "".


def _remote_names(recipe: Recipe | None) -> list[str]:
    return [r.name for r in recipe.remotes] if recipe else []


def _pairs(inputs: Inputs, targets: str, names: list[str]) -> list[tuple[Path, str]]:
    """(input file, target under the root) for recipes whose files keep their format: a single
    ``--from`` file goes to the first target; otherwise each file is found by its download name
    or by the target's own name."""
    outs = targets.split(",")
    if inputs.src.is_file():
        return [(inputs.src, outs[0])]
    return [(inputs.find(n, Path(t).name), t) for n, t in zip(names, outs)]


def conv_place(inputs: Inputs, root: Path, targets: str, names: list[str]) -> list[Path]:
    """Upstream files already in the loader's format: copy each to its place."""
    return [_place(src, root / t) for src, t in _pairs(inputs, targets, names)]


def conv_tog_json(inputs: Inputs, root: Path, targets: str, names: list[str]) -> list[Path]:
    """ToG / WebQSP-official JSON question files: every record must parse as the KGQA loaders
    read it (``parse_tog``), then the file is placed unchanged."""
    from kgreason.data.kgqa import parse_tog

    outs = []
    for src, t in _pairs(inputs, targets, names):
        _validated(src, parse_tog, t)
        outs.append(_place(src, root / t))
    return outs


def conv_metaqa(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None,
                sample: int = 1000, seed: int = 0) -> list[Path]:
    """Official MetaQA layout (``kb.txt``, ``{1,2,3}-hop/vanilla/qa_test.txt``) → ``metaqa/kb.txt``,
    ``metaqa/{h}-hop/qa_test.txt`` (the full test set) and ``metaqa/{h}hop_test_sample1000.jsonl``
    (a seeded draw of ``sample`` questions, the file ``dataset=metaqa`` reads by default; each
    record says whether its topic and answers are KB entities, ``covered_by_kb``)."""
    from kgreason.data.metaqa import load_metaqa
    from kgreason.kg.loaders import load_metaqa_kb

    kb_src = inputs.find("kb.txt")
    kg = load_metaqa_kb(kb_src)  # raises KGFormatError with file:line on a malformed row
    nodes = set(kg.entity_names)
    out = [_place(kb_src, root / "metaqa" / "kb.txt")]
    for h in (1, 2, 3):
        src = inputs.find(f"{h}-hop/vanilla/qa_test.txt", f"{h}-hop/qa_test.txt", f"{h}hop_qa_test.txt",
                          required=False)
        if src is None:
            continue
        es = load_metaqa(str(src), hops=h, keep_brackets=True)  # every line checked
        out.append(_place(src, root / "metaqa" / f"{h}-hop" / "qa_test.txt"))
        examples = list(es)
        pick = random.Random(seed).sample(range(len(examples)), min(sample, len(examples)))
        recs = []
        for i in pick:
            ex = examples[i]
            topic = ex.topic_entities[0]
            recs.append({"id": f"{h}-hop-test-{i}", "question": ex.question, "topic_entity": topic,
                         "answers": list(ex.answers),
                         "covered_by_kb": topic in nodes and all(a in nodes for a in ex.answers)})
        out.append(_write_jsonl(recs, root / "metaqa" / f"{h}hop_test_sample1000.jsonl"))
    if len(out) == 1:
        raise FetchError(f"{inputs.src}: no MetaQA question file ({{1,2,3}}-hop/vanilla/qa_test.txt)")
    return out


def conv_hotpotqa(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """HotpotQA official dev JSON (a list) → JSON Lines, each record checked by the loader."""
    from kgreason.data.multihop import parse_hotpot

    src = inputs.find("hotpot_dev_distractor_v1.json", "hotpot_*.json", "*.json", "*.jsonl")
    recs = _validated(src, parse_hotpot, "hotpotqa")
    return [_write_jsonl(recs, root / "hotpotqa" / (src.stem + ".jsonl"))]


def conv_musique(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """MuSiQue official JSONL (``musique_ans_v1.0_dev.jsonl``, or the hub copy) → the same,
    every record checked by the loader."""
    from kgreason.data.multihop import parse_musique

    src = inputs.find("musique_ans_v1.0_dev.jsonl", "musique_dev.jsonl", "musique*dev*.jsonl", "*.jsonl")
    recs = _validated(src, parse_musique, "musique")
    return [_write_jsonl(recs, root / "musique" / "musique_ans_v1.0_dev.jsonl")]


def conv_twowiki(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """2WikiMultiHopQA official ``dev.json`` (in the release zip) → ``2wikimultihopqa/dev.jsonl``."""
    from kgreason.data.multihop import parse_hotpot

    src = inputs.find("dev.json")
    recs = _validated(src, parse_hotpot, "twowiki")
    return [_write_jsonl(recs, root / "2wikimultihopqa" / "dev.jsonl")]


def conv_ddxplus(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None,
                 split: str = "test") -> list[Path]:
    """DDXPlus release (``release_conditions.json``, ``release_evidences.json``,
    ``release_<split>_patients.zip`` holding the patients CSV) → ``ddxplus/``; every file is read
    by the DDXPlus reader first (errors name file, line and field)."""
    from kgreason.data.ddxplus import load_ddxplus, read_conditions, read_evidences

    cond, evid = inputs.find("release_conditions.json"), inputs.find("release_evidences.json")
    read_conditions(cond), read_evidences(evid)
    pats = inputs.find(f"release_{split}_patients.csv", f"release_{split}_patients")
    if zipfile.is_zipfile(pats):  # a zip that holds only the CSV
        pats = Inputs(pats, inputs.work).find(f"release_{split}_patients*")
    out = [_place(cond, root / "ddxplus" / "release_conditions.json"),
           _place(evid, root / "ddxplus" / "release_evidences.json"),
           _place(pats, root / "ddxplus" / f"release_{split}_patients.csv")]
    load_ddxplus(str(out[2]), str(out[0]), str(out[1]), limit=50)  # the rows decode with these JSONs
    return out


def conv_fb15k237(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """FB15k-237 release zip (``Release/{train,valid,test}.txt``) + kg-bert's ``entity2text.txt``
    and ``FB15k_mid2name.txt`` → ``freebase_fb15k237/{split}.txt.gz`` and the two name maps."""
    from kgreason.kg.loaders import read_name_map, read_triples

    d = root / "freebase_fb15k237"
    d.mkdir(parents=True, exist_ok=True)
    out, mids = [], set()
    for split in ("train", "valid", "test"):
        src = inputs.find(f"Release/{split}.txt", f"{split}.txt")
        for h, _, t in read_triples(src, "\t"):  # every line checked: head<TAB>relation<TAB>tail
            mids.update((h, t))
        dest = d / f"{split}.txt.gz"
        tmp = dest.with_name(dest.name + ".tmp")
        with open(src, "rb") as fin, gzip.open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, CHUNK)
        tmp.replace(dest)
        out.append(dest)
    names_src = inputs.find("entity2text.txt")
    missing = mids - set(read_name_map(names_src))
    if missing:
        raise FetchError(f"{names_src}: {len(missing)} MID(s) of the triples have no name, e.g. {sorted(missing)[0]}")
    out.append(_place(names_src, d / "entity2text.txt"))
    aliases = inputs.find("FB15k_mid2name.txt", required=False)
    if aliases is not None:
        read_name_map(aliases)
        out.append(_place(aliases, d / "FB15k_mid2name.txt"))
    return out


def conv_primekg(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """PrimeKG ``kg.csv``: the header must be PrimeKG's; placed as ``primekg/kg.csv``."""
    import csv

    from kgreason.kg.loaders import _PRIMEKG_COLS

    src = inputs.find("kg.csv")
    with open(src, encoding="utf-8", newline="") as f:
        header = next(csv.reader(f), [])
    missing = [c for c in _PRIMEKG_COLS if c not in header]
    if missing:
        raise FetchError(f"{src}:1: not a PrimeKG kg.csv: header lacks {missing}; found {header[:12]}")
    return [_place(src, root / "primekg" / "kg.csv")]


def conv_rog(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """RoG JSONL (``id, question, answer, q_entity, a_entity, graph``) → ``<data>/rog/webqsp_test.jsonl``
    (never where ROG_JSONL points: nothing is written outside the data root); every line's graph is checked."""
    from kgreason.kg.loaders import read_rog_graphs

    src = inputs.find("rog_webqsp_test.jsonl", "*.jsonl")
    read_rog_graphs(src)
    return [_place(src, root / "rog" / "webqsp_test.jsonl")]


def conv_probsum(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """ProbSum CSV (``File ID, Assessment, Subjective Sections, Objective Sections, Summary``) →
    ``<data>/probsum/test.csv`` (never where PROBSUM_CSV points)."""
    from kgreason.data.clinical import load_probsum

    src = inputs.find("*.csv")
    load_probsum(str(src))  # raises DataError naming the file/line/column
    return [_place(src, root / "probsum" / "test.csv")]


def _rrf_check(path: Path, n_fields: int, lines: int = 1000) -> None:
    with open(path, encoding="utf-8", errors="strict") as f:
        for i, line in enumerate(f, 1):
            if i > lines:
                break
            got = line.rstrip("\n").rstrip("\r").count("|")
            if got != n_fields:
                raise FetchError(f"{path}:{i}: expected {n_fields} '|'-terminated fields (the UMLS RRF layout), "
                                 f"got {got}")


def conv_umls(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """UMLS release (zip, or its ``META`` folder) → ``MRCONSO.RRF``, ``MRREL.RRF`` (and
    ``MRSTY.RRF``) in ``<data>/umls/META`` (never where UMLS_META points); the first lines of each
    are checked against the Reference Manual's column counts."""
    from kgreason.kg.loaders import MRCONSO_COLS, MRREL_COLS, MRSTY_COLS

    dest = root / "umls" / "META"
    out = []
    for name, cols, required in (("MRCONSO.RRF", MRCONSO_COLS, True), ("MRREL.RRF", MRREL_COLS, True),
                                 ("MRSTY.RRF", MRSTY_COLS, False)):
        src = inputs.find(f"META/{name}", name, required=required)
        if src is None:
            continue
        _rrf_check(src, len(cols))
        out.append(_place(src, dest / name))
    return out


CONVERTERS: dict[str, Callable[..., list[Path]]] = {
    "place": conv_place, "tog_json": conv_tog_json, "metaqa": conv_metaqa, "hotpotqa": conv_hotpotqa,
    "musique": conv_musique, "twowiki": conv_twowiki, "ddxplus": conv_ddxplus, "fb15k237": conv_fb15k237,
    "primekg": conv_primekg, "rog": conv_rog, "probsum": conv_probsum, "umls": conv_umls,
}


def run_converter(spec: str, inputs: Inputs, root: Path, names: list[str]) -> list[Path]:
    kind, _, targets = spec.partition(":")
    try:
        return CONVERTERS[kind](inputs, root, targets, names)
    except (FetchError, KeyError):
        raise
    except Exception as e:  # noqa: BLE001 - loader errors (DataError, KGFormatError) name file:line already
        raise FetchError(f"{type(e).__name__}: {e}") from e


# ----------------------------------------------------------------------------- fetch / prepare


@contextmanager
def dataset_lock(work: Path, name: str, log: Callable[[str], None] = print, wait_s: float | None = None):
    """Hold ``<work>/.lock`` (an exclusive ``flock``) while one ``fetch`` / ``prepare`` of ``name``
    runs; another one waits (saying so) up to ``wait_s`` seconds, then stops naming the lock.
    The lock goes with its process, so a killed command leaves none behind."""
    import fcntl

    work.mkdir(parents=True, exist_ok=True)
    path = work / ".lock"
    wait = LOCK_WAIT_S if wait_s is None else float(wait_s)
    f = open(path, "a+")
    t0, told = time.monotonic(), False
    try:
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    log(f"{name}: another `kgreason data` command is fetching or preparing it (lock {path}); waiting")
                    told = True
                if time.monotonic() - t0 > wait:
                    raise FetchError(f"{path}: still held by another `kgreason data` command for {name} after "
                                     f"{wait:.0f} s; expected it to finish first (run this one again then)") from None
                time.sleep(0.2)
        yield path
    finally:
        f.close()  # closing the file releases the lock


def _swap_in(out: Path, staged: list[Path], root: Path) -> list[Path]:
    """Move every converted file from the staging folder ``out`` to the same place under
    ``root``, only now that the whole conversion passed. A target path whose folders lead out of
    ``root`` (a symlink planted in it) is refused before anything is moved; a symlink at a
    target's own name is replaced, never followed."""
    from kgreason.paths import inside

    pairs = []
    for p in staged:
        rel = p.relative_to(out)
        target = root / rel
        try:
            inside(root, target.parent, "--dest")
        except ValueError as e:
            raise FetchError(f"{target}: {e}; expected plain folders under the data root") from None
        if target.is_dir() and not target.is_symlink():
            raise FetchError(f"{target}: is a folder; expected a file to replace")
        pairs.append((p, target))
    written = []
    for p, target in pairs:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(p, target)
        written.append(target)
    return written


def _convert(spec: str, src: Path, root: Path, names: list[str], work: Path) -> list[Path]:
    """Run converter ``spec`` on ``src`` into a fresh staging folder under ``work`` (archives
    unpacked into a fresh folder there too), then swap the result into ``root``."""
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=work))
    try:
        out = tmp / "out"
        out.mkdir()
        staged = run_converter(spec, Inputs(src, tmp / "unpacked"), out, names)
        return _swap_in(out, staged, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _work_dir(root: Path, name: str) -> Path:
    from kgreason.paths import inside

    work = root / ".downloads" / name
    try:
        inside(root, work, "--dest")
    except ValueError as e:
        raise FetchError(f"{work}: {e}; expected a plain folder under the data root") from None
    return work


def fetch(source: Source, root: Path, *, full: bool = False, verify: bool = True,
          log: Callable[[str], None] = print) -> list[Path]:
    """``kgreason data fetch``: download the recipe's files into ``<root>/.downloads/<name>``,
    check them, convert, place under ``root``. Returns the files written."""
    recipe = source.full if full else source.sample
    if recipe is None:
        if full and source.sample is not None:
            raise FetchError(f"{source.name}: the sample is the whole release; run `kgreason data fetch {source.name}`")
        how = source.notes or (f"Use `kgreason data prepare {source.name} --from FILE`." if source.prepare
                               else "See docs/data.md.")
        raise FetchError(f"{source.name} ({source.access}): nothing to download from here. {how}")
    staging = _work_dir(root, source.name)
    with dataset_lock(staging, source.name, log):
        log(f"{source.name}: {len(recipe.remotes)} file(s) into {staging}")
        for r in recipe.remotes:
            fetch_remote(r, staging, verify=verify, log=log)
        shutil.rmtree(staging / "unpacked", ignore_errors=True)  # what earlier versions unpacked in place
        return _convert(recipe.convert, staging, root, _remote_names(recipe), staging)


def prepare(source: Source, src: Path, root: Path, *, log: Callable[[str], None] = print) -> list[Path]:
    """``kgreason data prepare NAME --from FILE``: the same conversion from a file you have."""
    work = _work_dir(root, source.name)
    if source.prepare:
        spec, names = source.prepare, []
    else:
        recipe = source.sample or source.full
        if recipe is None:
            raise FetchError(f"{source.name} ({source.access}): nothing to prepare; {source.notes}")
        spec, names = recipe.convert, _remote_names(recipe)
    if not Path(src).exists():
        raise FetchError(f"{src}: no such file or folder")
    with dataset_lock(work, source.name, log):
        return _convert(spec, Path(src), root, names, work)


def freebase_steps(dump: str | None, endpoint: str = "http://localhost:8890/sparql") -> str:
    """The commands that load a Freebase RDF dump into Virtuoso 7 (docs/data.md has the why)."""
    from kgreason.data.catalog import FREEBASE_DUMP_URL

    d = Path(dump).resolve().parent if dump else Path("/data/freebase")
    name = Path(dump).name if dump else "freebase-rdf-latest.gz"
    return f"""Full Freebase is served by a SPARQL endpoint, not read from a file. Steps (Virtuoso 7.2.5, as ToG):

1. Dump ({'yours: ' + str(d / name) if dump else 'not given'}):
     mkdir -p {d} && cd {d}
     {'# already there' if dump else 'curl -C - -LO ' + FREEBASE_DUMP_URL}
   optional: keep English and non-text triples only (~125 GB instead of ~400 GB unzipped).
2. Server: apt-get install -y virtuoso-opensource   (Debian 12: 7.2.5; virtuoso-t, isql-vt)
   In virtuoso.ini: DirsAllowed = ., {d}
                    NumberOfBuffers / MaxDirtyBuffers sized to your RAM (64 GB free: 5450000 / 4000000)
                    [SPARQL] ResultSetMaxRows >= kg.max_rows (10000), MaxQueryExecutionTime >= kg.timeout_s
3. Load (hours to a day; disk: plan for 300 GB or more):
     isql-vt 1111 dba dba exec="ld_dir('{d}', '{name}', 'http://freebase.com');"
     isql-vt 1111 dba dba exec="rdf_loader_run();"      # run several at once to use more cores
     isql-vt 1111 dba dba exec="checkpoint;"
     isql-vt 1111 dba dba exec="SELECT * FROM DB.DBA.LOAD_LIST WHERE ll_error IS NOT NULL;"   # must list nothing
4. Check:
     curl -s {endpoint} --data-urlencode 'query=SELECT ?n WHERE {{ <http://rdf.freebase.com/ns/m.027rn> <http://rdf.freebase.com/ns/type.object.name> ?n }}'
   lists "Dominican Republic".
5. Run: export FREEBASE_SPARQL_URL={endpoint}
     kgreason dataset=cwq kg=freebase_sparql retriever=sparql reasoner=tog llm=openai
"""


__all__ = ["download", "hub_download", "fetch_remote", "fetch", "prepare", "Inputs", "FetchError", "CONVERTERS",
           "freebase_steps", "sha256_of", "env_target", "content_problem", "dataset_lock"]
