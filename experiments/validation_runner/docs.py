"""The generated tables: docs/validation.md's tables of every committed row, the README's method
table and figure, each from the JSON (``--write-docs``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from validation_runner import places
from validation_runner.bundles import bundle_problems
from validation_runner.currency import is_current, is_history, verdict
from validation_runner.rows import KEY_METRICS, METHODS, NOT_A_METHOD_SCORE, ROWS


def funnel_text(e: dict) -> str:
    """A row's funnel for its doc line: each stage with the number of questions that reached it,
    in stage order (``funnel (of 30): topics_linked 30 → yes_depth1 4 → …``); "" without one."""
    f, n = e.get("funnel"), e.get("n_examples")
    if not f or not n:
        return ""
    return f"funnel (of {n}): " + " → ".join(f"{label} {round(share * n)}" for label, share in f.items())


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "–"


def replay_cell(e: dict) -> str:
    """Where a row can be replayed from and what its replay said on today's code: its committed
    bundle and its currency (:mod:`validation_runner.currency`), or "not replayable"."""
    b = e.get("bundle")
    if not b:
        return "no model call" if not e.get("llm_calls_per_question") else "not replayable"
    cur = e.get("currency") or {}
    state = {"current": f"current at {cur.get('at')}", "stale": f"stale at {cur.get('at')} ¹",
             "failed": f"replay failed at {cur.get('at')}"}.get(cur.get("verdict"), "not checked ²")
    return f"`{b['file']}` ({b['bytes'] / 1e3:.0f} kB), {state}"


#: the notes under the generated tables of docs/validation.md
TABLE_NOTES = [
    "¹ stale: the row's bundle, replayed on the code of the commit named (`run_validation.py --check-current`), "
    "asks other requests or reads its replies otherwise (its `currency.line` in the JSON names the first example "
    "and request). Re-measure the row before comparing it with current rows.",
    "² not checked: the bundle has not been replayed on today's code yet (`run_validation.py --check-current "
    "--rows ROW`).",
]


def row_line(row: str, e: dict) -> str:
    """One row of a generated table: N, metric [95% CI] (with retrieval, fallback and funnel
    figures), paired differences, unparseable replies, calls and tokens per question, wall time,
    and where it replays from."""
    keys = KEY_METRICS[row.split("_")[0]]
    ci = e.get("ci95") or {}
    ms = ", ".join(f"{k} {_fmt(e['metrics'].get(k))}" + (f" [{ci[k][0]:.2f}, {ci[k][1]:.2f}]" if k in ci else "")
                   for k in keys)
    # beside a KG row: the retrieved set's mean size and the share answered with nothing retrieved
    ms += "".join(f", {label} {e[k]:.2f}" for k, label in (("retrieved_size", "retrieved size"),
                                                            ("empty_rate", "empty_rate")) if k in e)
    if "fallbacks" in e:  # SubQRAG: where Eq. 4's update can write, and what it wrote
        ms += (f", fallbacks {e['fallbacks']} on {e['questions_with_fallback']} questions"
               + (f", triples written {e['triples_written']:.0f}" if "triples_written" in e else ""))
    if (fun := funnel_text(e)):  # which stages its questions reached (a row measured since issue 72)
        ms += f"; {fun}"
    pd = e.get("paired") or {}
    pair = "; ".join(f"{pd['against']}: {k} {v['diff']:+.3f} [{v['ci95'][0]:+.2f}, {v['ci95'][1]:+.2f}]"
                     + (f" McNemar p {_p(v['mcnemar_p'])}" if v.get("mcnemar_p") is not None else "")
                     for k, v in pd.get("by_metric", {}).items()) if pd else ""
    pair = "; ".join(x for x in [pair] + [f"{k}: {v['diff']:+.3f} [{v['ci95'][0]:+.2f}, {v['ci95'][1]:+.2f}]"
                                          for k, v in (e.get("paired_within") or {}).items()] if x)
    tok, wall = e.get("tokens_per_question"), e.get("wall_s")
    tok = "–" if not isinstance(tok, (int, float)) else f"{tok:.0f}"
    wall = "–" if not isinstance(wall, (int, float)) else f"{wall:.0f}"
    if e.get("sittings_s") and not e.get("partial"):  # a row finished over several sittings: their sum
        wall = f"{sum(e['sittings_s']):.0f} ({len(e['sittings_s'])} sittings)"
    elif wall == "–" and isinstance(e.get("llm_seconds_per_question"), (int, float)):
        # a partial row: no end-of-run timing; the model's time over the questions it answered in full
        over = f" over {e['llm_seconds_questions']}" if e.get("llm_seconds_questions") else ""
        wall = f"– (LLM {e['llm_seconds_per_question']:.0f} s/q{over})"
    n_shown = f"{e['n_examples']} of {e.get('n_expected') or e['n']} (partial)" if e.get("partial") else e["n_examples"]
    if verdict(e) == "stale":
        n_shown = f"{n_shown} ¹"
    return (f"| {row} | {n_shown} | {ms} | {pair} | {e['unparseable_replies']} | "
            f"{_fmt(e.get('llm_calls_per_question'))} | {tok} | {wall} | {replay_cell(e)} |")


HEADER = ["| row | N | metric [95% CI] | paired difference to | unparseable | calls / q | tokens / q | wall s | replay |",
          "|---|---|---|---|---|---|---|---|---|"]


def _tables() -> list[Path]:
    return sorted(places.HERE.glob("validation_*.json"), key=lambda f: (0 if "heldout" in f.stem else 1, f.stem))


def _title(f: Path) -> str:
    route = "llama.cpp" if f.stem.endswith("_llamacpp") else "transformers"
    split = "held-out" if "heldout" in f.stem else "dev"
    return f"**{f.stem}** ({split} split, {route} route)"


def markdown() -> str:
    """The committed rows as markdown: the held-out tables first (metric [95% CI], paired
    difference to the baseline row, calls and tokens per question, wall time, where the row
    replays from and its currency), then the dev tables (the questions prompts and settings were
    chosen on), then the history section: the rows that will not be re-measured, apart, each
    with the code it measured (beside a current row only in the re-measured section, which says
    what changed)."""
    out = list(TABLE_NOTES)
    history: list[tuple[Path, str, dict]] = []
    for f in _tables():
        out += ["", _title(f), "", *HEADER]
        for row, e in json.loads(f.read_text()).items():
            if is_history(e):
                history.append((f, row, e))
                continue
            if "metrics" not in e:
                out.append(f"| {row} | {e.get('n')} | {e.get('status')} | | | | | | |")
                continue
            out.append(row_line(row, e))
    out += ["", *remeasured_section(), "", *history_section(history)]
    return "\n".join(out).strip()


def _heldout_n(f: Path) -> int | None:
    """N of a first-draw held-out table on the llama.cpp route (``validation_heldout_n<N>_llamacpp``),
    else None (a dev table, another route, a fresh draw ``_skip<K>``)."""
    m = re.fullmatch(r"validation_heldout_n(\d+)_llamacpp", f.stem)
    return int(m.group(1)) if m else None


def remeasured_section() -> list[str]:
    """Each held-out row re-measured at a larger N against the same row at a smaller N (issue 70:
    "each paired with today's row on the questions both answered"): the draw is nested (a larger N
    keeps every question of a smaller one, kgreason/data/base.py ``select_split``), and the paired
    difference on the shared questions is what the re-measurement changed (code, settings, or
    sampling), with the two commands' settings."""
    from validation_runner.collect import committed_values, paired

    tables = sorted(((n, f) for f in _tables() if (n := _heldout_n(f))), key=lambda t: t[0])
    lines = []
    for n_new, f_new in tables:
        for row, e in json.loads(f_new.read_text()).items():
            if "metrics" not in e or is_history(e) or not e.get("per_question"):
                continue
            for n_old, f_old in tables:
                old = json.loads(f_old.read_text()).get(row) if n_old < n_new else None
                if not old or not old.get("per_question"):
                    continue
                key = KEY_METRICS[row.split("_")[0]][0]
                d = paired(committed_values(e), committed_values(old), [key]).get(key)
                if not d:
                    continue
                was = "history" if is_history(old) else verdict(old)
                code = (old.get("code") or {}).get("commit", "?"), (e.get("code") or {}).get("commit", "?")
                lines.append(
                    f"| {row} | {e['n_examples']}{' (partial)' if e.get('partial') else ''} vs {old['n_examples']} ({was}) "
                    f"| {code[1]} vs {code[0]} | {settings_note(e) or 'defaults'} vs {settings_note(old) or 'defaults'} "
                    f"| {key} {d['diff']:+.3f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}] | "
                    f"{'–' if d['mcnemar_p'] is None else _p(d['mcnemar_p'])} | {d['n']} |")
    head = ["#### Re-measured rows against their earlier measurement", "",
            "A row measured again at a larger N (after issue 70's cheaper settings) against the same row at a "
            "smaller N, on the questions both answered (the held-out draw is nested: a larger N keeps every question of a smaller one): the paired difference is what "
            "the re-measurement changed, code or settings (a row whose replies came from the earlier row's call "
            "cache differs by nothing). The earlier row may be in the history section: this is the one place it "
            "is set beside a current row, to say what changed.", "",
            "| row | N (earlier row's state) | code | settings | paired difference [95% CI] | McNemar p | questions |",
            "|---|---|---|---|---|---|---|"]
    return head + (lines or ["| (none yet) | | | | | | |"])


