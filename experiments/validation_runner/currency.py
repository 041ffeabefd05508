"""Whether a row still describes today's code, decided by behaviour (issue 71): its committed
bundle is replayed on the working tree against the bundle's replies only (``kgreason bundle
replay``), and the verdict is recorded in the row as ``currency``:

``{"verdict": "current" | "stale" | "failed", "line": the replay's line, "at": the commit it was
checked at (``dirty`` when the tree had uncommitted changes), "replay": what was replayed, "seconds"}``

A row is **current** when the replay asks exactly the bundle's requests and gives its predictions
and metrics (``identical``); **stale** names the first example and request that differ, or the
field a same-replies replay reads otherwise. A row measured by a sitting is current at that
sitting's commit (:func:`measured_now`). The generator (:mod:`validation_runner.docs`) marks rows from
this record; the method files' blob ids (:mod:`validation_runner.stamp`) no longer decide anything.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from validation_runner import places, tablefile

#: a path inside a replay's temporary folders (a miss's message names the call store there)
_TMP = re.compile(r"[^\s'\"]*kgreason-(?:bundle|currency)-[^\s'\"]*")
#: how CI and ``--check-current`` replay a row by default: every question where the whole
#: replay fits CI's budget, else this fixed prefix of the row's questions, in the run's order
PREFIX = 5


def _commit() -> dict:
    from validation_runner.stamp import _git

    try:
        head = _git("rev-parse", "HEAD").strip()[:12]
        changed = _git("status", "--porcelain", "--untracked-files=no").splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {"at": None}
    # the tables themselves (this very record, the generated docs) are no code a replay runs
    code = [ln[3:] for ln in changed if not ln[3:].startswith(("experiments/validation/validation_", "README.md",
                                                                "docs/", "experiments/validation/bundles/"))]
    return {"at": head, **({"dirty": True} if code else {})}


def measured_now(entry: dict) -> dict:
    """The currency of a row a sitting has just measured: current at the sitting's commit."""
    return {"verdict": "current", "line": "measured by this sitting", **_commit(), "replay": "none (measured)"}


def replay_row(entry: dict, *, first: int | None = PREFIX, rankings: str = "recorded",
               timeout: float | None = None) -> dict:
    """Replay ``entry``'s committed bundle on the working tree (``python -m kgreason bundle replay
    --json``, a process of its own) and return its currency record."""
    path = places.HERE / entry["bundle"]["file"]
    with tempfile.TemporaryDirectory(prefix="kgreason-currency-") as tmp:
        out = Path(tmp) / "verdicts.json"
        cmd = [sys.executable, "-m", "kgreason", "bundle", "replay", str(path), "--rankings", rankings,
               "--json", str(out), *(["--first", str(first)] if first else [])]
        t0 = time.time()
        try:
            r = subprocess.run(cmd, cwd=places.ROOT, capture_output=True, text=True, timeout=timeout,
                               env={**os.environ, "KGREASON_PROGRESS": os.environ.get("KGREASON_PROGRESS", "log")})
        except subprocess.TimeoutExpired:
            return {"verdict": "failed", "line": f"failed: the replay took more than {timeout:.0f} s", **_commit()}
        verdicts = json.loads(out.read_text()) if out.is_file() else []
        seconds = round(time.time() - t0, 1)
    if len(verdicts) != 1:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no verdict"]
        return {"verdict": "failed", "line": f"failed: {tail[0][:300]}", **_commit(), "seconds": seconds}
    v = verdicts[0]
    v["line"] = _TMP.sub("<the replay's folder>", v["line"])  # the committed record names no path of this machine
    status = {"identical": "current"}.get(v["status"], v["status"])
    what = f"the first {first} questions" if first else "every question"
    return {"verdict": status, "line": v["line"], **_commit(),
            "replay": f"{what}, {'recorded rankings' if rankings == 'recorded' else 'rankings recomputed'}",
            "seconds": seconds}


def bundled_rows(tables: list[str] | None = None, rows: list[str] | None = None) -> list[tuple[Path, str, dict]]:
    """``(table file, row, entry)`` of every committed row with a bundle (held-out tables first)."""
    files = sorted(places.HERE.glob("validation_*.json"), key=lambda f: (0 if "heldout" in f.stem else 1, f.stem))
    out = []
    for f in files:
        if tables and f.stem.removeprefix("validation_") not in tables:
            continue
        for row, e in json.loads(f.read_text()).items():
            if e.get("bundle") and (not rows or row in rows):
                out.append((f, row, e))
    return out


def check_current(tables: list[str] | None = None, rows: list[str] | None = None, *, first: int | None = PREFIX,
                  rankings: str = "recorded", echo=print) -> list[tuple[str, str, dict]]:
    """``--check-current``: replay every bundled row (of ``tables`` / ``rows`` when given) and
    record each one's currency in its JSON; returns ``(table, row, record)``. A row retired to the
    history section is listed, not replayed, and its record is left as it is."""
    done = []
    for f, row, e in bundled_rows(tables, rows):
        if is_history(e):  # retired: never shown beside current rows, and its record says why (as in CI)
            echo(f"{f.stem}/{row}: retired (not replayed): {e['history'].get('why', '')}")
            continue
        rec = replay_row(e, first=first, rankings=rankings)
        tablefile.update(f, lambda table: table[row].__setitem__("currency", rec))  # the file as it is now
        echo(f"{f.stem}/{row}: {rec['verdict']} ({rec.get('seconds', '?')} s): {rec['line']}")
        done.append((f.stem, row, rec))
    return done


def verdict(e: dict) -> str:
    """``current``, ``stale``, ``failed``, ``unchecked`` (a bundle never replayed for its currency)
    or ``unreplayable`` (no bundle)."""
    if not e.get("bundle"):
        return "unreplayable"
    return (e.get("currency") or {}).get("verdict") or "unchecked"


def is_current(e: dict) -> bool:
    return verdict(e) == "current"


def is_history(e: dict) -> bool:
    """A row retired to the history section (``"history": {...}`` in its JSON: it will not be
    re-measured; the lead's call, :func:`retire`)."""
    return isinstance(e.get("history"), dict)


def retire(table: str, row: str, why: str) -> str:
    """``--retire TABLE/ROW --why TEXT``: move a row to the history section, naming the code it
    measured (its ``code`` stamp's commit) and why it will not be re-measured."""
    f = places.HERE / f"validation_{table}.json"
    at = _commit().get("at")

    def move(data: dict) -> None:
        if row not in data:
            raise ValueError(f"{f.name}: no row {row}")
        e = data[row]
        e["history"] = {"why": why, "measured_code": (e.get("code") or {}).get("commit"), "retired_at": at}

    tablefile.update(f, move)
    return f"{table}/{row}: moved to the history section ({why})"
