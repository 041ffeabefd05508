"""A row from its run dir: the run's metrics, each question's values, bootstrap intervals,
paired differences against its base row, and what its run recorded (funnel, pool, fallbacks)."""

from __future__ import annotations

import json
from pathlib import Path

from validation_runner import places
from validation_runner.rows import COUNTS_PER_QUESTION, KEY_METRICS, ROUTES, WITHIN_ROW, baseline_of


def per_question(run_dir: Path) -> dict[str, dict[str, float]]:
    """Each question's metric values (the last row per id of predictions.jsonl), by metric name."""
    from kgreason.runs import last_rows

    rows = last_rows(json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines() if line.strip())
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        for k, v in (r.get("metrics") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
                out.setdefault(k, {})[str(r["id"])] = float(v)
    return out


def llm_seconds_per_question(run_dir: Path) -> tuple[float, int] | None:
    """The model's own time per question (each row's ``usage.latency_s``), averaged over the
    questions the backend answered in full: a question with any call answered from the call cache
    (``usage.cache_hits`` > 0, its latency counted 0) is left out, so the figure does not depend on
    what the cache held. Returns (mean, questions averaged), or None where no question qualifies
    (a sitting that only replayed). Recorded per row, so it survives a stop and a resume, where
    ``timing.json`` (written at a run's end) does not; retrieval and ranking time are not in it."""
    from kgreason.runs import last_rows

    rows = last_rows(json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines() if line.strip())
    lat = []
    for r in rows:
        u = r.get("usage") or {}
        if isinstance(u.get("latency_s"), (int, float)) and (u.get("calls") or 0) > 0 and not u.get("cache_hits"):
            lat.append(float(u["latency_s"]))
    return (round(sum(lat) / len(lat), 1), len(lat)) if lat else None


def fallbacks(run_dir: Path) -> dict[str, int] | None:
    """SubQRAG's corpus fallbacks (§2.3: a sub-question the retrieved triples did not answer, read
    from the passages, where Eq. 4's update writes): ``{question id: fallbacks}`` from the traces'
    ``subquestion`` steps, or None for a run whose traces have none (not SubQRAG)."""
    from kgreason.runs import last_rows

    rows = last_rows(json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines() if line.strip())
    out, seen = {}, False
    for r in rows:
        steps = [st for st in (r.get("trace") or []) if isinstance(st, dict) and st.get("kind") == "subquestion"]
        seen = seen or bool(steps)
        out[str(r["id"])] = sum(1 for st in steps if (st.get("data") or {}).get("source") == "passages")
    return out if seen else None


def intervals(values: dict[str, dict[str, float]], keys: list[str]) -> dict[str, list[float]]:
    """95% percentile-bootstrap intervals over questions (kgreason.stats, B = 2,000, seeded)."""
    from kgreason.stats import bootstrap_ci

    out = {}
    for k in keys:
        if values.get(k):
            ci = bootstrap_ci(list(values[k].values()))
            out[k] = [round(ci.lo, 4), round(ci.hi, 4)]
    return out


def paired(values: dict, base: dict, keys: list[str]) -> dict[str, dict]:
    """Paired differences (row − base) on the questions both answered, with the paired-bootstrap
    95% interval and, for 0/1 metrics, McNemar's exact p-value (kgreason.stats)."""
    from kgreason.stats import paired_bootstrap

    out = {}
    for k in keys:
        ids = sorted(set(values.get(k, {})) & set(base.get(k, {})))
        if not ids:
            continue
        d = paired_bootstrap([values[k][i] for i in ids], [base[k][i] for i in ids])
        out[k] = {"diff": round(d.diff, 4), "ci95": [round(d.lo, 4), round(d.hi, 4)], "p": float(f"{d.p:.3g}"),
                  "mcnemar_p": None if d.mcnemar_p is None else float(f"{d.mcnemar_p:.3g}"), "n": d.n}
    return out


def committed_values(entry: dict) -> dict[str, dict[str, float]]:
    """A committed row's ``per_question`` values, by metric name (the shape ``per_question`` returns)."""
    out: dict[str, dict[str, float]] = {}
    for qid, ms in (entry.get("per_question") or {}).items():
        for k, v in ms.items():
            out.setdefault(k, {})[qid] = float(v)
    return out


def base_values(base: str, name: str, route: str, table: dict) -> tuple[dict, str] | None:
    """The base row's per-question values and where they came from: its run dir on this machine,
    else its committed ``per_question`` in this table, else in a larger held-out table of the same
    route (the held-out draw is nested, so a larger N holds this N's questions; the pairing keeps
    the questions both rows answered)."""
    base_dir = places.ROOT / "outputs" / "validation" / name / base
    if (base_dir / "predictions.jsonl").exists():
        return per_question(base_dir), f"outputs/validation/{name}/{base}"
    if table.get(base, {}).get("per_question"):
        return committed_values(table[base]), f"validation_{name}.json"
    if name.startswith("heldout_") and "_skip" not in name:  # a fresh draw shares no question with the others
        suffix = ROUTES[route][1]
        for f in sorted(places.HERE.glob(f"validation_heldout_n*{suffix}.json")):
            if f.stem.removeprefix("validation_heldout_n").removesuffix(suffix).isdigit():
                e = json.loads(f.read_text()).get(base, {})
                if e.get("per_question"):
                    return committed_values(e), f.name
    return None


def pool_info(run_dir: Path, m: dict, n_ex: int) -> dict:
    """A text-QA row's passage pool: its size (``retrieval/pool_size``) and what it holds, from the
    run's own config (``dataset.pool``, ``dataset.corpus``); {} for a row with no pool. The README
    and docs/validation.md print it beside the row and refuse to compare rows with other pools."""
    size = m.get("retrieval/pool_size")
    if not size:
        return {}
    import yaml

    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        cfg = {}
    ds, own = cfg.get("dataset") or {}, (cfg.get("reasoner") or {}).get("corpus", "dataset")
    what = ("the paragraphs of every question of the dataset's sample (dataset.pool=protocol: the same for any N)"
            if ds.get("pool") == "protocol" else f"the paragraphs of the {n_ex} questions run")
    if ds.get("corpus"):
        what = "the dataset's corpus file + " + what
    if own not in (None, "dataset"):  # reasoner.corpus names its own pool (a JSONL file, the embedded world)
        what = f"reasoner.corpus={own}"
    return {"pool_passages": int(round(float(size))), "pool_from": what}


def funnel_of(m: dict) -> dict[str, float] | None:
    """A run's funnel (issue 72): ``{stage or stage=value: share of its questions}`` in the
    reasoner's stage order, from metrics.json's ``funnel/*`` keys; None for a run without one."""
    from kgreason.metrics.funnel import funnel_columns

    cols = funnel_columns(m)
    return {label: m[key] for label, key in cols if isinstance(m.get(key), (int, float))} or None


def summarise(run_dir: Path) -> dict:
    m = json.loads((run_dir / "metrics.json").read_text())
    t = json.loads((run_dir / "timing.json").read_text()) if (run_dir / "timing.json").exists() else {}
    n_ex = m.get("run/n_examples") or 0
    return {
        "n_examples": n_ex,
        "metrics": {k.removeprefix("metric/"): v for k, v in m.items() if k.startswith("metric/")},
        "unparseable_replies": m.get("llm/parse_failures"),
        "reasks": m.get("llm/reasks"),
        # the method's calls (answer, score, index purposes), answered by the model or the cache:
        # (the same figure as llm/calls_per_question since issue 30; summed here for older metrics.json)
        "llm_calls_per_question": (sum(m.get(f"llm/{p}/{k}", 0) or 0 for p in ("answer", "score", "index")
                                       for k in ("calls", "cache_hits")) / n_ex) if n_ex else None,
        "tokens_per_question": m.get("llm/tokens_per_question"),
        "backend_calls": m.get("llm/calls"),
        "cache_hits": m.get("llm/cache_hits"),
        "errors": m.get("run/errors"),
        "wall_s": t.get("wall_s"),
        **({"llm_seconds_per_question": ls[0], "llm_seconds_questions": ls[1]}
           if (ls := llm_seconds_per_question(run_dir)) is not None else {}),
        # the mean size of the set answer_coverage is measured over (recorded since issue 41)
        **({"retrieved_size": m["retrieval/retrieved_size"]} if "retrieval/retrieved_size" in m else {}),
        # the share of questions answered on the "nothing linked / nothing retrieved" path (issue 43)
        **({"empty_rate": m["retrieval/empty_rate"]} if m.get("retrieval/empty_rate") is not None else {}),
        # a partial row: what its run would answer in all (the split can hold fewer than N: 80 WebQSP)
        **({"partial": True, **({"n_expected": m["run/n_expected"]} if m.get("run/n_expected") else {})}
           if m.get("run/partial") else {}),
        # SubQRAG: the sub-questions that fell back to the passages, and the triples Eq. 4 wrote
        **({"fallbacks": sum(fb.values()), "questions_with_fallback": sum(1 for v in fb.values() if v)}
           if (fb := fallbacks(run_dir)) is not None else {}),
        **({"triples_written": m["metric/triples_written_total"]}
           if m.get("metric/triples_written_total") is not None else {}),
        **pool_info(run_dir, m, n_ex),
        # where the method lost its questions: each funnel stage's share (issue 72, kgreason/metrics/funnel.py)
        **({"funnel": fun} if (fun := funnel_of(m)) else {}),
    }


def row_statistics(run_dir: Path, row: str, table_name: str, route: str, table: dict) -> dict:
    """What a measured row adds to its run's summary: the 95% intervals of its key metrics, each
    question's values (``per_question``: committed, so a later pairing needs no run dir of this
    machine), the paired difference to its base row (:func:`baseline_of`) and, for LogosKG-Dx, its
    rounds against each other (``paired_within``)."""
    values = per_question(run_dir)
    keys = KEY_METRICS[row.split("_")[0]]
    out: dict = {"ci95": intervals(values, keys)}
    kept = keys + [k for k in COUNTS_PER_QUESTION if k in values]
    out["per_question"] = {qid: {k: values[k][qid] for k in kept if qid in values.get(k, {})}
                           for qid in sorted({q for k in keys for q in values.get(k, {})})}
    base = baseline_of(row)
    found = base_values(base, table_name, route, table) if base else None
    if found:
        out["paired"] = {"against": base, "by_metric": paired(values, found[0], keys), "base_from": found[1]}
    within = {f"{a} - {b}": paired({"d": values.get(a, {})}, {"d": values.get(b, {})}, ["d"]).get("d")
              for a, b in WITHIN_ROW.get(row, [])}
    if any(within.values()):
        out["paired_within"] = {k: v for k, v in within.items() if v}
    return out
