"""Offline measurements for the LogosKG diagnosis study on DDXPlus (no LLM needed).

    python -m kgreason.bench.dx_offline [--data $KGREASON_DATA] [--max-hops 5] [--json OUT]

Reports, on the 588-patient DDXPlus sample + the DDXPlus condition→evidence KG:

* linking rate of patients' evidences (English question text → ``release_evidences.json`` code,
  exact text) and of gold pathologies (English name → ``cond-name-eng``); the same name-linking
  rate of the pathologies against the PrimeKG-derived pathway subset and the UMLS
  semantic-network toy KG in shared/data (neither holds DDXPlus evidences, so no hop study there);
* the ``kg_dx`` "consistent set": pathologies adjacent to ALL of a patient's non-default
  evidences — mean size and share of patients where it is exactly the gold pathology (the
  figure to reproduce: 1.12 and 92.5 %);
* hop distribution evidence set → gold pathology and per (evidence, gold) pair (logoskg.txt
  Fig. 2 shape), undirected;
* the Round-1 oracle bound at each k: the fraction of gold pathologies within k hops of the
  patient's evidences (the recall a perfect Round 1 could keep).

Files are read by the one DDXPlus reader, :mod:`kgreason.data.ddxplus` (KG: ``load_ddxplus_kg``;
patients: ``read_patients`` + ``english_answers``). The sample rows come from the first
(French-coded) release; their ``English Evidences`` column is what we link. A patient's evidences
here are the *non-default* ones (:func:`kgreason.data.ddxplus.is_default_answer`: the answer
differs from the evidence's ``default_value``), which is what the consistent-set figure counts.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from kgreason.data.ddxplus import english_answers, is_default_answer, load_ddxplus_kg, read_evidences, read_patients
from kgreason.kg.store import KG, normalise_name
from kgreason.paths import resolve as resolve_path
from kgreason.types import Example

SAMPLE_FILE = "patients_val_sample588_karishmagrana.csv"


# ----------------------------------------------------------------------------- inputs
def load_kg(ddx_dir: str | Path) -> KG:
    """The DDXPlus condition→evidence KG (``kg=ddxplus``): 49 pathologies, 223 evidences, 888 triples."""
    d = Path(ddx_dir)
    return load_ddxplus_kg(d / "release_conditions.json", d / "release_evidences.json")


def load_patients(ddx_dir: str | Path, file: str = SAMPLE_FILE) -> tuple[list[Example], dict]:
    """Patients of the sample CSV as :class:`Example`: ``topic_entities`` = the non-default
    evidences' questions (KG entity names) linked by exact English question text; ``findings`` =
    "question answer"; ``diagnoses`` = the ``English Pathology`` column. Returns
    ``(examples, link stats)``."""
    d = Path(ddx_dir)
    evs = read_evidences(d / "release_evidences.json")
    q2code = {ev["question_en"].strip(): code for code, ev in evs.items()}
    out, n_ev, n_ev_linked, n_nondefault = [], 0, 0, 0
    for row in read_patients(d / file):
        questions, findings = [], []
        for q, v in english_answers(row).items():
            n_ev += 1
            code = q2code.get(q)
            if code is None:
                continue
            n_ev_linked += 1
            if not is_default_answer(evs[code], v):
                n_nondefault += 1
                questions.append(q)
                findings.append(f"{q} {v}")
        path = row["English Pathology"]
        note = f"Age {row['AGE']}, sex {row['SEX']}. " + " ".join(findings)
        out.append(Example(id=f"ddxplus-{row.get('OriginalRowKey') or row.index}", question=note, answers=(path,),
                           topic_entities=tuple(dict.fromkeys(questions)), findings=tuple(findings),
                           diagnoses=(path,), extra={"icd10": row.get("ICD-10", "")}))
    return out, {"evidences": n_ev, "evidences_linked": n_ev_linked, "non_default": n_nondefault}


# ----------------------------------------------------------------------------- measurements
def _dist_from(kg: KG, retriever, seeds: list[int], max_hops: int) -> np.ndarray:
    """``(n,)`` int32 undirected BFS distance from the seed set (-1 = beyond max_hops)."""
    sub = retriever.retrieve(seeds, max_hops)
    dist = np.full(kg.n_entities, -1, dtype=np.int32)
    dist[sub.seeds] = 0
    for h, layer in enumerate(sub.entities_by_hop, start=1):
        dist[layer] = h
    return dist


def measure(data_dir: str | Path, max_hops: int = 5) -> dict:
    t0 = time.perf_counter()
    ddx = Path(data_dir) / "ddxplus"
    kg = load_kg(ddx)
    patients, stats = load_patients(ddx)
    n = len(patients)
    gold_ids = [kg.find_entity(p.diagnoses[0]) for p in patients]
    res: dict = {"kg": {"entities": kg.n_entities, "triples": kg.n_triples,
                        "diseases": int(len(kg.entities_of_type("pathology")))},
                 "patients": n}
    res["linking"] = {
        "evidence_rate": stats["evidences_linked"] / max(stats["evidences"], 1),
        "evidences": stats["evidences"], "non_default_evidences": stats["non_default"],
        "pathology_rate": sum(g >= 0 for g in gold_ids) / n,
    }
    # other KGs in shared/data: pathology name linking only
    names = sorted({p.diagnoses[0] for p in patients})
    other = {}
    pk = Path(data_dir) / "primekg_drugmech_pathways" / "benchmark_pathways_nodes.csv"
    if pk.exists():
        with open(pk, newline="") as f:
            rows = list(csv.DictReader(f))
        col = next((c for c in ("node_name", "name", "node") if rows and c in rows[0]), None)
        vocab = {normalise_name(r[col]) for r in rows} if col else set()
        other["primekg_pathways_pathology_rate"] = sum(normalise_name(x) in vocab for x in names) / len(names)
    um = Path(data_dir) / "umls_semnet" / "train.txt"
    if um.exists():
        vocab = set()
        for ln in um.read_text().splitlines():
            parts = ln.split("\t")
            if len(parts) == 3:
                vocab |= {normalise_name(parts[0]), normalise_name(parts[2])}
        other["umls_semnet_pathology_rate"] = sum(normalise_name(x) in vocab for x in names) / len(names)
    res["linking"]["other_kgs"] = other

    # consistent set via the real kg_dx reasoner (k = 1)
    from kgreason.bench.retrieval import build_retriever
    from kgreason.reasoners.kg_dx import KGDx

    retriever = build_retriever("scipy", kg, direction="both", max_paths=0, return_triples=False)
    reasoner = KGDx(kg=kg, retriever=retriever, hops=1)
    sizes, exact, contains, top1 = [], 0, 0, 0
    for p in patients:
        pred = reasoner.answer(p)
        cons = pred.extra["consistent"]
        sizes.append(len(cons))
        exact += cons == [p.diagnoses[0]]
        contains += p.diagnoses[0] in cons
        top1 += bool(pred.answers) and pred.answers[0] == p.diagnoses[0]
    res["consistent_set"] = {
        "mean_size": float(np.mean(sizes)), "exactly_gold": exact / n, "contains_gold": contains / n,
        "size_counts": dict(sorted(Counter(sizes).items())), "kg_dx_hits_at_1": top1 / n,
    }

    # hop distributions (Fig. 2 shape) and Round-1 oracle bound
    set_counts: Counter = Counter()
    pair_counts: Counter = Counter()
    disease_mask = np.zeros(kg.n_entities, dtype=bool)
    disease_mask[kg.entities_of_type("pathology")] = True
    cand_sums = np.zeros(max_hops + 1, dtype=np.int64)
    for p, g in zip(patients, gold_ids):
        seeds = [kg.find_entity(c) for c in p.topic_entities if kg.find_entity(c) >= 0]
        if g < 0 or not seeds:
            set_counts["unreachable"] += 1
            continue
        dall = _dist_from(kg, retriever, seeds, max_hops)
        for k in range(1, max_hops + 1):  # Round-2 candidate pool size at k
            cand_sums[k] += int((disease_mask & (dall >= 0) & (dall <= k)).sum())
        dset = int(dall[g])
        set_counts[dset if dset >= 0 else "unreachable"] += 1
        dg = _dist_from(kg, retriever, [g], max_hops)  # undirected: dist(e, g) = dist(g, e)
        for s in seeds:
            pair_counts[int(dg[s]) if dg[s] >= 0 else "unreachable"] += 1
    keys = list(range(0, max_hops + 1)) + ["unreachable"]
    res["hops_set_to_gold"] = {str(k): set_counts.get(k, 0) for k in keys}
    res["hops_pair_evidence_gold"] = {str(k): pair_counts.get(k, 0) for k in keys}
    res["round1_oracle_recall"] = {
        str(k): sum(v for h, v in set_counts.items() if h != "unreachable" and h <= k) / n
        for k in range(1, max_hops + 1)
    }
    res["round2_candidates_mean"] = {str(k): float(cand_sums[k] / n) for k in range(1, max_hops + 1)}
    res["wall_s"] = round(time.perf_counter() - t0, 3)
    return res


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=resolve_path("data"), help="data root (default: paths.data, i.e. $KGREASON_DATA)")
    ap.add_argument("--max-hops", type=int, default=5)
    ap.add_argument("--json", default=None, help="write the result here too")
    a = ap.parse_args(argv)
    res = measure(a.data, a.max_hops)
    text = json.dumps(res, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text)
    return res


if __name__ == "__main__":
    main()