def history_section(history: list[tuple[Path, str, dict]]) -> list[str]:
    """The rows retired from the tables (``history`` in their JSON): what they measured, on which
    code, and why they are not re-measured. Kept for the record; never compared with a current row."""
    out = ["#### History: rows that will not be re-measured", "",
           "Each row measured the code of the commit named; that code has changed since, and the row either "
           "replays stale on today's code or has no bundle to check it with (rows measured before bundles "
           "existed). They are kept as a record and are not comparable with the rows above (the re-measured "
           "section sets one beside its re-measurement only to say what changed)."]
    if not history:
        return out + ["", "(none)"]
    for f, row, e in history:
        h = e["history"]
        code = h.get("measured_code") or (e.get("code") or {}).get("commit") or "unknown code"
        keys = KEY_METRICS[row.split("_")[0]]
        ms = ", ".join(f"{k} {_fmt(e['metrics'].get(k))}" for k in keys) if "metrics" in e else e.get("status", "")
        out.append(f"- {f.stem}/{row}, N {e.get('n_examples', e.get('n'))}: {ms}; measured on {code}; "
                   f"{h.get('why', 'not re-measured')}")
    return out


def heldout_rows(current_only: bool = False) -> dict[str, dict]:
    """The committed held-out rows on the llama.cpp route, the largest N of each row winning (at
    equal N, a fresh draw ``_skip<K>`` over the first draw); a partial row (stopped before its N)
    only where the row has no finished one. Rows of the history section are never taken;
    ``current_only``: only rows whose bundle replays identical on today's code (the README's)."""
    out: dict[str, dict] = {}
    files = sorted(places.HERE.glob("validation_heldout_n*_llamacpp.json"),
                   key=lambda f: (int(f.stem.split("_n")[1].split("_")[0]), "_skip" in f.stem))
    for f in files:
        for row, e in json.loads(f.read_text()).items():
            if "metrics" not in e or is_history(e) or (current_only and not is_current(e)):
                continue
            if not e.get("partial") or row not in out or out[row].get("partial"):
                out[row] = {**e, "_file": f.name}
    return out


