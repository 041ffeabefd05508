"""``kgreason bundle export|verify|replay``: make, check and re-run run bundles
(:mod:`kgreason.storage.bundle`).

* ``export RUN_OR_SWEEP_DIR... -o FILE [--cache DIR]``: one ``.tar.gz`` of the runs and every
  model call they made or replayed.
* ``verify FILE``: checks every entry's SHA-256 against the manifest and every cache entry's
  checksum, and re-scores each run's bundled predictions (kgreason/score.py) against its
  metrics.json; seconds, no model.
* ``replay FILE [--out DIR] [--first K] [--rankings verify|recorded] [--json FILE]``: re-runs
  every run of the bundle from its launch overrides (run.json) with the bundle's entries as a
  read-only call store (``llm_cache.mode=readonly``): zero model calls. One verdict per run
  (:class:`Verdict`, issue 71), which says whether the row the run gave still describes today's
  code:

  - ``identical``: every request the replay made is one the bundle holds, and the predictions
    and metrics are the bundle's (a row is *current*);
  - ``stale: example X, request R (purpose P): the method now asks something else; …``: the
    first request the bundle does not hold, named as the reasoner's trace names it
    (``hypothesis_p0_t1``), with the bundle's nearest request and the first line where the two
    differ;
  - ``stale: example X: the same replies give another result: field F (…)``: every request hit,
    but the prediction, a metric or a trace field differs: the scoring or the parsing changed;
  - ``failed: …``: the replay could not run (the data missing, a start-up error), on one line.

  Fields that describe what a run spent, not what it answered (``llm/calls``,
  ``llm/cache_hits``, ``llm/cost_usd``, latencies, seconds, ``prepare/*``: set-up work, which
  depends on what was cached), are left out of the comparison: a replay pays for nothing. A
  record that later code adds and an older bundle lacks (:data:`ADDED_SINCE`: the funnel of
  issue 72, ``extra.funnel`` and ``funnel/*``; the ``rankings`` of issue 71) is not a difference
  when only the replay has it; where the bundle has it, it is compared.

  Rankings by score (kgreason/ranking.py): each row records the rankings that fed its prompts
  (for rows made before, RAG's and RagText's traces hold them). ``--rankings verify`` (the
  default) recomputes them, building the KG embedding stores the run used, and keeps the
  bundle's ranking where the two differ only at float level (reported as ``float-level: …``,
  never as a miss); ``--rankings recorded`` uses the recorded rankings as they are and builds no
  store (``embedder.kg_store=null``), which is how CI replays every bundled row in seconds.
  ``--first K`` replays only the first K questions of each run (a fixed prefix, in the run's
  order). The set-up before the first question prints its progress.

  ``--out`` must be a new or empty folder (an earlier replay's finished runs there would be
  resumed, not replayed). Overrides of where a run writes (``paths.*``, ``*.cache_dir``,
  ``*.store_dir``, ``*.index_dir``, ``*.directory``) are left out: a replay writes where this
  machine's defaults say, never where a bundle says.

The bundle is unpacked into a temporary folder, removed however the command ends.

The data a run read is not in a bundle: ``kgreason data`` fetches it (the manifest's ``needs``
lists each file with its fingerprint; its runs' ``stores`` name the embedding stores and graph
database a replay builds or finds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
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
#: ``extra["funnel"]``, ``funnel/<stage>``, ``funnel/_stages``; issue 71's ``rankings``)
ADDED_SINCE = ("funnel", "rankings")
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


def compare_run(bundled: Path, replayed: Path) -> str:
    """``identical`` or where the replayed run first differs from the bundled one (its rows by
    :func:`row_verdict`, then metrics.json)."""
    a, b = _rows(bundled / "predictions.jsonl"), _rows(replayed / "predictions.jsonl")
    by_id = {r.get("id"): r for r in b}
    if (d := row_verdict(a, by_id)) is not None:
        return d[0]
    if len(b) != len(a):
        return f"stale: the replay answered {len(b)} examples, the bundle holds {len(a)}"
    ma = json.loads((bundled / "metrics.json").read_text(encoding="utf-8"))
    mb = json.loads((replayed / "metrics.json").read_text(encoding="utf-8")) if (replayed / "metrics.json").is_file() else {}
    d = first_difference(ma, mb)
    if d is not None:
        return f"stale: metrics.json {d}: {ma.get(d)!r} in the bundle, {mb.get(d)!r} now"
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
    from kgreason.storage.llm_calls import read_call_log

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


@dataclass
class Verdict:
    """What one run's replay says (issue 71): ``status`` ``identical`` (the row is current),
    ``stale`` (today's code asks something else, or gives another result from the same replies)
    or ``failed`` (the replay could not run: data missing, a start-up error); ``line`` is its one
    line. ``example`` and ``request`` name the first example and request that differ; ``kind``
    says how (``miss``, ``result``, ``metrics``, ``unanswered``, ``error``)."""

    run: str
    status: str
    line: str
    example: str | None = None
    request: str | None = None
    kind: str | None = None
    examples: int = 0
    of: int = 0
    float_level: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, "")}


#: how a replay ranks (kgreason/ranking.py): ``verify`` recomputes every recorded ranking (the
#: KG embedding stores built as the run built them) and keeps the bundle's where the two differ
#: only at float level; ``recorded`` uses the recorded rankings as they are, computing nothing
#: (no KG embedding store is built: ``embedder.kg_store=null``), as CI's replays do
RANKINGS = ("verify", "recorded")


def _legacy_rankings(trace: list) -> list[dict]:
    """The rankings a row recorded before rows kept them (``rankings``), read back from its
    trace where the trace holds what was kept: RAG's ``rank``/``cosine_filter`` step (the kept
    facts, scores rounded to 4 decimals) and RagText's ``retrieve``/``dense_passages`` step (the
    kept titles, full scores)."""
    from kgreason.ranking import FLOAT_TOL, ROUNDED_TOL

    out = []
    for st in trace or []:
        if not isinstance(st, dict):
            continue
        kind, name, d = st.get("kind"), st.get("name"), st.get("data") or {}
        if (kind, name) == ("rank", "cosine_filter") and isinstance(d.get("kept"), list) and d.get("candidates"):
            out.append({"site": "rag.cosine_filter", "kept_keys": [str(x[0]) for x in d["kept"]],
                        "scores": [float(x[1]) for x in d["kept"]], "tol": ROUNDED_TOL})
        elif (kind, name) == ("retrieve", "dense_passages") and d.get("pool") and isinstance(d.get("titles"), list):
            out.append({"site": "rag_text.passages", "kept_keys": [str(x) for x in d["titles"]],
                        "scores": [float(x) for x in d.get("scores") or []], "tol": FLOAT_TOL})
    return out


def recorded_rankings(rows: list[dict[str, Any]]) -> dict[str, list[dict]]:
    """Example id → the rankings its row recorded (``rankings``; for an older row, read back from
    its trace: :func:`_legacy_rankings`)."""
    out = {}
    for r in rows:
        recs = r.get("rankings")
        if not isinstance(recs, list):
            recs = _legacy_rankings(r.get("trace") or [])
        if recs:
            out[str(r.get("id"))] = recs
    return out


def _short(v: Any, n: int = 90) -> str:
    text = json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else repr(v)
    return text if len(text) <= n else text[: n - 1] + "…"


def _at(obj: Any, path: str) -> Any:
    """The value at ``path`` (``trace[3].data.parsed``) of ``obj``, or None."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        try:
            obj = obj[int(part[1:-1])] if part.startswith("[") else obj[part]
        except (KeyError, IndexError, TypeError, ValueError):
            return None
    return obj


