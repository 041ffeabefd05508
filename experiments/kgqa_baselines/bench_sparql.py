"""Benchmark (not a test): KG requests and wall time per question, ToG and ReKnoS on CWQ, through a
local Virtuoso (kg=freebase_sparql) against the in-memory slice (kg=freebase_slice).

    KGREASON_DATA=../shared/data python experiments/kgqa_baselines/bench_sparql.py [--n 50]

Starts a private Virtuoso 7 (needs ``virtuoso-t``: ``apt-get install -y virtuoso-opensource``)
loaded with the FB15k-237 slice as N-Triples, so both sources hold the same facts. The LLM is
``llm=scripted`` (a fixed reply, no model): it stands in for the LLM so the figures count the KG
side alone (ToG prunes with bm25, so its search is real; ReKnoS's scores are flat). Three passes
per reasoner: the slice; SPARQL with a cold disk cache (every query goes to Virtuoso); SPARQL again
on the warm cache (a re-run / sweep). Writes ``sparql_bench.json`` next to this file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

REASONERS = {
    "tog": ["reasoner=tog", "reasoner.prune=bm25"],
    "reknos": ["reasoner=reknos"],
}


def compose(overrides: list[str]):
    from hydra import compose as hcompose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        return hcompose(config_name="config", overrides=overrides)


def one_pass(overrides: list[str], out: Path) -> dict:
    from kgreason.runner.run import build

    t0 = time.perf_counter()
    c = build(compose(overrides), out)
    build_s = time.perf_counter() - t0
    ep = getattr(c.kg, "endpoint", None)
    walls, reqs, queries, hits, answers, linked = [], [], [], [], {}, []
    for ex in c.dataset:
        before = dict(ep.stats) if ep else None
        t = time.perf_counter()
        p = c.reasoner.answer(ex)
        walls.append(time.perf_counter() - t)
        answers[ex.id] = list(p.answers)
        linked.append(not (p.extra or {}).get("link_failed") and any(
            st.kind == "link" and st.data.get("linked") for st in p.trace))
        if ep:
            reqs.append(ep.stats["requests"] - before["requests"])
            queries.append(ep.stats["queries"] - before["queries"])
            hits.append(ep.stats["cache_hits"] - before["cache_hits"])
    on = [i for i, x in enumerate(linked) if x]
    res = dict(questions=len(walls), questions_linked=len(on), build_s=round(build_s, 2),
               wall_s_per_linked_question_mean=round(statistics.mean([walls[i] for i in on]), 4) if on else None,
               wall_s_per_question_mean=round(statistics.mean(walls), 4),
               wall_s_per_question_median=round(statistics.median(walls), 4),
               wall_s_total=round(sum(walls), 2))
    if ep:
        res.update(kg_requests_per_question_mean=round(statistics.mean(reqs), 2),
                   kg_requests_per_linked_question_mean=round(statistics.mean([reqs[i] for i in on]), 2) if on else None,
                   kg_requests_per_question_median=statistics.median(reqs),
                   kg_requests_per_question_max=max(reqs),
                   kg_queries_per_question_mean=round(statistics.mean(queries), 2),
                   cache_hits_per_question_mean=round(statistics.mean(hits), 2),
                   retries=ep.stats["retries"], failures=ep.stats["failures"],
                   http_seconds=round(ep.stats["seconds"], 2), by_kind=ep.stats["by_kind"])
    return res, answers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50, help="CWQ questions (the first n)")
    ap.add_argument("--out", default=str(HERE / "sparql_bench.json"))
    a = ap.parse_args()
    data = Path(os.environ.get("KGREASON_DATA", REPO.parent / "shared" / "data"))
    from kgreason.kg.sparql import fb15k237_to_ntriples
    from kgreason.kg.sparql_local import VirtuosoServer

    tmp = Path(tempfile.mkdtemp(prefix="sparql_bench_"))
    os.environ["KGREASON_CACHE_DIR"] = str(tmp / "cache")
    os.environ["WANDB_MODE"] = "offline"
    src = data / "freebase_fb15k237"
    nt = tmp / "load" / "fb15k237.nt.gz"
    fb15k237_to_ntriples([str(src / f"{s}.txt.gz") for s in ("train", "valid", "test")], nt,
                         names=str(src / "entity2text.txt"), aliases=str(src / "FB15k_mid2name.txt"))
    common = ["dataset=cwq", f"dataset.limit={a.n}", "llm=scripted", "tracking=none", "llm_cache.mode=off"]
    results: dict = dict(
        what="KG requests and wall time per question: kg=freebase_sparql on a local Virtuoso vs the in-memory "
             "kg=freebase_slice (same FB15k-237 facts); llm=scripted (fixed reply) so only KG work is measured",
        questions=a.n, dataset="cwq (first n of shared/data/cwq/tog_cwq.json)",
        machine=dict(platform=platform.platform(), cpus=os.cpu_count(), python=platform.python_version()),
        results={})
    with VirtuosoServer(tmp / "db", [nt]) as v:
        results["virtuoso"] = dict(version="7.2.5 (Debian virtuoso-opensource)", load_s=round(v.load_seconds, 2))
        sparql = ["kg=freebase_sparql", "retriever=sparql", f"kg.url={v.url}", "kg.max_rows=100000"]
        for name, rover in REASONERS.items():
            r = {}
            r["slice"], ans_slice = one_pass(common + rover + ["kg=freebase_slice", "retriever=scipy"], tmp / "o")
            # a fresh response cache per reasoner: cold = every query goes to Virtuoso, warm = a re-run
            own = [f"kg.cache_dir={tmp / ('sparql_cache_' + name)}"]
            r["sparql_cold"], ans_cold = one_pass(common + rover + sparql + own, tmp / "o")
            r["sparql_warm_cache"], ans_warm = one_pass(common + rover + sparql + own, tmp / "o")
            r["same_answers_as_slice"] = ans_slice == ans_cold == ans_warm
            r["wall_ratio_sparql_cold_over_slice"] = round(
                r["sparql_cold"]["wall_s_per_question_mean"] / r["slice"]["wall_s_per_question_mean"], 1)
            results["results"][name] = r
            print(name, json.dumps(r, indent=1), flush=True)
    Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
