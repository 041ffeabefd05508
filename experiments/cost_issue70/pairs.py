"""Issue 70's before/after cost pairs: the same dev questions run by the code before issue 70 and by
today's, side by side on one machine, one llama.cpp thread each (docs/llm.md, "Measured: before and
after"). ``pairs.json`` holds what each pair measured; ``--write-docs`` renders its table into
docs/llm.md.

    python experiments/cost_issue70/pairs.py add NAME BEFORE_RUN_DIR AFTER_RUN_DIR --note "..."
    python experiments/cost_issue70/pairs.py --write-docs

A pair's figures come from the two runs' ``metrics.json`` (``llm/cpu_s``: the CPU seconds the
llama.cpp route spent in calls, which a busy machine does not inflate as it does wall seconds;
``llm/prompt_tokens_computed``; ``llm/completion_tokens``; ``llm/parse_failures``), nothing else.
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
KEYS = ("llm/cpu_s", "llm/calls", "llm/prompt_tokens", "llm/prompt_tokens_computed", "llm/prompt_tokens_reused",
        "llm/completion_tokens", "llm/parse_failures", "metric/hits_at_1", "run/n_examples")


def side(run_dir: Path) -> dict:
    """The figures of one run dir (its metrics.json and the overrides it ran with)."""
    m = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    if m.get("run/status", "complete") != "complete":
        raise SystemExit(f"{run_dir}/metrics.json: run/status {m.get('run/status')!r}; expected a complete run")
    import yaml

    overrides = run_dir / ".hydra" / "overrides.yaml"
    return {"metrics": {k: m.get(k) for k in KEYS},
            "overrides": yaml.safe_load(overrides.read_text(encoding="utf-8")) if overrides.is_file() else []}


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "–"


def table(pairs: dict) -> str:
    lines = ["| pair | questions | CPU s / q before → after | ratio | prompt tokens computed / q | ratio "
             "| completion tokens / q | unparseable replies (of calls) | Hits@1 before → after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, p in pairs.items():
        b, a = p["before"]["metrics"], p["after"]["metrics"]
        n = a["run/n_examples"] or 1
        lines.append(
            f"| `{name}` | {n} | {b['llm/cpu_s'] / n:.1f} → {a['llm/cpu_s'] / n:.1f} | {ratio(b['llm/cpu_s'], a['llm/cpu_s'])} "
            f"| {b['llm/prompt_tokens_computed'] / n:,.0f} → {a['llm/prompt_tokens_computed'] / n:,.0f} "
            f"| {ratio(b['llm/prompt_tokens_computed'], a['llm/prompt_tokens_computed'])} "
            f"| {b['llm/completion_tokens'] / n:,.0f} → {a['llm/completion_tokens'] / n:,.0f} "
            f"| {b['llm/parse_failures']} of {b['llm/calls']} → {a['llm/parse_failures']} of {a['llm/calls']} "
            f"| {b['metric/hits_at_1']:.2f} → {a['metric/hits_at_1']:.2f} |")
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
    a = ap.parse_args(argv)
    if a.action == "add":
        pairs = json.loads(PAIRS.read_text(encoding="utf-8")) if PAIRS.is_file() else {}
        pairs[a.name] = {"before": side(a.before), "after": side(a.after), "note": a.note}
        PAIRS.write_text(json.dumps(pairs, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if a.write_docs:
        write_docs()
    if not a.action and not a.write_docs:
        ap.print_usage(sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