def seconds_per_question(e: dict) -> float | None:
    """A row's time per question: ``seconds_per_question`` where the row's sittings were summed by
    hand (its ``wall_note`` says how), else its one sitting's ``wall_s`` over its questions."""
    if isinstance(e.get("seconds_per_question"), (int, float)):
        return float(e["seconds_per_question"])
    if isinstance(e.get("wall_s"), (int, float)) and e.get("n_examples") and not e.get("wall_note"):
        return e["wall_s"] / e["n_examples"]
    return None


#: the share of a row's model requests answered from the call cache above which its s / question
#: (the sitting's wall time over its questions) reads low enough to need a note beside it
CACHED_SHARE_NOTED = 0.10


def cached_time_note(e: dict) -> str | None:
    """What a row's s / question means when its sitting replayed a good part of its replies from
    the call cache (the scores do not depend on it; the time does): the share, and the model's
    time a question over the questions answered without the cache where the row recorded it."""
    hits, calls = e.get("cache_hits") or 0, e.get("backend_calls") or 0
    sittings = e.get("sittings_s") if isinstance(e.get("sittings_s"), list) else []
    # the cell is sittings' wall time: one sitting's, or the runner's sum over several (``sittings_s``);
    # not a figure summed by hand, which says itself what it holds
    from_wall = seconds_per_question(e) is not None and (
        not isinstance(e.get("seconds_per_question"), (int, float)) or len(sittings) > 1)
    if not from_wall or not hits or hits < CACHED_SHARE_NOTED * (hits + calls):
        return None
    whose = f"the {len(sittings)} sittings'" if len(sittings) > 1 else "the sitting's"
    note = f"s / question is {whose} wall time with {hits} of {hits + calls} model replies from the call cache"
    if isinstance(e.get("llm_seconds_per_question"), (int, float)) and e.get("llm_seconds_questions"):
        note += (f" (model time {e['llm_seconds_per_question']:.1f} s a question over the "
                 f"{e['llm_seconds_questions']} questions answered without it)")
    return note


