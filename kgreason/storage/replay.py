"""``kgreason bundle export|verify|replay``: make, check and re-run run bundles
(:mod:`kgreason.storage.bundle`).

* ``export RUN_OR_SWEEP_DIR... -o FILE [--cache DIR]``: one ``.tar.gz`` of the runs and every
  model call they made or replayed.
* ``verify FILE``: checks every entry's SHA-256 against the manifest and every cache entry's
  checksum, and re-scores each run's bundled predictions (kgreason/score.py) against its
  metrics.json; seconds, no model.
* ``replay FILE [--out DIR]``: re-runs every run of the bundle from its launch overrides (run.json)
  with the bundle's entries as a read-only call store (``llm_cache.mode=readonly``): zero model
  calls; a miss is an error naming the run, example and purpose. Prints one line per run:
  identical, or the first example and field that differ. Fields that describe what a run spent,
  not what it answered (``llm/calls``, ``llm/cache_hits``, ``llm/cost_usd``, latencies, seconds,
  ``prepare/*``: set-up work, which depends on what was cached), are left out of the comparison:
  a replay pays for nothing. A record that later code adds and an older bundle lacks
  (:data:`ADDED_SINCE`: the funnel of issue 72, ``extra.funnel`` and ``funnel/*``) is not a
  difference when only the replay has it; where the bundle has it, it is compared. ``--out`` must be a new or empty folder (an earlier replay's finished
  runs there would be resumed, not replayed). Overrides of where a run writes (``paths.*``,
  ``*.cache_dir``, ``*.store_dir``, ``*.index_dir``, ``*.directory``) are left out: a replay
  writes where this machine's defaults say, never where a bundle says.

The bundle is unpacked into a temporary folder, removed however the command ends.

The data a run read is not in a bundle: ``kgreason data`` fetches it (the manifest's ``needs``
lists each file with its fingerprint).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from kgreason.storage.bundle import CALLS, BundleError, Opened, cache_records, export, open_bundle, requests
from kgreason.secrets import REDACTED
from kgreason.storage.callstore import LLM_STORE

#: leaf names that describe what a run spent or how long it took, not what it answered
SPENT = frozenset({"calls", "cache_hits", "cost_usd", "latency_s", "cached", "seconds",
                   # how much of a prompt a backend's prefix cache held depends on its state then
                   "prompt_tokens_reused", "prompt_tokens_computed", "cpu_s"})
#: records kgreason added to rows and metrics after bundles were made: a replay of an older bundle
#: writes them and the bundle lacks them, which says nothing about the answers (issue 72's funnel:
#: ``extra["funnel"]``, ``funnel/<stage>``, ``funnel/_stages``)
ADDED_SINCE = ("funnel",)
#: launch overrides a replay sets itself
DROPPED = ("llm_cache.", "hydra.", "tracking", "+llm_cache.", "++llm_cache.")
#: where a run writes besides its run dir (caches, stores, indexes, partitions, the path roots): a
#: bundle's override of one is a path of the machine that made it (or a stranger's choice), so a
#: replay writes where this machine's defaults say
WRITE_LOCATIONS = ("cache_dir", "store_dir", "index_dir", "directory")


def _writes_somewhere(override: str) -> bool:
    key = str(override).lstrip("+~").split("=", 1)[0]
    return key.startswith("paths.") or key.rsplit(".", 1)[-1] in WRITE_LOCATIONS


def _spent(key: str) -> bool:
    if key.startswith("prepare/"):  # set-up work done (embedding rows built...): depends on what was cached
        return True
    leaf = key.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    return leaf in SPENT or leaf.endswith(("_s", "_seconds")) or leaf.startswith("seconds")


def _added_since(key: str) -> bool:
    return any(key == p or key.startswith(p + "/") for p in ADDED_SINCE)


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The path of the first field where ``a`` (the bundle's) and ``b`` (the replay's) differ, or
    None: spending fields ignored, and a record of :data:`ADDED_SINCE` that only ``b`` holds."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if _spent(str(k)):
                continue
            if k not in a and _added_since(str(k)):
                continue  # a bundle made before kgreason recorded it
            if k not in a or k not in b:
                return f"{path}.{k}".lstrip(".")
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d is not None:
                return d.lstrip(".")
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}[len {len(a)} vs {len(b)}]".lstrip(".")
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d is not None:
                return d.lstrip(".")
        return None
    return None if a == b else path.lstrip(".") or "(value)"


def _rows(path: Path) -> list[dict[str, Any]]:
    from kgreason.runs import last_rows

    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return last_rows(rows)


def first_row_difference(bundled: list[dict[str, Any]], replayed: dict[Any, dict[str, Any]]) -> str | None:
    """The first bundled example the replay did not answer, or answered differently (by id)."""
    for row in bundled:
        other = replayed.get(row.get("id"))
        if other is None:
            return f"differs: example {row.get('id')} was not answered by the replay"
        d = first_difference(row, other)
        if d is not None:
            return f"differs: example {row.get('id')}, field {d}"
    return None


def compare_run(bundled: Path, replayed: Path) -> str:
    """``identical`` or where the replayed run first differs from the bundled one."""
    a, b = _rows(bundled / "predictions.jsonl"), _rows(replayed / "predictions.jsonl")
    by_id = {r.get("id"): r for r in b}
    if (d := first_row_difference(a, by_id)) is not None:
        return d
    if len(b) != len(a):
        return f"differs: the replay answered {len(b)} examples, the bundle holds {len(a)}"
    ma = json.loads((bundled / "metrics.json").read_text(encoding="utf-8"))
    mb = json.loads((replayed / "metrics.json").read_text(encoding="utf-8")) if (replayed / "metrics.json").is_file() else {}
    d = first_difference(ma, mb)
    if d is not None:
        return f"differs: metrics.json {d}: {ma.get(d)!r} in the bundle, {mb.get(d)!r} replayed"
    return "identical"


def verify(opened: Opened) -> list[tuple[str, bool, str]]:
    """(run, ok, line) per run: the bundled predictions re-scored against metrics.json, and every
    key of the run's calls.jsonl present among the bundle's cache entries."""
    from kgreason.metrics import METRICS
    from kgreason.score import ScoreInputError, read_pairs, score

    records = cache_records(opened)
    used = {k for rel in opened.runs for k in _keys(opened.run_dir(rel))}
    out = []
    for rel in opened.runs:
        d = opened.run_dir(rel)
        metrics = json.loads((d / "metrics.json").read_text(encoding="utf-8"))
        names = [k.split("/", 1)[1] for k in metrics if k.startswith("metric/") and k.split("/", 1)[1] in METRICS]
        try:
            got = score(read_pairs(d / "predictions.jsonl"), names)
        except (ScoreInputError, KeyError) as e:
            out.append((rel, False, f"{rel}: predictions.jsonl cannot be re-scored: {e}"))
            continue
        bad = [n for n in names if got[n] != metrics[f"metric/{n}"] and not (
            got[n] is not None and metrics[f"metric/{n}"] is not None and abs(got[n] - metrics[f"metric/{n}"]) < 1e-9)]
        missing = [k for k in _keys(d) if k not in records]
        asked = requests(metrics)
        if bad:
            n = bad[0]
            out.append((rel, False, f"{rel}: metric/{n} re-scored {got[n]!r}, metrics.json says "
                                    f"{metrics[f'metric/{n}']!r}"))
        elif missing:
            out.append((rel, False, f"{rel}: cache entry {missing[0]} (calls.jsonl) is not in {CALLS}"))
        elif asked and not _keys(d):
            out.append((rel, False, f"{rel}: made {asked} model requests but the bundle lists no cache key of "
                                    "them (no calls.jsonl); it cannot be replayed"))
        else:
            out.append((rel, True, f"{rel}: {len(names)} metrics re-scored, equal; {len(_keys(d))} cache entries present"))
    unused = sorted(set(records) - used)
    if unused:  # export packs only what the runs used: an entry beside them was put there by hand
        out.append((CALLS, False, f"{CALLS}: {len(unused)} cache entr{'y' if len(unused) == 1 else 'ies'} that no run of "
                                  f"the bundle used (first {unused[0][:12]}…; no calls.jsonl lists it): added "
                                  "after export, and never installed"))
    return out


def _keys(run: Path) -> list[str]:
    from kgreason.storage.llm_cache import read_call_log

    return read_call_log(run / "calls.jsonl")


def data_problem(opened: Opened, rel: str) -> str | None:
    """Why run ``rel`` cannot be replayed on this machine's data, or None: a data file it read is
    missing under ``KGREASON_DATA`` or is not the file the bundle was made with (size, SHA-256)."""
    import hashlib

    from kgreason.storage.bundle import local_path

    info = next((r for r in opened.manifest.get("runs", []) if r.get("dir") == rel), {})
    for spelled, fp in sorted((info.get("data_files") or {}).items()):
        p = local_path(spelled)
        if not p.is_file():
            return (f"needs the data file {spelled} ({p} not found; set KGREASON_DATA to the data root, "
                    "or fetch it with `kgreason data fetch`)")
        want = (fp or {}).get("sha256") if isinstance(fp, dict) else None
        if isinstance(fp, dict) and fp.get("bytes") is not None and p.stat().st_size != fp["bytes"]:
            return f"{spelled}: {p} has {p.stat().st_size:,} bytes, the bundle was made with {fp['bytes']:,}"
        if want:
            h = hashlib.sha256()
            with open(p, "rb") as f:
                while b := f.read(1 << 22):
                    h.update(b)
            if h.hexdigest() != want:
                return f"{spelled}: {p} is not the file the bundle was made with (SHA-256 {h.hexdigest()[:12]}…, expected {want[:12]}…)"
    return None


def replay_run(opened: Opened, rel: str, cache: Path, out: Path) -> str:
    """Re-run one run of the bundle into ``out`` against ``cache`` (readonly); its result line."""
    problem = data_problem(opened, rel)
    if problem:
        return f"failed: {problem}"
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import kgreason  # noqa: F401 - registers the resolvers conf/ uses
    from kgreason.paths import config_dir, hydra_quote
    from kgreason.run import run

    record = json.loads((opened.run_dir(rel) / "run.json").read_text(encoding="utf-8"))
    # an override whose value a bundle redacted names a secret (a key): a replay calls no model
    overrides = [o for o in record.get("overrides") or [] if not str(o).lstrip("+~").startswith(DROPPED)
                 and REDACTED not in str(o) and not _writes_somewhere(o)]
    # quoted for Hydra: a sweep's job dir is named after its overrides (``0_reasoner=io,seed=0``)
    overrides += [f"llm_cache.dir={hydra_quote(str(cache))}", "llm_cache.mode=readonly", "tracking=none",
                  f"hydra.run.dir={hydra_quote(str(out))}"]
    bundled_metrics = json.loads((opened.run_dir(rel) / "metrics.json").read_text(encoding="utf-8"))
    if bundled_metrics.get("run/partial"):  # the examples it never answered miss, as they must: not a failed run
        overrides = [o for o in overrides if not str(o).lstrip("+~").startswith(("max_error_rate=", "max_consecutive_failures="))]
        overrides += ["max_error_rate=1.0", "max_consecutive_failures=0"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
        cfg = compose(config_name="config", overrides=overrides)
    failed = None
    try:
        run(cfg, out)
    except Exception as e:  # noqa: BLE001 - reported as this run's line
        failed = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if "CacheMiss" in type(e).__name__ or "llm_cache.mode=readonly" in str(e):
            return f"cache miss: {str(e).splitlines()[0]}"
    bundled = {r.get("id") for r in _rows(opened.run_dir(rel) / "predictions.jsonl")}
    partial = bool(json.loads((opened.run_dir(rel) / "metrics.json").read_text(encoding="utf-8")).get("run/partial"))
    for row in _rows(out / "predictions.jsonl"):  # a miss is the example's error: name the first
        if partial and row.get("id") not in bundled:
            continue  # a run stopped before its N: the examples it never answered have no replies to replay
        err = str(row.get("error") or "")
        if "CacheMiss" in err or "llm_cache.mode=readonly" in err:
            return f"cache miss: example {row.get('id')}: {err.splitlines()[0]}"
    if partial and failed is None:
        return compare_partial(opened.run_dir(rel), out, bundled)
    return failed or compare_run(opened.run_dir(rel), out)


def compare_partial(bundled_dir: Path, replayed: Path, ids: set) -> str:
    """A bundled run stopped before its N (``run/partial``): the replay answers the whole config,
    so only the examples the bundle holds are compared, row by row, and re-scored against the
    bundle's metrics (the examples it never answered miss the call store, as they must)."""
    from kgreason.score import read_pairs, score

    a = _rows(bundled_dir / "predictions.jsonl")
    by_id = {r.get("id"): r for r in _rows(replayed / "predictions.jsonl") if r.get("id") in ids}
    if (d := first_row_difference(a, by_id)) is not None:
        return d
    kept = replayed / "predictions.bundled_examples.jsonl"
    kept.write_text("".join(json.dumps(by_id[r.get("id")]) + "\n" for r in a), encoding="utf-8")
    ma = json.loads((bundled_dir / "metrics.json").read_text(encoding="utf-8"))
    names = [k.split("/", 1)[1] for k in ma if k.startswith("metric/")]
    got = score(read_pairs(kept), [n for n in names if n in _known_metrics()])
    for n, v in got.items():
        w = ma.get(f"metric/{n}")
        if not (v == w or (v is not None and w is not None and abs(v - w) < 1e-9)):
            return f"differs: metric/{n} {w!r} in the bundle, {v!r} re-scored from the replay"
    return f"identical ({len(a)} examples of a partial run)"


