"""Issue 70's before/after cost pairs: the same dev questions run by the code before issue 70 and by
today's, side by side on one machine, one llama.cpp thread each (docs/llm.md, "Measured: before and
after"). ``pairs.json`` holds what each pair measured; ``--write-docs`` renders its table into
docs/llm.md.

    python experiments/cost_issue70/pairs.py add NAME BEFORE_RUN_DIR AFTER_RUN_DIR --note "..."
    python experiments/cost_issue70/pairs.py add NAME BEFORE AFTER --counted BEFORE.json AFTER.json --note "..."
    python experiments/cost_issue70/pairs.py --write-docs

A pair's figures are the two runs' per-question ``usage`` and ``metrics`` (``predictions.jsonl``),
summed over the questions both answered: ``cpu_s`` (the CPU seconds the llama.cpp route spent in
calls, which a busy machine does not inflate as it does wall seconds), prompt tokens less those a
prefix cache reused, completion tokens, unparseable replies, Hits@1. A run stopped part-way counts
the questions it finished.

``--counted BEFORE_JSON AFTER_JSON``: the runs were made under ``count_eval.py``, which counts every
token llama.cpp evaluated, from outside the code (a *before* checkout that predates the route's own
accounting records no reuse and no CPU seconds). A counted side's prompt tokens computed are its
evaluated tokens less its completion tokens, over the whole run, so every question it answered must
be one of the pair's, without an error (a run stopped between two questions counts the questions it
finished); ``-`` for a side takes its route's own accounting (prompt tokens less those reused). CPU
seconds are not compared (–). A count with a row timeline (``count_eval.py`` run with
``hydra.run.dir=``) is read at the pair's K-th row instead, when the run's first K rows are the
pair's questions: its tokens evaluated until then, and its process CPU seconds from the first model
call to then, which the table marks "(process)" and compares only with another side's process CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAIRS = HERE / "pairs.json"
DOC = HERE.parents[1] / "docs" / "llm.md"
BEGIN = "<!-- generated: cost pairs (python experiments/cost_issue70/pairs.py --write-docs) -->"
END = "<!-- end generated: cost pairs -->"


USAGE = ("cpu_s", "calls", "prompt_tokens", "prompt_tokens_reused", "completion_tokens", "parse_failures")


def rows(run_dir: Path) -> dict[str, dict]:
    """A run dir's answered questions by id (``predictions.jsonl``: a stopped run's rows count too)."""
    out = {}
    for line in (run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if not r.get("error"):
            out[str(r["id"])] = r
    return out


def fit(rows_: list[dict]) -> dict | None:
    """Least squares over the rows' model calls (their traces' ``usage``): CPU seconds of a call ≈
    ``prompt_ms`` × prompt tokens computed + ``decode_ms`` × completion tokens + ``call_s``. What a
    machine charges per token, so that two sittings' ratios can be told apart from their machines."""
    import numpy as np

    x, y = [], []
    for r in rows_:
        for ev in r.get("trace") or []:
            u = (ev.get("data") or {}).get("usage") or {}
            if ev.get("kind") == "llm" and u.get("cpu_s"):
                x.append([u.get("prompt_tokens", 0) - u.get("prompt_tokens_reused", 0), u.get("completion_tokens", 0), 1])
                y.append(u["cpu_s"])
    if len(y) < 10:
        return None
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    c = np.linalg.lstsq(a, b, rcond=None)[0]
    r2 = 1 - float(((b - a @ c) ** 2).sum() / ((b - b.mean()) ** 2).sum())
    return {"calls": len(y), "prompt_ms": round(1000 * c[0], 1), "decode_ms": round(1000 * c[1], 1),
            "call_s": round(float(c[2]), 2), "r2": round(r2, 3)}


