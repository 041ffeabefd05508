"""Every write to a ``validation_<table>.json`` goes through :func:`update`: under a lock on the
tables' folder it re-reads the file, applies the change and replaces the file whole (a temporary
file, then ``os.replace``).

Several sittings may end at once (one SIGTERM stops every row running), and each writes its own row
into the same table. Before, a sitting read the table when its run ended, then summarised and
bundled the run, then wrote back what it had read with its row set: a row another sitting wrote
meanwhile was lost (measured: a stopped ``webqsp_sgr`` row, its bundle written, was gone from the
JSON when ``metaqa_sgr_no_schema``'s sitting, stopped by the same signal, wrote after it)."""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` itself (no lock file beside the tables), released when
    the descriptor closes, also when the process dies."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update(path: Path, change: Callable[[dict], T]) -> T:
    """Apply ``change`` to the table in ``path`` as it stands now (``{}`` when there is none yet)
    and write it back, with no other :func:`update` of a table in the same folder in between.
    Returns what ``change`` returns."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent):
        table = json.loads(path.read_text()) if path.exists() else {}
        got = change(table)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(table, indent=2, sort_keys=False) + "\n")
            os.replace(tmp, path)
        except BaseException:  # a full disk or a signal mid-write: the table stays as it was, no temp file left
            tmp.unlink(missing_ok=True)
            raise
    return got


def put_row(path: Path, row: str, entry: dict) -> None:
    """``path``'s ``row`` set to ``entry``, every other row as the file holds it now."""
    update(path, lambda table: table.__setitem__(row, entry))