def _draw(e: dict) -> tuple[int, int]:
    """``(first, last)`` places of a held-out row's questions in the seeded held-out permutation."""
    skip = int(m.group(1)) if (m := re.search(r"questions\.heldout_skip=(\d+)", e.get("command", ""))) else 0
    return skip + 1, skip + int(e.get("n_examples") or 0)


#: the overrides of a row's command that change what the method is given or writes (a reader
#: repeating the row needs them), shown beside its score; the rest is plumbing (route, threads,
#: cache, the question draw) or the data it names in its command column
METHOD_SETTINGS = ("reasoner.", "llm.structured_output=", "ablation=")


def settings_note(e: dict) -> str | None:
    """``run with …``: the method settings of the row's committed command (``reasoner.max_tokens``'s
    per-prompt caps named as such), or None for a row that ran the defaults."""
    import shlex

    words = shlex.split(str(e.get("command") or ""))
    found = [w for w in words if w.startswith(METHOD_SETTINGS) and not w.startswith("reasoner=")]
    shown = ["per-prompt reply caps fitted on the dev split (`" + w + "`)" if w.startswith("reasoner.max_tokens={")
             else f"`{w}`" for w in found]
    return "run with " + " and ".join(shown) + " (docs/llm.md)" if shown else None


def row_notes(row: str, e: dict, rows: dict[str, dict]) -> list[str]:
    """What a reader must know before comparing ``row``'s score, all from the committed JSON and
    the working tree: not a method score, the passage pool, rows it cannot be compared with, and
    whether its method's code has changed since it was measured."""
    notes = []
    if row in NOT_A_METHOD_SCORE:
        notes.append(NOT_A_METHOD_SCORE[row])
    if e.get("pool_passages"):
        notes.append(f"pool: {e['pool_passages']:,} passages, {e.get('pool_from', 'as measured')}")
    ds = row.split("_")[0]
    a = _draw(e)
    for other, f in rows.items():
        if other == row or other.split("_")[0] != ds or not any(other == m[2] for m in METHODS):
            continue
        b = _draw(f)
        nested = a[0] == b[0]  # draws from the same place nest (a larger N keeps a smaller one's questions)
        pools = (e.get("pool_passages"), f.get("pool_passages"))
        if not nested or (None not in pools and pools[0] != pools[1]):
            why = "other questions" if not nested else "another passage pool"
            if not nested and None not in pools and pools[0] != pools[1]:
                why += " and another passage pool"
            notes.append(f"not comparable with `{ROWS[other][1]}` ({why})")
    if (note := settings_note(e)):
        notes.append(note)
    if (note := cached_time_note(e)):
        notes.append(note)
    if not e.get("bundle") and not e.get("llm_calls_per_question"):
        notes.append("no model call: its command reproduces it")
    elif not e.get("bundle"):
        notes.append("not replayable: its model replies were kept only in a machine-local cache")
    cur = e.get("currency") or {}
    if e.get("bundle") and verdict(e) != "current":
        notes.append(f"{verdict(e)}" + (f" at {cur.get('at')}: {cur.get('line')}" if cur else
                                         ": its bundle has not been replayed on today's code"))
    return notes