def side(run_dir: Path, ids: list[str]) -> dict:
    """One run's figures summed over ``ids`` (each row's ``usage`` and ``metrics``), the per-token
    CPU costs fitted on its calls (:func:`fit`) and its overrides."""
    import yaml

    got = rows(run_dir)
    usage = {k: sum(float(got[i]["usage"].get(k) or 0) for i in ids) for k in USAGE}
    usage["prompt_tokens_computed"] = usage["prompt_tokens"] - usage["prompt_tokens_reused"]
    usage["hits_at_1"] = sum(float(got[i]["metrics"].get("hits_at_1") or 0) for i in ids) / max(len(ids), 1)
    overrides = run_dir / ".hydra" / "overrides.yaml"
    return {"sums": usage, "fit": fit([got[i] for i in ids]),
            "overrides": yaml.safe_load(overrides.read_text(encoding="utf-8")) if overrides.is_file() else []}


def counted(s: dict, counts_file: Path, at_row: int | None = None) -> dict:
    """``s`` (:func:`side`) with the prompt tokens computed that ``count_eval.py`` counted: every token
    llama.cpp evaluated in the run (or, with ``at_row``, until its ``at_row``-th row: the count's row
    timeline, with the process CPU seconds from the first model call to then) less its completion
    tokens (see the module's docstring)."""
    c = json.loads(counts_file.read_text(encoding="utf-8"))
    sums = dict(s["sums"])
    sums["cpu_s"] = None
    evaluated = float(c["evaluated_tokens"])
    kept = {k: c[k] for k in ("commit", "evaluated_tokens", "decode_calls", "single_token_decodes", "process_cpu_s")
            if k in c}
    if at_row is not None:
        snap = next((r for r in c.get("rows") or [] if r["rows"] == at_row), None)
        if snap is None or "first_decode_cpu_s" not in c:
            raise SystemExit(f"{counts_file}: no row timeline entry at row {at_row} (count_eval.py records one when "
                             "run with hydra.run.dir=)")
        evaluated = float(snap["evaluated_tokens"])
        sums["cpu_s"] = round(float(snap["process_cpu_s"]) - float(c["first_decode_cpu_s"]), 2)
        kept.update(at_row=at_row, evaluated_tokens=snap["evaluated_tokens"], cpu="process")
    sums["prompt_tokens_computed"] = evaluated - sums["completion_tokens"]
    sums["prompt_tokens_reused"] = sums["prompt_tokens"] - sums["prompt_tokens_computed"]
    return {**s, "sums": sums, "counted": kept}  # the fit is of the route's own per-call CPU (its traces)


def pair(before: Path, after: Path, note: str, counts: tuple[Path | None, Path | None] | None = None) -> dict:
    """Both runs on the questions both answered without an error (in the dataset's order); a side
    with a ``count_eval.py`` file in ``counts`` (None: its route's accounting) must have answered
    only those questions, every one without an error."""
    b, a = rows(before), rows(after)
    ids = [i for i in b if i in a]
    if not ids:
        raise SystemExit(f"{before} and {after}: no question answered by both")
    sides = {}
    for name, run_dir, got, count in (("before", before, b, (counts or (None, None))[0]),
                                      ("after", after, a, (counts or (None, None))[1])):
        sides[name] = side(run_dir, ids)
        if count is None:
            continue
        order = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        timeline = bool(json.loads(count.read_text(encoding="utf-8")).get("rows"))
        first = [str(r["id"]) for r in order[: len(ids)] if not r.get("error")]
        if timeline and len(order) > len(ids) and first == ids:  # the pair is the run's first K rows
            sides[name] = counted(sides[name], count, at_row=len(ids))
            continue
        if len(got) != len(ids) or len(order) != len(ids):
            raise SystemExit(f"{run_dir}: --counted counts the whole run, so it must have answered only the pair's "
                             f"{len(ids)} questions, each without an error ({len(order)} rows, {len(got)} without an "
                             "error), or be read at its K-th row (a count with a row timeline whose first K rows "
                             "are the pair's)")
        sides[name] = counted(sides[name], count, at_row=len(ids) if timeline else None)
    cpu = [sides[k].get("counted", {}).get("cpu") for k in ("before", "after")]
    if cpu[0] != cpu[1] and None not in (sides["before"]["sums"]["cpu_s"], sides["after"]["sums"]["cpu_s"]):
        for k in ("before", "after"):  # process CPU against a route's own: not the same measure
            sides[k]["sums"]["cpu_s"] = None
    return {"questions": ids, **sides, "note": note}


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "–"


