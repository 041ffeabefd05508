"""The pooled vote's effect (ablation ``sgr_pooled_vote``, issue 72 item 2) read from SGR runs'
traces, with no model call.

SGR's final rule (``reasoner.decision``) is applied after every model call of a question: which
calls run depends on whether §3.4 validated an answer, never on the rule. So one run's ``decide``
trace step (the validated direct answer, Eq. 14's ranking over §3.3's paths, Eq. 31's over §3.5's)
holds what both rules need, and the pooled answer of the same replies is exact:

    score(a) = Σ_family score_family(a) / Σ_b score_family(b)

over the families that ran (each ranking's scores are ``Σ_i w_i I(a_i = a)``, so dividing by their
sum is dividing each ``w_i`` by ``Σ_j w_j``, as ``SGR.pooled_vote`` does); a validated direct answer
stays final under both rules. Ties keep first appearance, stepwise before collaborative.

    python experiments/sgr_table2/decision_offline.py RUN_DIR [RUN_DIR ...]   # dev-split runs only

prints, per run and in all: questions, Hits@1 under the paper's cascade and under the pooled vote,
their paired difference with a 95 % bootstrap interval and McNemar's exact p, and on how many
questions the top answers differ. A trace whose ranking was cut at the 20 answers a ``decide`` step
keeps is counted (``cut``): its pooled scores then miss the tail's share. Held-out runs are refused:
the effect is measured on the dev split (``kgreason bench caps``' rule, docs/validation.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

KEEP = 20  # answers a ``decide`` trace step keeps per ranking (SGR.decide)


def pooled_scores(decide: dict[str, Any]) -> list[tuple[str, float]]:
    """The pooled vote's ``[(answer, score)]``, best first, from one ``decide`` trace step (its
    ``data``) of a question §3.4 did not validate."""
    score: dict[str, float] = {}
    for fam in ("eq14", "eq31"):
        ranking = [(str(a), float(s)) for a, s in decide.get(fam) or [] if a]
        tot = sum(s for _, s in ranking)
        if tot <= 0:
            continue
        for a, s in ranking:
            score[a] = score.get(a, 0.0) + s / tot
    order = {a: i for i, a in enumerate(score)}
    return [(a, score[a]) for a in sorted(score, key=lambda a: (-score[a], order[a]))]


def pooled(decide: dict[str, Any]) -> list[str]:
    """The pooled vote's ranking from one ``decide`` trace step: the validated direct answer when
    there is one (final under both rules), else :func:`pooled_scores`, else the unvalidated direct
    choice."""
    if decide.get("direct_validated"):
        return [str(a) for a in decide.get("direct") or []]
    return [a for a, _ in pooled_scores(decide)] or [str(a) for a in decide.get("direct") or []]


def _decide_step(row: dict) -> dict | None:
    return next(((s.get("data") or {}) for s in row.get("trace") or () if s.get("kind") == "decide"), None)


def compare(run_dir: Path) -> list[dict[str, Any]]:
    """Per question of ``run_dir``: Hits@1 under the recorded rule and under the pooled vote."""
    from kgreason.metrics.qa import hits_at_1

    out = []
    for line in (run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("error"):
            continue
        golds = [g for grp in row.get("answer_groups") or [[a] for a in row.get("answers") or []] for g in grp]
        ranked = [str(a) for a in row.get("predictions") or []]
        dec = _decide_step(row)
        if dec is None:  # no subgraph: the IO answer under both rules
            pool = ranked
            cut = False
        else:
            pool = pooled(dec)
            cut = any(len(dec.get(f) or []) >= KEEP for f in ("eq14", "eq31"))
            if (row.get("extra") or {}).get("decision") == "pooled":
                raise ValueError(f"{run_dir}: ran with reasoner.decision=pooled; compare a cascade run")
        out.append({"id": row.get("id"), "cascade": hits_at_1(ranked, golds), "pooled": hits_at_1(pool, golds),
                    "differ": bool(ranked[:1] != pool[:1]), "cut": cut,
                    "decided_by": (row.get("extra") or {}).get("decided_by")})
    return out


def _mcnemar(b: int, c: int) -> float:
    from math import comb

    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2 ** n)


def summary(rows: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    import numpy as np

    n = len(rows)
    a = np.array([r["cascade"] for r in rows], dtype=float)
    p = np.array([r["pooled"] for r in rows], dtype=float)
    d = p - a
    rng = np.random.default_rng(seed)
    boot = [float(d[rng.integers(0, n, n)].mean()) for _ in range(2000)] if n else [0.0]
    return {"questions": n, "cascade": float(a.mean()) if n else None, "pooled": float(p.mean()) if n else None,
            "diff": float(d.mean()) if n else None,
            "ci95": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
            "mcnemar_p": _mcnemar(int(((p == 1) & (a == 0)).sum()), int(((p == 0) & (a == 1)).sum())),
            "top_differs": sum(r["differ"] for r in rows), "cut": sum(r["cut"] for r in rows)}


def main(argv: Sequence[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from kgreason.bench.caps import dev_only

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="SGR run dirs on the dev split (decision: cascade)")
    ap.add_argument("--json", dest="json_out", help="write the per-run and pooled summaries here")
    a = ap.parse_args(argv)
    every, out = [], {}
    for r in a.runs:
        run = Path(r)
        why = dev_only(run)
        if why or not (run / "predictions.jsonl").is_file():
            print(f"decision_offline: error: {why or f'{run}: no predictions.jsonl'}", file=sys.stderr)
            return 2
        try:
            rows = compare(run)
        except ValueError as e:
            print(f"decision_offline: error: {e}", file=sys.stderr)
            return 2
        every += rows
        out[str(run)] = summary(rows)
    out["all"] = summary(every)
    print("| runs | questions | Hits@1 cascade | Hits@1 pooled | pooled − cascade [95% CI] | McNemar p | top answer differs | cut |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s in out.items():
        if not s["questions"]:
            continue
        print(f"| {name} | {s['questions']} | {s['cascade']:.2f} | {s['pooled']:.2f} | {s['diff']:+.2f} "
              f"[{s['ci95'][0]:+.2f}, {s['ci95'][1]:+.2f}] | {s['mcnemar_p']:.3f} | {s['top_differs']} | {s['cut']} |")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
