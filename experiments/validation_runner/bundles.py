"""Each row's committed bundle (issue 58): exported beside the row, restored to resume a partial
row on another machine, and checked: the row's fields must be what its bundle gives."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from validation_runner import places
from validation_runner.collect import intervals, per_question, summarise
from validation_runner.rows import COUNTS_PER_QUESTION, KEY_METRICS

#: the fields of a row that its bundle alone determines (the generator re-derives them from it and
#: refuses a JSON row that disagrees); wall time and sittings are the runner's, not in a bundle
FROM_BUNDLE = ("n_examples", "metrics", "unparseable_replies", "reasks", "llm_calls_per_question",
               "tokens_per_question", "errors", "partial", "ci95", "per_question")


# a row's funnel comes from its bundle's metrics.json as well (None for a run measured before issue 72)
FROM_BUNDLE += ("funnel",)


def bundle_path(table: str, row: str) -> Path:
    return places.BUNDLES / table / f"{row}.tar.gz"


def export_bundle(run_dir: Path, table: str, row: str, cache: str) -> dict:
    """Export the row's run dir (and every model call it made or replayed, from ``cache``) as its
    committed bundle; the record the JSON row keeps of it."""
    from kgreason.storage.bundle import export

    path = bundle_path(table, row)
    path.parent.mkdir(parents=True, exist_ok=True)
    m = export([run_dir], path, cache)
    return {"file": path.relative_to(places.HERE).as_posix(), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "bytes": path.stat().st_size, "calls": sum(r.get("calls", 0) for r in m["runs"])}


def restore_from_bundle(row: str, entry: dict, run_dir: Path, cache: str) -> str:
    """Put a partial row back where its sitting left it, on a machine without its run dir or its
    replies: the row's committed bundle (its SHA-256 checked against the JSON row, every entry
    against the manifest) is unpacked into ``run_dir`` and its model replies are added to the call
    cache ``cache`` as one more shard (``llm_calls/bundle-<row>-<sha8>.jsonl``), so the same
    command answers only the questions the bundle lacks. Only the replies the run's ``calls.jsonl``
    names are installed (a bundle's run dir and entries are checked by ``open_bundle``: a manifest
    that points outside the bundle is refused before anything is copied). Refuses (ValueError, one line) a row
    without a bundle, a bundle file that is not the one the row records, and a run dir that
    already holds answers. Returns what it restored."""
    from kgreason.storage.bundle import CALLS, BundleError, open_bundle
    from kgreason.storage.callstore import LLM_STORE, decode_line
    from kgreason.storage.llm_calls import read_call_log

    rec = entry.get("bundle") or {}
    if not rec.get("file"):
        raise ValueError(f"row {row}: the JSON row has no committed bundle to restore from; run it without --from-bundle")
    path = places.HERE / rec["file"]
    if not path.is_file():
        raise ValueError(f"row {row}: its bundle {rec['file']} is missing (expected under {places.HERE.name}/)")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != rec.get("sha256"):
        raise ValueError(f"row {row}: bundle {rec['file']} is not the file the JSON row records "
                         f"(SHA-256 {digest[:12]}…, the row says {str(rec.get('sha256'))[:12]}…); refused")
    if (run_dir / "predictions.jsonl").exists():
        raise ValueError(f"row {row}: {run_dir} already holds answered questions; --from-bundle restores a row "
                         "on a machine without its run dir (run the same command without it to resume)")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kgreason-restore-") as tmp:
        try:
            opened = open_bundle(path, Path(tmp) / "b")
        except BundleError as err:
            raise ValueError(f"row {row}: {err}") from None
        if len(opened.runs) != 1:
            raise ValueError(f"row {row}: bundle {rec['file']} holds {len(opened.runs)} runs, expected the row's one")
        src = opened.run_dir(opened.runs[0])
        run_dir.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.iterdir()):
            if f.is_file():
                shutil.copy2(f, run_dir / f.name)
        preds = run_dir / "predictions.jsonl"  # a bundle of a run stopped before its first answer has none
        answered = sum(1 for line in preds.read_text(encoding="utf-8").splitlines() if line.strip()) if preds.exists() else 0
        # only the replies the run used, each named by the run's calls.jsonl: an entry beside them
        # was put there by hand, and a later ordinary run would answer from it
        used = set(read_call_log(src / "calls.jsonl"))
        kept, left_out = [], 0
        with open(opened.root / CALLS, "rb") as f:
            for line in f:
                entry_rec = decode_line(line)
                if entry_rec is not None and entry_rec["key"] in used:
                    kept.append(line if line.endswith(b"\n") else line + b"\n")
                else:
                    left_out += 1
        data = b"".join(kept)
        n_calls = len(kept)
        shard = Path(os.path.expanduser(cache)) / LLM_STORE / f"bundle-{row}-{digest[:8]}.jsonl"
        if n_calls and not shard.exists():  # the same bundle twice adds nothing
            shard.parent.mkdir(parents=True, exist_ok=True)
            part = shard.with_name(shard.name + ".part")
            part.write_bytes(data)
            os.replace(part, shard)
    skipped = (f"; {left_out} cache entr{'y' if left_out == 1 else 'ies'} no run of the bundle used "
               f"{'was' if left_out == 1 else 'were'} left out") if left_out else ""
    return (f"row {row}: restored {answered} answered question(s) into {run_dir} and {n_calls} model "
            f"repl{'y' if n_calls == 1 else 'ies'} into the call cache ({shard.name}) from {rec['file']}{skipped}")


def derive(run_dir: Path, row: str) -> dict:
    """The row's :data:`FROM_BUNDLE` fields as its run dir (or an unpacked bundle) gives them."""
    entry = summarise(run_dir)
    values = per_question(run_dir)
    keys = KEY_METRICS[row.split("_")[0]]
    entry["ci95"] = intervals(values, keys)
    kept = keys + [k for k in COUNTS_PER_QUESTION if k in values]
    entry["per_question"] = {qid: {k: values[k][qid] for k in kept if qid in values.get(k, {})}
                             for qid in sorted({q for k in keys for q in values.get(k, {})})}
    entry.setdefault("partial", False)
    return {k: entry.get(k) for k in FROM_BUNDLE}


