"""Per-prompt reply caps fitted on dev-split traces (issue 70 item 3: "each prompt's ``max_tokens``
fits what its parser reads, measured on the dev split with headroom").

``kgreason bench caps RUN_OR_BUNDLE [...] [--headroom 1.5] [--step 16] [--floor 32]`` reads the
traces of runs on the **dev split** and reports, per prompt (a trace step's ``prompt_id`` without
its indices, as ``bench tokens`` names it):

* ``replies``, their completion tokens (mean and largest) and the tokens up to the end of what the
  parser read (``parsed``: mean and largest; ``bench tokens``' own measure, from characters);
* ``cap``: the largest parsed length × ``--headroom``, rounded up to ``--step``, at least ``--floor``
  and at most ``--default`` (the cap the traces ran under: they cannot show a need beyond it);
* ``cut here``: replies of these traces whose parsed part the cap would cut (0 by construction at
  ``--quantile 1``); ``saved / q``: completion tokens past the cap per question, the decoding a
  run with the cap no longer does;
* unparseable replies, which say nothing about the parser's need: they are counted, not fitted.

Greedy decoding writes the same tokens up to a cap as without it, so a cap at or above a reply's
parsed length leaves its parse, and all that follows from it, unchanged; only a reply whose parsed
part is longer than the cap changes. It prints the override to run with, e.g.
``reasoner.max_tokens={step:64,hypothesis:336,default:512}`` (prompts not seen keep ``--default``).

Runs on the held-out split are refused: settings are chosen on dev questions only
(docs/validation.md, "Dev and held-out"). A run on ``questions.split=all`` counts as dev when it
reads no more than ``questions.dev_size`` questions from the top of the file (``dataset.limit``,
no ``dataset.sample``). Nothing here calls a model.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from kgreason.bench.tokens import parsed_end, prediction_rows, purpose_of


@dataclass
class Replies:
    """The first replies of one prompt's calls: completion tokens and parsed tokens (None: unparsed)."""
    completion: list[float] = field(default_factory=list)
    parsed: list[float | None] = field(default_factory=list)


def dev_only(run_dir: Path, label: str | None = None) -> str | None:
    """Why ``run_dir`` (named ``label`` in messages) is not a dev-split run (its ``config.yaml``),
    or None when it is."""
    label = label or str(run_dir)
    cfg = run_dir / "config.yaml"
    if not cfg.is_file():
        return f"{label}: no config.yaml, so its split cannot be told"
    import yaml

    doc = yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}
    q = doc.get("questions") or {}
    ds = doc.get("dataset") or {}
    split = str(q.get("split", "all"))
    if split == "dev":
        return None
    dev_size = int(q.get("dev_size", 20) or 20)
    limit = ds.get("limit")
    if split == "all" and ds.get("sample") in (None, 0) and limit is not None and int(limit) <= dev_size:
        return None
    why = (f"questions.split={split}" if split != "all"
           else f"dataset.limit={limit}, dataset.sample={ds.get('sample')} (not only the first {dev_size} questions, the dev split)")
    return (f"{label}: caps are chosen on the dev split only, and this run read {why}; "
            f"run on questions.split=dev (docs/validation.md, 'Dev and held-out')")


def replies_of(run_dir: Path) -> tuple[dict[str, Replies], int]:
    """Per prompt, the first reply of each traced call; and the number of questions."""
    out: dict[str, Replies] = defaultdict(Replies)
    questions = 0
    for row in prediction_rows(run_dir):
        questions += 1
        for step in row.get("trace") or ():
            if step.get("kind") != "llm":
                continue
            d = step.get("data") or {}
            replies = [str(r) for r in d.get("replies") or ()]
            ct = float((d.get("usage") or {}).get("completion_tokens", 0) or 0)
            if not replies or not ct or d.get("cached"):
                continue
            r = out[purpose_of(d.get("prompt_id") or step.get("name") or "?")]
            n = max(len(replies), 1)
            ct /= n  # the usage counts every sample of the call; a sample's share
            r.completion.append(ct)
            if d.get("parse_ok", True):
                r.parsed.append(ct * min(1.0, parsed_end(replies[0], d.get("parsed")) / max(len(replies[0]), 1)))
            else:
                r.parsed.append(None)
    return out, questions


def fit(replies: Replies, headroom: float, step: int, floor: int, quantile: float = 1.0,
        ceiling: int | None = None) -> int | None:
    """The cap for one prompt, or None when none of its replies parsed. ``ceiling`` is the cap the
    traces ran under: they cannot show a need beyond it, so no fitted cap exceeds it."""
    xs = sorted(p for p in replies.parsed if p is not None)
    if not xs:
        return None
    q = xs[min(len(xs) - 1, max(0, math.ceil(quantile * len(xs)) - 1))]
    cap = max(floor, step * math.ceil(q * headroom / step))
    return min(cap, ceiling) if ceiling else cap