def method_table() -> str:
    """The README's table of every method: command, source, time per question, held-out score, and
    the notes a reader needs before comparing two rows (:func:`row_notes`). Only current rows are
    shown (their bundle replays identical on today's code, :mod:`validation_runner.currency`); a method
    whose held-out row is stale, unchecked or not replayable says so instead of a score."""
    rows = heldout_rows(current_only=True)
    every = heldout_rows()
    retired = {row for f in places.HERE.glob("validation_heldout_n*_llamacpp.json")
               for row, e in json.loads(f.read_text()).items() if is_history(e)}
    shown = {row: rows[row] for _, _, row, *_ in METHODS if row in rows}
    out = ["| method | follows | add to the command | s / question | held-out score [95% CI] | N | read with |",
           "|---|---|---|---|---|---|---|"]
    for reasoner, source, row, data, metric, label in METHODS:
        e = rows.get(row)
        if e is None:
            why = (f"no current row ({verdict(every[row])}: docs/validation.md); re-measurement pending"
                   if row in every else "no current row (retired to the history section of docs/validation.md)"
                   if row in retired else "not measured")
            out.append(f"| `{reasoner}` | {source} | `reasoner={reasoner} {data}` | – | {why} | – | |")
            continue
        v, ci = e["metrics"].get(metric), (e.get("ci95") or {}).get(metric)
        score = f"{label} {v:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        sq = seconds_per_question(e)
        sq = "–" if sq is None else ("< 1" if sq < 1 else f"{sq:.0f}")
        if sq == "–" and isinstance(e.get("llm_seconds_per_question"), (int, float)):  # a partial row: the model's time
            sq = f"{e['llm_seconds_per_question']:.0f} (model only)"
        first, last = _draw(e)
        n = f"{e['n_examples']}" + (f" of {e.get('n_expected') or e['n']} (partial)" if e.get("partial") else "") + (
            f" (draw places {first}–{last})" if first > 1 else "")
        notes = "; ".join(row_notes(row, e, shown))
        out.append(f"| `{reasoner}` | {source} | `reasoner={reasoner} {data}` | {sq} | {score} | {n} | {notes} |")
    at = sorted({str((e.get("currency") or {}).get("at")) for e in shown.values()})
    out += ["", f"Every score shown is current: its committed bundle replays identical on the code of "
            f"{', '.join(at) or '–'} (CI replays each on every commit; docs/validation.md, \"Currency\"). "
            "A bundle replays with `kgreason bundle replay experiments/validation/bundles/<table>/<row>.tar.gz` (no model call)."]
    return "\n".join(out)


#: SGR's Table 2 (sgr.txt §4.3) as our held-out MetaQA arms: (the paper's column, our row, its
#: ablation preset); the paper's values are read from ``experiments/sgr_table2/paper.yaml``
TABLE2_ARMS = [("With Schema, with neo4j (the full method)", "metaqa_sgr", "none"),
               ("Without Schema", "metaqa_sgr_no_schema", "sgr_no_schema"),
               ("Without neo4j", "metaqa_sgr_no_cypher", "sgr_no_cypher"),
               ("not a column: `V_q` from the dataset's topics", "metaqa_sgr_dataset_topics", "sgr_dataset_topics")]

#: the funnel stages shown beside each arm: where the paper's direct path (§3.4) can decide
TABLE2_STAGES = [("rows_returned", "Cypher rows"), ("eq19_validated", "Eq. 19 validated"),
                 ("decided_by=direct", "decided: direct"), ("decided_by=stepwise", "stepwise"),
                 ("decided_by=collaborative", "§3.5"), ("decided_by=io", "IO (unlinked)")]


def paper_table2() -> dict[str, float]:
    """The paper's Table 2 Hits@1 (SGR/ChatGPT on CWQ) by ablation preset, from the committed
    ``experiments/sgr_table2/paper.yaml`` (the full method's two columns are one value)."""
    import yaml

    doc = yaml.safe_load((places.ROOT / "experiments" / "sgr_table2" / "paper.yaml").read_text())
    out: dict[str, float] = {}
    for entry in doc["entries"]:
        if entry["metric"] == "tog_hits_at_1":
            out.setdefault(entry["overrides"]["ablation"], float(entry["value"]))
    return out


