"""R_q on the CWQ dev split over the Freebase slice (issue 72 item 4; docs/sgr.md, "R_q").

For the first N questions of the dev split (``questions.split=dev``: the first 20 of the shared CWQ
sample, the only questions settings are chosen on), SGR's Eq. 2 call runs (one model call per
question; nothing else of SGR), V_q is linked, and every relation phrase of the reply is mapped by
name and by embedding. Printed per question: V_q, each phrase with its name match and its five
nearest KG relations with their cosines, and whether R_q keeps a candidate triple around V_q (R_q
"maps": no fallback to every relation) at each threshold of ``--thresholds``. The precision of the
mapping is judged by hand from this output (docs/sgr.md).

    python experiments/sgr_table2/rq_dev.py --n 10 llm=qwen_coder_1_5b llm.n_ctx=8192 llm.n_threads=2

Extra arguments are Hydra overrides (the model, its threads). Replies go through the call cache, so
a second run with other thresholds makes no model call.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def main(argv=None) -> int:
    from kgreason.ask import compose
    from kgreason.reasoners.base import Trace
    from kgreason.runner.run import build

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10, help="dev questions (the first N of the dev split, N <= 20)")
    ap.add_argument("--thresholds", default="0.4,0.45,0.5,0.55,0.6,0.65,0.7")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    if not 1 <= a.n <= 20:
        print("rq_dev: --n must be between 1 and 20 (the dev split has 20 questions)", file=sys.stderr)
        return 2
    cfg, _ = compose(["reasoner=sgr", "dataset=cwq", "kg=freebase_slice", "reasoner.cypher=false", "graphdb=none",
                      "questions.split=dev", *a.overrides])
    thresholds = [float(x) for x in a.thresholds.split(",")]
    with build(cfg) as c:
        sgr, kg = c.reasoner, c.kg
        rows = []
        for ex in list(c.dataset)[: a.n]:
            t = Trace()
            s_q = sgr.structure_query(t, ex.question)
            link, _ = sgr.link_vq(t, ex, s_q)
            phrases = s_q["relations"] if s_q else []
            sims = sgr.relation_similarity(phrases) if phrases else np.zeros((0, kg.n_relations))
            row = {"id": ex.id, "question": ex.question, "s_q": s_q,
                   "v_q": [[m, kg.entity_label(i)] for m, i, _ in link.linked], "v_q_failed": link.failed,
                   "phrases": [], "maps_at": {}}
            for ph, s in zip(phrases, sims):
                got, how = sgr.relations_by_name(ph)
                near = [(kg.relation_names[i], round(float(s[i]), 3)) for i in np.argsort(-s, kind="stable")[:5]]
                row["phrases"].append({"phrase": ph, "by_name": [kg.relation_names[i] for i in got], "nearest": near})
            if link.ids:
                sub = sgr.retriever.retrieve(link.ids, sgr.hop_budget(ex))
                for th in thresholds:
                    sgr.rq_threshold = th
                    rq, _ = sgr.map_relations(phrases)
                    _, fallback = sgr.candidates(sub, rq)
                    row["maps_at"][str(th)] = {"r_q": [kg.relation_names[i] for i in rq], "maps": not fallback}
            rows.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
    linked = [r for r in rows if r["v_q"]]
    print(f"\n{len(linked)} of {len(rows)} dev questions link V_q", file=sys.stderr)
    for th in thresholds:
        n = sum(r["maps_at"][str(th)]["maps"] for r in linked)
        print(f"rq_threshold {th}: R_q maps (no fallback) on {n} of {len(linked)} linked", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