def table(runs: dict[str, Replies], questions: int, headroom: float, step: int, floor: int,
          quantile: float = 1.0, ceiling: int | None = None) -> list[dict[str, Any]]:
    out = []
    for purpose, r in sorted(runs.items(), key=lambda kv: -sum(kv[1].completion)):
        cap = fit(r, headroom, step, floor, quantile, ceiling)
        parsed = [p for p in r.parsed if p is not None]
        out.append({
            "prompt": purpose, "replies": len(r.completion),
            "completion_mean": sum(r.completion) / len(r.completion), "completion_max": max(r.completion),
            "parsed_mean": sum(parsed) / len(parsed) if parsed else None, "parsed_max": max(parsed) if parsed else None,
            "unparseable": sum(p is None for p in r.parsed), "cap": cap,
            "cut": sum(p is not None and cap is not None and p > cap for p in r.parsed),
            "saved_per_q": (sum(max(0.0, c - cap) for c in r.completion) / max(questions, 1)) if cap else 0.0,
        })
    return out


def override(rows: Sequence[dict[str, Any]], default: int) -> str:
    caps = ",".join(f"{r['prompt']}:{r['cap']}" for r in rows if r["cap"] is not None)
    return f"reasoner.max_tokens={{{caps}{',' if caps else ''}default:{default}}}"


def markdown(rows: Sequence[dict[str, Any]], questions: int) -> str:
    def n(v):
        return "–" if v is None else f"{v:,.0f}"

    lines = ["| prompt | replies | completion tok (mean / max) | parsed tok (mean / max) | unparseable | cap | "
             "cut here | saved / q |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['prompt']} | {r['replies']} | {n(r['completion_mean'])} / {n(r['completion_max'])} | "
                     f"{n(r['parsed_mean'])} / {n(r['parsed_max'])} | {r['unparseable']} | {n(r['cap'])} | "
                     f"{r['cut']} | {r['saved_per_q']:,.0f} |")
    total = sum(r["saved_per_q"] for r in rows)
    before = sum(r["completion_mean"] * r["replies"] for r in rows) / max(questions, 1)
    lines.append(f"\n{questions} questions; completion tokens / question {before:,.0f}, past the caps {total:,.0f}.")
    return "\n".join(lines) + "\n"


def collect(paths: Iterable[str | Path]) -> tuple[dict[str, Replies], int]:
    """Every run under ``paths`` (run dirs, sweep dirs, bundles), each checked to be a dev run."""
    from kgreason.storage.bundle import readable

    merged: dict[str, Replies] = defaultdict(Replies)
    questions = 0
    for path in paths:
        with readable(path) as (root, _):
            runs = sorted(p.parent for p in Path(root).rglob("predictions.jsonl"))
            if not runs:
                raise FileNotFoundError(f"{path}: no predictions.jsonl (not a run dir, sweep dir or bundle)")
            for run in runs:
                why = dev_only(run, str(path) if len(runs) == 1 else f"{path} ({run.name})")
                if why:
                    raise ValueError(why)
                got, q = replies_of(run)
                questions += q
                for k, r in got.items():
                    merged[k].completion += r.completion
                    merged[k].parsed += r.parsed
    return merged, questions


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgreason bench caps",
                                 description="per-prompt reply caps (max_tokens) fitted on dev-split traces")
    ap.add_argument("paths", nargs="+", help="dev-split run dirs, sweep dirs or bundles (.tar.gz)")
    ap.add_argument("--headroom", type=float, default=1.5, help="cap = largest parsed length x this (1.5)")
    ap.add_argument("--quantile", type=float, default=1.0, help="fit on this quantile of parsed lengths (1 = largest)")
    ap.add_argument("--step", type=int, default=16, help="round caps up to a multiple of this (16)")
    ap.add_argument("--floor", type=int, default=32, help="no cap below this (32)")
    ap.add_argument("--default", type=int, default=512, help="cap of prompts the traces do not show (512)")
    ap.add_argument("--json", dest="json_out", help="write the table and the override as JSON here")
    a = ap.parse_args(list(argv) if argv is not None else None)
    if a.headroom < 1 or not 0 < a.quantile <= 1 or a.step < 1 or a.floor < 1:
        print("kgreason bench caps: error: --headroom must be >= 1, --quantile in (0, 1], --step and --floor >= 1",
              file=sys.stderr)
        return 2
    try:
        runs, questions = collect(a.paths)
    except (FileNotFoundError, ValueError) as e:
        print(f"kgreason bench caps: error: {e}", file=sys.stderr)
        return 2
    if not runs:
        print("kgreason bench caps: error: the traces hold no model reply to fit on (replies served from the "
              "call cache are not counted: run the dev split with llm_cache.mode=off or a fresh cache)", file=sys.stderr)
        return 2
    rows = table(runs, questions, a.headroom, a.step, a.floor, a.quantile, ceiling=a.default)
    print(markdown(rows, questions), end="")
    ov = override(rows, a.default)
    print(ov)
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({"questions": questions, "headroom": a.headroom, "quantile": a.quantile,
                                                "rows": rows, "override": ov}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
