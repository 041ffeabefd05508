"""Which code a row measured: the git blob ids of its method's files (``METHOD_FILES``), stamped
when the row is measured (``code``). Since issue 71 a row's currency is decided by replaying its
bundle (:mod:`validation_runner.currency`), not by these stamps; they remain the record of the code a
row measured, which the history section prints."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from validation_runner import places, tablefile
from validation_runner.rows import ROWS

#: the files each method's code lives in (its reasoner module, helpers only it uses, its prompts
#: folder and its config), besides a row's ablation file. A row is stamped with their git blob ids
#: when it is measured (``code``); the generator marks a row whose files have changed since as
#: measured on other code. Code every method shares (the reasoner kit, the LLM client, the
#: retrievers) is left out: a change there would mark every row.
METHOD_FILES = {
    "io": ["kgreason/reasoners/io.py"],
    "cot": ["kgreason/reasoners/cot.py"],
    "rag": ["kgreason/reasoners/rag.py"],
    "rag_text": ["kgreason/reasoners/rag_text.py"],
    "retrieval_only": ["kgreason/reasoners/retrieval_only.py"],
    "tog": ["kgreason/reasoners/tog.py"],
    "reknos": ["kgreason/reasoners/reknos.py", "kgreason/reasoners/superrel.py"],
    "sgr": [f"kgreason/reasoners/sgr/{m}.py"  # one module per component of sgr.txt §3 (issue 72)
            for m in ("__init__", "common", "subgraph", "stepwise", "direct", "collaborative", "reasoner")],
    "subqrag": ["kgreason/reasoners/subqrag.py", "kgreason/reasoners/subqrag_index.py"],
    "logoskg_dx": ["kgreason/reasoners/logoskg_dx.py", "kgreason/reasoners/dx_common.py"],
    "kg_dx": ["kgreason/reasoners/kg_dx.py", "kgreason/reasoners/dx_common.py"],
}


def blob_id(data: bytes) -> str:
    """git's blob id of ``data`` (``git hash-object``), so a stamp made from git history and one
    made from the working tree compare equal for the same content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def method_paths(row: str, listdir=None) -> list[str]:
    """The repository paths of ``row``'s method: :data:`METHOD_FILES`, every file of its prompts
    folder, ``conf/reasoner/<r>.yaml`` and its ablation's yaml. ``listdir(folder)`` lists a folder's
    files (default: the working tree)."""
    _, reasoner, extra = ROWS[row]
    paths = list(METHOD_FILES.get(reasoner, [f"kgreason/reasoners/{reasoner}.py"]))
    paths.append(f"conf/reasoner/{reasoner}.yaml")
    paths += [f"conf/ablation/{x.split('=', 1)[1]}.yaml" for x in extra if x.startswith("ablation=")]
    folder = f"kgreason/reasoners/prompts/{reasoner}"
    if listdir is None:
        paths += sorted(str(f.relative_to(places.ROOT)) for f in (places.ROOT / folder).rglob("*") if f.is_file()
                        and "__pycache__" not in f.parts)
    else:
        paths += listdir(folder)
    return paths


def code_stamp(row: str) -> dict[str, str]:
    """``{path: blob id}`` of ``row``'s method files in the working tree (what a sitting measures)."""
    return {p: blob_id((places.ROOT / p).read_bytes()) for p in method_paths(row) if (places.ROOT / p).is_file()}


def code_changed(row: str, e: dict) -> list[str] | None:
    """The method files of ``row`` that differ from what its committed entry ``e`` measured
    (changed, added or removed), ``[]`` when none did, ``None`` when the entry has no stamp."""
    then = (e.get("code") or {}).get("files")
    if then is None:
        return None
    now = code_stamp(row)
    return sorted(p for p in set(then) | set(now) if then.get(p) != now.get(p))


def stamp_at(row: str, commit: str) -> dict[str, str]:
    """``{path: blob id}`` of ``row``'s method files as they were at ``commit``."""
    def listdir(folder):
        return sorted(_git("ls-tree", "-r", "--name-only", commit, "--", folder).split())
    files = {}
    for p in method_paths(row, listdir):
        try:
            files[p] = _git("rev-parse", f"{commit}:{p}").strip()
        except subprocess.CalledProcessError:
            pass  # not in the tree at that commit
    return files


def run_stamp(run_dir: Path, row: str) -> dict | None:
    """The code a run dir measured, from the commit its run.json records, when the method's files
    had no uncommitted change then (they equal that commit's in today's working tree, or the run's
    tree was clean); else None."""
    try:
        git = json.loads((run_dir / "run.json").read_text()).get("git") or {}
        commit = str(git.get("commit") or "")
        files = stamp_at(row, commit) if commit else None
    except (OSError, ValueError, subprocess.CalledProcessError):
        return None
    if not files or (git.get("dirty") and files != code_stamp(row)):
        return None
    return {"commit": commit[:12], "from": "the commit the run's run.json records", "files": files}


def _head() -> str | None:
    try:
        return _git("rev-parse", "HEAD").strip()[:12]
    except (OSError, subprocess.CalledProcessError):
        return None


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(places.ROOT), *args], check=True, capture_output=True, text=True).stdout


def stamp_from_history(path: Path) -> list[str]:
    """Stamp the rows of ``path`` that have metrics and no ``code`` from git history: the first
    commit of the file in which the row's ``metrics`` already held today's values is taken as the
    code the row measured, and the method files' blob ids at that commit are its stamp
    (``code.commit``, ``code.from``). Returns the rows stamped."""
    rel = str(path.relative_to(places.ROOT))
    table = json.loads(path.read_text())
    todo = {r for r, e in table.items() if "metrics" in e and "code" not in e and r in ROWS}
    commits = _git("log", "--reverse", "--format=%H", "--", rel).split()
    done = []
    for c in commits:
        if not todo:
            break
        try:
            then = json.loads(_git("show", f"{c}:{rel}"))
        except (subprocess.CalledProcessError, json.JSONDecodeError):
            continue
        for r in sorted(todo):
            if (then.get(r) or {}).get("metrics") != table[r]["metrics"]:
                continue
            table[r]["code"] = {"commit": c[:12], "from": "git history (the first commit holding these metrics)",
                                "files": stamp_at(r, c)}
            todo.discard(r)
            done.append(r)
    if done:  # written into the table as it is now (another sitting may have written meanwhile)
        stamped = {r: table[r]["code"] for r in done}
        tablefile.update(path, lambda now: [now[r].setdefault("code", c) for r, c in stamped.items() if r in now])
    return done