def _close(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    return a == b


def bundle_problem(row: str, e: dict) -> str | None:
    """None when the row's committed bundle is intact (its file's SHA-256, every entry's digest)
    and gives the row's :data:`FROM_BUNDLE` fields; else what differs, naming the row and field."""
    import tempfile

    from kgreason.storage.bundle import BundleError, open_bundle

    rec = e.get("bundle") or {}
    path = places.HERE / rec.get("file", "")
    if not path.is_file():
        return f"{row}: its bundle {rec.get('file')} is missing"
    if hashlib.sha256(path.read_bytes()).hexdigest() != rec.get("sha256"):
        return f"{row}: {rec.get('file')} is not the file the row was committed with (SHA-256 differs)"
    with tempfile.TemporaryDirectory(prefix="kgreason-validation-") as tmp:
        try:
            opened = open_bundle(path, Path(tmp) / "b")
        except BundleError as err:
            return f"{row}: {err}"
        got = derive(opened.run_dir(opened.runs[0]), row)
    want = {k: e.get(k, False if k == "partial" else None) for k in FROM_BUNDLE}
    for k in FROM_BUNDLE:
        if not _close(got[k], want[k]):
            return f"{row}: field {k} of the JSON row differs from what its bundle {rec.get('file')} gives"
    return None


def bundle_problems() -> list[str]:
    """Every committed row with a bundle whose bundle does not give it (:func:`bundle_problem`)."""
    out = []
    for f in sorted(places.HERE.glob("validation_*.json")):
        for row, e in json.loads(f.read_text()).items():
            if e.get("bundle") and (p := bundle_problem(row, e)):
                out.append(f"{f.name}: {p}")
    return out