def _messages_text(messages: Any) -> list[str]:
    return [f"{m.get('role')}: {m.get('content')}" for m in messages or [] if isinstance(m, dict)]


def nearest_request(bundled_row: dict[str, Any], missed: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The bundle's request nearest to the one a replay missed (the same name and re-ask first,
    else the most similar text among the example's requests) and where the two first differ."""
    import difflib

    steps = [st for st in bundled_row.get("trace") or [] if isinstance(st, dict) and st.get("kind") == "llm"
             and isinstance((st.get("data") or {}).get("messages"), list)]
    if not steps:
        return None, "the bundle holds no request of this example"
    now = _messages_text(missed.get("messages"))
    same = [st for st in steps if st.get("name") == missed.get("name")
            and int((st.get("data") or {}).get("attempt") or 0) == int(missed.get("attempt") or 0)]
    pool = same or steps
    best = max(pool, key=lambda st: difflib.SequenceMatcher(
        None, "\n".join(_messages_text(st["data"]["messages"])), "\n".join(now), autojunk=False).ratio())
    then = _messages_text(best["data"]["messages"])
    label = best.get("name") + (f" (re-ask {best['data']['attempt']})" if best["data"].get("attempt") else "")
    if then == now:
        return best, (f"the bundle's {label} has the same messages: the reply is missing from the bundle, or the "
                      "request's settings differ (max_tokens, seed, the model's settings)")
    for mi, (a, b) in enumerate(zip(then, now)):
        if a != b:
            la, lb = a.splitlines(), b.splitlines()
            li = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
            x = la[li] if li < len(la) else "(no such line)"
            y = lb[li] if li < len(lb) else "(no such line)"
            return best, (f"the bundle's nearest request {label} differs at message {mi + 1}, line {li + 1}: "
                          f"bundle {_short(x)}, now {_short(y)}")
    return best, f"the bundle's nearest request {label} has {len(then)} messages, now {len(now)}"


def _miss_of(row: dict[str, Any]) -> bool:
    err = str(row.get("error") or "")
    return "CacheMiss" in err or "llm_cache.mode=readonly" in err


def _purpose_of(err: str) -> str | None:
    m = re.search(r"\[example [^\]]*, purpose ([^\]]+)\]", err)
    return m.group(1) if m else None


def row_verdict(bundled: list[dict[str, Any]], replayed: dict[Any, dict[str, Any]]) -> tuple[str, dict] | None:
    """The first bundled example whose replay differs, as ``(line, fields)``, or None when every
    one of them is identical: a miss (the method asks something else), an example the replay did
    not answer or failed on, or another result from the same replies (scoring or parsing)."""
    for row in bundled:
        ex = row.get("id")
        other = replayed.get(ex)
        if other is None:
            return f"stale: example {ex} was not answered by the replay", {"example": ex, "kind": "unanswered"}
        if _miss_of(other) and not _miss_of(row):
            missed = (other.get("extra") or {}).get("missed_request") or {}
            name = missed.get("name")
            if missed.get("attempt"):
                name = f"{name} (re-ask {missed['attempt']})"
            purpose = _purpose_of(str(other.get("error")))
            what = f"request {name}" + (f" (purpose {purpose})" if purpose else "") if name else \
                (f"a request of purpose {purpose}" if purpose else "a request")
            _best, diff = nearest_request(row, missed) if missed else (None, "")
            line = f"stale: example {ex}, {what}: the method now asks something else" + (f"; {diff}" if diff else "")
            return line, {"example": ex, "request": name or purpose, "kind": "miss"}
        if other.get("error") and not row.get("error"):
            first = str(other["error"]).splitlines()[0][:300]
            return f"stale: example {ex}: the replay failed on it: {first}", {"example": ex, "kind": "error"}
        d = first_difference(row, other)
        if d is not None:
            return (f"stale: example {ex}: the same replies give another result: field {d} "
                    f"({_short(_at(row, d))} in the bundle, {_short(_at(other, d))} now); the scoring or parsing "
                    "changed", {"example": ex, "kind": "result"})
    return None


def _cfg_for(opened: Opened, rel: str, cache: Path, out: Path, rankings: str):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import kgreason  # noqa: F401 - registers the resolvers conf/ uses
    from kgreason.paths import config_dir, hydra_quote

    record = json.loads((opened.run_dir(rel) / "run.json").read_text(encoding="utf-8"))
    # an override whose value a bundle redacted names a secret (a key): a replay calls no model
    overrides = [o for o in record.get("overrides") or [] if not str(o).lstrip("+~").startswith(DROPPED)
                 and REDACTED not in str(o) and not _writes_somewhere(o)
                 and not str(o).lstrip("+~").startswith(("max_error_rate=", "max_consecutive_failures="))]
    # quoted for Hydra: a sweep's job dir is named after its overrides (``0_reasoner=io,seed=0``)
    overrides += [f"llm_cache.dir={hydra_quote(str(cache))}", "llm_cache.mode=readonly", "tracking=none",
                  f"hydra.run.dir={hydra_quote(str(out))}",
                  # a miss is the example's own error: the replay answers every example and then says
                  # which one differed first (a stale row's misses never stop it half-way)
                  "max_error_rate=1.0", "max_consecutive_failures=0"]
    if rankings == "recorded" and isinstance((record.get("config") or {}).get("embedder"), dict):
        overrides.append("embedder.kg_store=null")  # the recorded rankings serve: no store is built
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
        return compose(config_name="config", overrides=overrides)


def replay_verdict(opened: Opened, rel: str, cache: Path, out: Path, *, first: int | None = None,
                   rankings: str = "verify") -> Verdict:
    """Re-run run ``rel`` of the bundle into ``out`` against ``cache`` (readonly) and say whether
    it is current (:class:`Verdict`). ``first``: only the first ``first`` questions of the run (a
    fixed prefix, in the run's order); ``rankings``: :data:`RANKINGS`. Never raises for what the
    replay meets: a failure is the verdict's one line."""
    t0 = time.perf_counter()
    try:
        v = _replay_verdict(opened, rel, cache, out, first, rankings)
    except Exception as e:  # noqa: BLE001 - a replay that cannot run is one line, never a traceback
        text = " ".join(str(e).split())[:500]
        v = Verdict(rel, "failed", f"failed: {type(e).__name__}" + (f": {text}" if text else ""))
    v.seconds = round(time.perf_counter() - t0, 1)
    return v


def _replay_verdict(opened: Opened, rel: str, cache: Path, out: Path, first: int | None, rankings: str) -> Verdict:
    from kgreason import ranking
    from kgreason.runner.run import run

    if rankings not in RANKINGS:
        raise ValueError(f"rankings={rankings!r}: expected one of {', '.join(RANKINGS)}")
    problem = data_problem(opened, rel)
    if problem:
        return Verdict(rel, "failed", f"failed: {problem}")
    src = opened.run_dir(rel)
    bundled_rows = _rows(src / "predictions.jsonl")
    bundled_metrics = json.loads((src / "metrics.json").read_text(encoding="utf-8"))
    partial = bool(bundled_metrics.get("run/partial"))
    cfg = _cfg_for(opened, rel, cache, out, rankings)
    failed = None
    with ranking.serving(recorded_rankings(bundled_rows), verify=rankings == "verify") as served:
        try:
            # a partial run's bundle holds replies for the questions it answered: only those are asked
            run(cfg, out, first=first, only={r.get("id") for r in bundled_rows} if partial else None)
        except Exception as e:  # noqa: BLE001 - reported as this run's line, after the rows are read
            failed = f"failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
    replayed = {r.get("id"): r for r in _rows(out / "predictions.jsonl")}
    if first is not None:
        compared = [r for r in bundled_rows if r.get("id") in replayed]
        of = len(bundled_rows)
    else:
        compared, of = bundled_rows, len(bundled_rows)
    if not replayed and failed:
        return Verdict(rel, "failed", failed, of=of)
    found = row_verdict(compared, replayed)
    if found is not None:
        line, info = found
        return Verdict(rel, "stale", line, examples=len(compared), of=of, float_level=served.summary(), **info)
    if failed:
        return Verdict(rel, "failed", failed, examples=len(compared), of=of)
    if first is not None:
        if len(compared) < min(int(first), len(bundled_rows)):
            return Verdict(rel, "stale", f"stale: the replay answered {len(compared)} of the bundle's first {first} "
                           "examples (another question order?)", kind="unanswered", examples=len(compared), of=of)
        line = f"identical (the first {len(compared)} of {of} examples)"
    elif partial:
        line = compare_partial(src, out, {r.get("id") for r in bundled_rows})
    else:
        line = compare_run(src, out)
    fl = served.summary()
    if line.startswith("identical"):
        return Verdict(rel, "identical", line + (f"; {fl}" if fl else ""), examples=len(compared), of=of,
                       float_level=fl)
    return Verdict(rel, "stale", line, kind="metrics", examples=len(compared), of=of, float_level=fl)


def replay_run(opened: Opened, rel: str, cache: Path, out: Path, *, first: int | None = None,
               rankings: str = "verify") -> str:
    """:func:`replay_verdict`'s one line."""
    return replay_verdict(opened, rel, cache, out, first=first, rankings=rankings).line


def compare_partial(bundled_dir: Path, replayed: Path, ids: set) -> str:
    """A bundled run stopped before its N (``run/partial``): the replay answers the whole config,
    so only the examples the bundle holds are compared, row by row, and re-scored against the
    bundle's metrics (the examples it never answered miss the call store, as they must)."""
    from kgreason.score import read_pairs, score

    a = _rows(bundled_dir / "predictions.jsonl")
    by_id = {r.get("id"): r for r in _rows(replayed / "predictions.jsonl") if r.get("id") in ids}
    if (d := row_verdict(a, by_id)) is not None:
        return d[0]
    kept = replayed / "predictions.bundled_examples.jsonl"
    kept.write_text("".join(json.dumps(by_id[r.get("id")]) + "\n" for r in a), encoding="utf-8")
    ma = json.loads((bundled_dir / "metrics.json").read_text(encoding="utf-8"))
    names = [k.split("/", 1)[1] for k in ma if k.startswith("metric/")]
    got = score(read_pairs(kept), [n for n in names if n in _known_metrics()])
    for n, v in got.items():
        w = ma.get(f"metric/{n}")
        if not (v == w or (v is not None and w is not None and abs(v - w) < 1e-9)):
            return f"stale: metric/{n} {w!r} in the bundle, {v!r} re-scored from the replay"
    return f"identical ({len(a)} examples of a partial run)"


def _known_metrics():
    from kgreason.metrics import METRICS

    return METRICS


def replay(opened: Opened, out: Path, *, first: int | None = None, rankings: str = "verify") -> list[Verdict]:
    """Replay every run of ``opened`` into ``out`` (a new or empty folder: see :func:`out_problem`)."""
    if (problem := out_problem(out)) is not None:
        raise BundleError(problem)
    cache = out / "_bundle_cache"
    (cache / LLM_STORE).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(opened.root / CALLS, cache / LLM_STORE / "bundle.jsonl")
    import logging

    res = []
    for i, rel in enumerate(opened.runs, 1):
        try:
            note = setup_note(opened, rel, rankings)
        except Exception:  # noqa: BLE001 - a stranger's manifest: only a message depends on it
            note = "(progress below)"
        print(f"replaying run {rel} ({i} of {len(opened.runs)}): {note}", file=sys.stderr, flush=True)
        res.append(replay_verdict(opened, rel, cache, out / "runs" / rel, first=first, rankings=rankings))
    return res


def setup_note(opened: Opened, rel: str, rankings: str) -> str:
    """What the replay of ``rel`` reads or builds before its first question (the manifest's
    ``stores``, or the run's ``prepare_usage.json`` for an older bundle)."""
    info = next((r for r in opened.manifest.get("runs", []) if r.get("dir") == rel), {})
    stores = list(info.get("stores") or [])
    usage = opened.run_dir(rel) / "prepare_usage.json"
    if not stores and usage.is_file():
        try:
            stores = [{"what": "embedding store", **s} for s in
                      json.loads(usage.read_text(encoding="utf-8")).get("embedding_stores") or []]
        except (OSError, ValueError):
            stores = []
    parts = []
    for s in stores:
        if s.get("what") == "embedding store":
            if rankings == "recorded":
                continue
            parts.append(f"the KG embedding store {s.get('form')} ({s.get('rows', '?'):,} rows, {s.get('dtype')}, "
                         f"key {str(s.get('key'))[:12]}; built once per machine if absent"
                         + (f": {s['build_s']:.0f} s where the bundle was made" if s.get("build_s") else "") + ")"
                         if isinstance(s.get("rows"), int) else f"the KG embedding store {s.get('form')}")
        elif s.get("what") == "graph database":
            parts.append(f"the {s.get('engine')} graph database of the KG (exported once per machine)")
    mode = "recorded rankings, no score computed" if rankings == "recorded" else "rankings recomputed and compared"
    return (", ".join(parts) + "; " if parts else "") + mode + " (progress below)"


def _show_progress(undo: list) -> None:
    """The replay's set-up (a store build, the graph database's export) prints its progress: a
    bar on a terminal, a line every ``KGREASON_PROGRESS_INTERVAL`` seconds otherwise (issue 71:
    a 55-minute store build printed nothing). What it changes is put back by the ``undo`` calls
    (the command may run inside another program: a test, a notebook)."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("kgreason.progress", "kgreason.storage.embedstore"):
        lg = logging.getLogger(name)
        if not lg.handlers:
            level, propagate = lg.level, lg.propagate
            lg.addHandler(handler)
            lg.setLevel(logging.INFO)
            lg.propagate = False
            undo.append(lambda lg=lg, level=level, propagate=propagate: (
                lg.removeHandler(handler), lg.setLevel(level), setattr(lg, "propagate", propagate)))


def main(argv: Sequence[str] | None = None) -> int:
    undo: list = []
    try:
        return _main(argv, undo)
    finally:
        for put_back in undo:
            put_back()


def _main(argv: Sequence[str] | None, undo: list) -> int:
    ap = argparse.ArgumentParser(prog="kgreason bundle", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="action", required=True)
    e = sub.add_parser("export", help="write a bundle of run or sweep dirs")
    e.add_argument("dirs", nargs="+", help="run dirs or sweep dirs")
    e.add_argument("-o", "--out", required=True, help="the bundle file (.tar.gz)")
    e.add_argument("--cache", default=None, help="the llm_cache.dir the runs used (default: the one run.json names)")
    v = sub.add_parser("verify", help="check digests and re-score the bundled predictions")
    v.add_argument("bundle")
    r = sub.add_parser("replay", help="re-run every run of the bundle with its cache entries, read-only, and say "
                                      "per run whether today's code gives it: identical, or stale (where), or failed")
    r.add_argument("bundle")
    r.add_argument("--out", default=None, help="where the replayed runs go: a new or empty folder (default: a "
                   "temporary dir, removed)")
    r.add_argument("--first", type=int, default=None, metavar="K",
                   help="replay only the first K questions of each run, in its order (a fixed prefix)")
    r.add_argument("--rankings", choices=RANKINGS, default="verify",
                   help="verify (default): recompute every ranking by score (building the KG embedding stores "
                        "the run used) and keep the bundle's where they differ only at float level; recorded: "
                        "use the bundle's recorded rankings as they are, building no store")
    r.add_argument("--json", default=None, metavar="FILE", help="also write the verdicts as JSON")
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
        if a.action == "replay":
            if a.out and (problem := out_problem(Path(a.out))):
                raise BundleError(problem)
            if a.first is not None and a.first < 1:
                raise BundleError(f"--first {a.first}: expected a number of questions >= 1")
            _show_progress(undo)
        tmp = Path(tempfile.mkdtemp(prefix="kgreason-bundle-"))
        try:  # the unpacked bundle is removed however this ends (a refusal, an error, Ctrl-C)
            with progress.stage(f"checking and unpacking {a.bundle}", lazy=True):
                opened = open_bundle(a.bundle, tmp / "bundle")
            if a.action == "verify":
                with progress.stage(f"verifying {len(opened.runs)} run(s) of {a.bundle}", lazy=True):
                    lines = verify(opened)
                verdicts = None
            else:
                out = Path(a.out) if a.out else tmp / "replay"
                verdicts = replay(opened, out, first=a.first, rankings=a.rankings)
                lines = [(x.run, x.status == "identical", f"{x.run}: {x.line}") for x in verdicts]
            runs = set(opened.runs)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if verdicts is not None and a.json:
            Path(a.json).write_text(json.dumps([x.to_json() for x in verdicts], indent=2) + "\n", encoding="utf-8")
    except BundleError as err:
        print(f"kgreason bundle: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a file the command itself writes (--json, --out): one line
        print(f"kgreason bundle: error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
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