def per_token(p: dict) -> str:
    """The fitted per-token CPU costs of each side (:func:`fit`), – for a side whose traces were not
    read (pairs recorded before the fit) or give no per-call CPU (commit 0ce204e's)."""
    fb, fa = p["before"].get("fit"), p["after"].get("fit")
    if not fb and not fa:
        return "–"
    one = lambda f: f"{f['prompt_ms']:.0f} / {f['decode_ms']:.0f}" if f else "–"  # noqa: E731
    return f"{one(fb)} → {one(fa)}"


def table(pairs: dict) -> str:
    lines = ["| pair | questions | CPU s / q before → after | ratio | prompt tokens computed / q | ratio "
             "| completion tokens / q | unparseable replies (of calls) | Hits@1 before → after "
             "| CPU ms a computed prompt token / a decoded token, before → after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in pairs.items():
        b, a = p["before"]["sums"], p["after"]["sums"]
        n = len(p["questions"])
        process = " (process)" if p["before"].get("counted", {}).get("cpu") == "process" else ""
        cpu = (f"{b['cpu_s'] / n:.1f} → {a['cpu_s'] / n:.1f}{process} | {ratio(b['cpu_s'], a['cpu_s'])}"
               if b["cpu_s"] is not None and a["cpu_s"] is not None else "– | –")
        lines.append(
            f"| `{name}` | {n} | {cpu} "
            f"| {b['prompt_tokens_computed'] / n:,.0f} → {a['prompt_tokens_computed'] / n:,.0f} "
            f"| {ratio(b['prompt_tokens_computed'], a['prompt_tokens_computed'])} "
            f"| {b['completion_tokens'] / n:,.0f} → {a['completion_tokens'] / n:,.0f} "
            f"| {b['parse_failures']:.0f} of {b['calls']:.0f} → {a['parse_failures']:.0f} of {a['calls']:.0f} "
            f"| {b['hits_at_1']:.2f} → {a['hits_at_1']:.2f} | {per_token(p)} |")
    notes = [f"* `{name}`: {p['note']}" for name, p in pairs.items() if p.get("note")]
    return "\n".join(lines + [""] + notes)


def write_docs() -> None:
    text = DOC.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC}: the markers {BEGIN!r} ... {END!r} are missing")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(head + BEGIN + "\n" + table(json.loads(PAIRS.read_text(encoding="utf-8"))) + "\n" + END + tail,
                   encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-docs", action="store_true", help="render pairs.json into docs/llm.md")
    sub = ap.add_subparsers(dest="action")
    add = sub.add_parser("add", help="record a pair")
    add.add_argument("name")
    add.add_argument("before", type=Path)
    add.add_argument("after", type=Path)
    add.add_argument("--note", default="")
    add.add_argument("--counted", nargs=2, metavar=("BEFORE_JSON", "AFTER_JSON"), default=None,
                     help="count_eval.py's files of the two runs (- for a side measured by its route's own "
                          "accounting): prompt tokens computed from llama.cpp's own count")
    a = ap.parse_args(argv)
    if a.action == "add":
        pairs = json.loads(PAIRS.read_text(encoding="utf-8")) if PAIRS.is_file() else {}
        counts = tuple(None if c == "-" else Path(c) for c in a.counted) if a.counted else None
        pairs[a.name] = pair(a.before, a.after, a.note, counts)
        PAIRS.write_text(json.dumps(pairs, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if a.write_docs:
        write_docs()
    if not a.action and not a.write_docs:
        ap.print_usage(sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