def _known_metrics():
    from kgreason.metrics import METRICS

    return METRICS


def replay(opened: Opened, out: Path) -> list[tuple[str, bool, str]]:
    """Replay every run of ``opened`` into ``out`` (a new or empty folder: see :func:`out_problem`)."""
    if (problem := out_problem(out)) is not None:
        raise BundleError(problem)
    cache = out / "_bundle_cache"
    (cache / LLM_STORE).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(opened.root / CALLS, cache / LLM_STORE / "bundle.jsonl")
    import logging

    res = []
    for i, rel in enumerate(opened.runs, 1):
        logging.getLogger("kgreason").info("replaying run %s (%d of %d)", rel, i, len(opened.runs))
        line = replay_run(opened, rel, cache, out / "runs" / rel)
        res.append((rel, line.startswith("identical"), f"{rel}: {line}"))
    return res


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgreason bundle", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="action", required=True)
    e = sub.add_parser("export", help="write a bundle of run or sweep dirs")
    e.add_argument("dirs", nargs="+", help="run dirs or sweep dirs")
    e.add_argument("-o", "--out", required=True, help="the bundle file (.tar.gz)")
    e.add_argument("--cache", default=None, help="the llm_cache.dir the runs used (default: the one run.json names)")
    v = sub.add_parser("verify", help="check digests and re-score the bundled predictions")
    v.add_argument("bundle")
    r = sub.add_parser("replay", help="re-run every run of the bundle with its cache entries, read-only")
    r.add_argument("bundle")
    r.add_argument("--out", default=None, help="where the replayed runs go: a new or empty folder (default: a "
                   "temporary dir, removed)")
    a = ap.parse_args(argv)
    from kgreason import progress

    progress.tool_log()  # a replay's set-up (a store build) and its runs print their progress lines
    try:
        if a.action == "export":
            m = export(a.dirs, a.out, a.cache)
            n_calls = sum(r.get("calls", 0) for r in m["runs"])
            print(f"{a.out}: {len(m['runs'])} runs, {n_calls} cache keys listed, "
                  f"{Path(a.out).stat().st_size / 1e3:.1f} kB")
            if n := m.get("redacted_replies"):
                print(f"{n} repl{'y' if n == 1 else 'ies'} quoted a secret of the runs: redacted (a replay reads "
                      "them redacted, as the runs' own rows were written)")
            return 0
        if a.action == "replay" and a.out and (problem := out_problem(Path(a.out))):
            raise BundleError(problem)
        tmp = Path(tempfile.mkdtemp(prefix="kgreason-bundle-"))
        try:  # the unpacked bundle is removed however this ends (a refusal, an error, Ctrl-C)
            with progress.stage(f"checking and unpacking {a.bundle}", lazy=True):
                opened = open_bundle(a.bundle, tmp / "bundle")
            if a.action == "verify":
                with progress.stage(f"verifying {len(opened.runs)} run(s) of {a.bundle}", lazy=True):
                    lines = verify(opened)
            else:
                out = Path(a.out) if a.out else tmp / "replay"
                lines = replay(opened, out)
            runs = set(opened.runs)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except BundleError as err:
        print(f"kgreason bundle: error: {err}", file=sys.stderr)
        return 2
    for _rel, _ok, line in lines:
        print(line)
    bad = sum(not ok for _r, ok, _l in lines)
    n_runs = sum(r in runs for r, _ok, _l in lines)
    good = sum(ok for r, ok, _l in lines if r in runs)
    print(f"{good} of {n_runs} runs {'verified' if a.action == 'verify' else 'identical'}")
    return 0 if bad == 0 else 1


def out_problem(out: Path) -> str | None:
    """Why ``replay --out`` cannot replay into ``out``: it holds something already (an earlier
    replay's finished runs would be resumed, not replayed, and read as identical), or it is not a
    folder. None for a new or empty folder."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        return f"--out {out}: not a folder; give a new or empty folder"
    if out.is_dir() and any(out.iterdir()):
        return (f"--out {out}: not empty (an earlier replay?); a replay into it would resume what it holds "
                "rather than replay it: give a new or empty folder")
    return None


if __name__ == "__main__":
    raise SystemExit(main())
