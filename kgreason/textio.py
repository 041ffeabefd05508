"""Strict reading of the text files a run takes in (datasets, KGs, caches).

Ground floor: imports nothing from kgreason. Every dataset and KG reader goes through
:func:`read_text` (whole files: JSON) or :func:`iter_lines` (streamed: TSV, CSV, JSON Lines,
gzip too), so one set of rules holds for every input:

* the bytes must be UTF-8; anything else is an :class:`InputFileError` naming the file, the line
  and the column of the first bad byte (never a bare ``UnicodeDecodeError``, and never the file's
  contents, which for a dataset can be megabytes);
* a UTF-8 byte-order mark at the very start of the file is dropped (editors on Windows write one;
  it is not part of the first field). In line formats (TSV, CSV, RRF, JSON Lines read by
  :func:`iter_lines`) every field is a name, so a byte-order mark anywhere else is an error; in a
  whole JSON file it is an error at the start of a line (two files glued together) and content
  inside a passage's text (Wikipedia paragraphs hold a few); names and answers taken from JSON are
  checked field by field by the dataset readers;
* a NUL byte is an error (a binary or truncated file; it too would end up inside a name);
* in line formats a carriage return (CR) inside a line is an error naming line endings: a file
  with CR-only (classic Mac) line endings would otherwise read as one long line. LF and CRLF
  endings are both fine.

And one rule for the text a run writes out: :func:`clean_surrogates` / :func:`utf8_safe` replace
every lone UTF-16 surrogate (``"\\ud800"`` in a server's JSON, or the bytes ``ed a0 80``, which
Python's JSON reader lets through) with U+FFFD, so a model reply holding one can be written as
UTF-8 (issue 57 M2: such a reply made ``predictions.jsonl`` unwritable). The HTTP client cleans
replies (and counts them); every JSON writer of the project passes its text through
:func:`utf8_safe` (or writes ``ensure_ascii`` JSON), so text from any other source cannot stop a
run either. :func:`write_text_file` writes a page or a table whole or not at all, and an error
names the file.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

_BOM = "\ufeff"
_READ: dict[str, dict] = {}  # every input file read in this process: {path: {sha256, bytes}}
_READ_LOCK = threading.Lock()


def note_file(path: str | Path, sha256: str, size: int) -> None:
    """Record that ``path`` (with this content hash) was read; see :func:`files_read`."""
    with _READ_LOCK:
        _READ[str(Path(path).resolve())] = {"sha256": sha256, "bytes": int(size)}


def forget_files_read() -> None:
    """Start a new list (each run of a multirun in one process lists only its own files)."""
    with _READ_LOCK:
        _READ.clear()


def files_read() -> dict[str, dict]:
    """``{absolute path: {"sha256", "bytes"}}`` of every data file read through this module (or
    hashed by the compiled-KG cache) in this process: the run record lists them, so two runs on
    files that differ in one byte are told apart."""
    with _READ_LOCK:
        return dict(_READ)
_BOM_BYTES = b"\xef\xbb\xbf"


class InputFileError(ValueError):
    """A malformed input file. The message reads ``<file>:<line>: <what was expected>``."""

    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        self.path, self.line, self.message = str(path), line, message
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


def _bad_bytes(path: str | Path, line_no: int, raw: bytes, err: UnicodeDecodeError) -> InputFileError:
    col = len(raw[: err.start].decode("utf-8", errors="replace")) + 1
    bad = raw[err.start: err.start + 4].hex(" ")
    hint = ""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        hint = " (the file starts with a UTF-16 byte-order mark: convert it to UTF-8)"
    return InputFileError(path, line_no, f"not valid UTF-8 at column {col} (bytes {bad}); "
                          f"expected UTF-8 text{hint or ', e.g. iconv -f latin1 -t utf-8'}")


def check_line(path: str | Path, line_no: int, text: str, *, bom_anywhere: bool = True) -> str:
    """Reject NUL bytes and stray byte-order marks (anywhere, or only at the start of the line
    when ``bom_anywhere`` is false) in one decoded line; return the line."""
    if "\x00" in text:
        raise InputFileError(path, line_no, f"NUL byte at column {text.index(chr(0)) + 1}; "
                             "expected text (is the file binary or truncated?)")
    if text.startswith(_BOM) or (bom_anywhere and _BOM in text):
        raise InputFileError(path, line_no, f"byte-order mark (U+FEFF) at column {text.index(_BOM) + 1}; "
                             "it would become part of a name: remove it")
    return text


def decode(path: str | Path, data: bytes) -> str:
    """Decode a whole file's bytes by the rules above."""
    if data.startswith(_BOM_BYTES):
        data = data[len(_BOM_BYTES):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_no = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        end = data.find(b"\n", e.start)
        raw = data[start: end if end >= 0 else len(data)]
        e2 = UnicodeDecodeError(e.encoding, raw, e.start - start, e.end - start, e.reason)
        raise _bad_bytes(path, line_no, raw, e2) from None
    if "\x00" in text or _BOM in text:
        for line_no, line in enumerate(text.split("\n"), 1):
            check_line(path, line_no, line, bom_anywhere=False)
    return text


def read_text(path: str | Path) -> str:
    """The whole file as text (gzip when the name ends in ``.gz``), by the rules above."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(p, None, "file not found" if not p.exists() else "expected a file, got a directory")
    raw = p.read_bytes()
    note_file(p, hashlib.sha256(raw).hexdigest(), len(raw))
    data = gzip.decompress(raw) if p.suffix == ".gz" else raw
    return decode(p, data)


def _lines(p: Path, f: IO[bytes]) -> Iterator[str]:
    for line_no, raw in enumerate(f, 1):
        if line_no == 1 and raw.startswith(_BOM_BYTES):
            raw = raw[len(_BOM_BYTES):]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _bad_bytes(p, line_no, raw, e) from None
        body = text.rstrip("\r\n")
        if "\r" in body:  # a CR followed by more text: lines end in CR alone (classic Mac), or a stray CR
            col = body.index("\r") + 1
            raise InputFileError(p, line_no, f"carriage return (CR) inside the line at column {col}: the file's "
                                 "line endings look like CR only (classic Mac); expected LF or CRLF line endings "
                                 "(convert: tr '\\r' '\\n' < in > out)")
        yield check_line(p, line_no, text)


@contextmanager
def iter_lines(path: str | Path) -> Iterator[Iterator[str]]:
    """``with iter_lines(p) as lines:`` the file's lines (ends kept, like a text file opened with
    ``newline=""``), each decoded and checked by the rules above; gzip when ``.gz``."""
    p = Path(path)
    if not p.exists():
        raise InputFileError(p, None, "file not found")
    if p.is_dir():
        raise InputFileError(p, None, "expected a file, got a directory")
    f = gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")
    try:
        yield _lines(p, f)
    finally:
        f.close()
    note_file(p, _sha256_file(p), p.stat().st_size)


def _sha256_file(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_surrogates(text: str) -> tuple[str, int]:
    """``(text, n)``: ``text`` with each lone UTF-16 surrogate replaced by U+FFFD (``n`` of them);
    a high surrogate followed by a low one (two code points where one belongs) becomes the
    character they encode. Text without surrogates comes back as it is (one regex scan).

    >>> clean_surrogates("a\\ud800b"), clean_surrogates("\\ud83d\\ude00"), clean_surrogates("ok")
    (('a\ufffdb', 1), ('\U0001f600', 0), ('ok', 0))
    """
    if not _SURROGATE.search(text):
        return text, 0
    out = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return out, out.count("\ufffd") - text.count("\ufffd")


def utf8_safe(text: str) -> str:
    """``text`` that UTF-8 can hold: lone surrogates replaced by U+FFFD (:func:`clean_surrogates`)."""
    return clean_surrogates(text)[0]


def write_text_file(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all: into a temporary sibling, then renamed
    over ``path``. An OSError (a full disk, a read-only folder) removes the temporary file, leaves
    ``path`` as it was (no empty or half page) and names ``path`` (``[Errno 28] No space left on
    device: 'path'``: a failed write names no file of its own)."""
    import os

    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, p)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise OSError(e.errno, e.strerror or str(e), str(p)) from None
    return p


__all__ = ["write_text_file", "clean_surrogates", "utf8_safe", "note_file", "files_read", "forget_files_read", "InputFileError", "check_line", "decode", "read_text", "iter_lines"]