def table2_block() -> str:
    """docs/sgr.md's Table 2 beside the paper's: each arm's committed held-out row (current rows
    only), its Hits@1, its paired difference to full SGR on the questions both answered (computed
    here from the two rows' committed ``per_question`` values, so a row grown later re-pairs without
    a re-run), the discordant questions, and the funnel counts that say where an answer was
    decided."""
    from validation_runner.collect import committed_values, paired

    rows = heldout_rows(current_only=True)
    paper = paper_table2()
    base = rows.get("metaqa_sgr")
    out = ["| Table 2 column | ablation | paper: ChatGPT, CWQ, Hits@1 | ours: row, N | Hits@1 [95% CI] "
           "| paired with full SGR (questions, Δ [95% CI], better / worse) | "
           + " | ".join(label for _, label in TABLE2_STAGES) + " |",
           "|---|---|---|---|---|---|" + "---|" * len(TABLE2_STAGES)]
    for column, row, ablation in TABLE2_ARMS:
        e = rows.get(row)
        ref = f"{paper[ablation]:.3f}" if ablation in paper else "–"
        if e is None:
            out.append(f"| {column} | `{ablation}` | {ref} | `{row}`: no current row | | | " + "| " * len(TABLE2_STAGES))
            continue
        n = e["n_examples"]
        ci = (e.get("ci95") or {}).get("hits_at_1")
        score = f"{e['metrics']['hits_at_1']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        pair = "–"
        if row != "metaqa_sgr" and base is not None:
            mine, theirs = committed_values(e).get("hits_at_1", {}), committed_values(base).get("hits_at_1", {})
            shared = sorted(set(mine) & set(theirs))
            d = paired({"hits_at_1": mine}, {"hits_at_1": theirs}, ["hits_at_1"]).get("hits_at_1")
            if d:
                better = sum(mine[q] > theirs[q] for q in shared)
                worse = sum(mine[q] < theirs[q] for q in shared)
                pair = f"{d['n']}, {d['diff']:+.3f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}], {better} / {worse}"
        f = e.get("funnel") or {}
        stages = " | ".join(str(round(f.get(k, 0.0) * n)) for k, _ in TABLE2_STAGES)
        part = f" of {e.get('n_expected') or e['n']}, partial" if e.get("partial") else ""
        out.append(f"| {column} | `{ablation}` | {ref} | `{row}`, {n}{part} | {score} | {pair} | {stages} |")
    out += ["", "Ours: Qwen2.5-Coder-1.5B on llama.cpp, held-out MetaQA 2-hop (docs/validation.md, N = 100 table), "
            "each arm under the same dev-chosen settings; the funnel columns count questions (docs/sgr.md, "
            "\"The funnel\"). The paper's numbers are ChatGPT on CWQ and are not comparable in level; what can be "
            "compared is the sign and size of each removal's paired difference."]
    return "\n".join(out)


def method_figure(path: Path) -> Path:
    """The README's figure: each method's held-out score with its 95% interval (from the JSON)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = heldout_rows(current_only=True)
    items = [(f"{reasoner} ({row.split('_')[0]}, N={rows[row]['n_examples']}"
              + (f" of {rows[row].get('n_expected') or rows[row]['n']}, partial)" if rows[row].get("partial") else ")"), rows[row]["metrics"][metric],
              (rows[row].get("ci95") or {}).get(metric), label)
             for reasoner, _, row, _, metric, label in METHODS if row in rows and reasoner != "kg_dx"]
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(items) + 1.0))
    for i, (name, v, ci, label) in enumerate(reversed(items)):
        err = [[v - ci[0]], [ci[1] - v]] if ci else None
        ax.barh(i, v, xerr=err, color="#4c72b0", capsize=3)
        ax.text((ci[1] if ci else v) + 0.02, i, f"{label} {v:.2f}", va="center", fontsize=8)
    ax.set_yticks(range(len(items)), [n for n, *_ in reversed(items)], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("held-out score, 95% bootstrap interval (Qwen2.5-Coder-1.5B, llama.cpp, CPU)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


#: generated blocks in the docs: (file, marker name, function that makes the block)
GENERATED = [("README.md", "methods", method_table), ("docs/validation.md", "tables", lambda: markdown()),
             ("docs/sgr.md", "table2", table2_block)]


def _block(name: str) -> tuple[str, str]:
    return (f"<!-- generated: {name} (python experiments/validation/run_validation.py --write-docs) -->",
            f"<!-- end generated: {name} -->")


def write_docs(check: bool = False) -> list[str]:
    """Rewrite each generated block from the JSON, once every bundled row is checked against its
    bundle; with ``check``, write nothing and return the files whose block differs from what the
    JSON gives, and the rows their bundles contradict (a test runs this)."""
    problems = bundle_problems()
    if problems and not check:
        raise SystemExit("not writing the tables: a committed row differs from its bundle\n" + "\n".join(problems))
    stale = list(problems)
    for rel, name, make in GENERATED:
        path = places.ROOT / rel
        text = path.read_text(encoding="utf-8")
        start, end = _block(name)
        if start not in text or end not in text:
            stale.append(f"{rel}: no generated block '{name}'")
            continue
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        new = f"{head}{start}\n{make()}\n{end}{tail}"
        if new != text:
            stale.append(rel)
            if not check:
                path.write_text(new, encoding="utf-8")
    if not check:
        method_figure(places.ROOT / places.FIGURE)
    elif not (places.ROOT / places.FIGURE).is_file():
        stale.append(f"{places.FIGURE}: missing")
    return stale
