"""LogosKG two-round KG-LLM diagnosis study (logoskg.txt §6, App. A.2, A.5, A.7).

Per patient note:

1. **Baseline**: the LLM reads the note and lists diagnoses (JSON list).
2. **Entity extraction**: clinical entities of the note linked to KG ids — ``example.findings``
   when the dataset gives them, else one LLM extraction call; linked with
   :func:`kgreason.kg.linking.link_mentions` (exact / normalised name, then optional MiniLM
   nearest-label fallback).
3. **Round 1 (filter)**: keep the baseline diagnoses that link to a KG entity at distance ≤ k
   (``exact_hops``: == k) from the note's entities. Distance 0 counts in ``≤ k`` mode: a
   diagnosis the note names itself is supported.
4. **Round 2 (enhance)**: candidate diagnoses = disease-type entities at distance ≤ k (== k) from
   the note's entities, ranked (MiniLM similarity to the note entities, or path support),
   capped, shown to the LLM which selects from them. Final = Round 1 ∪ Round 2 selections.

Distances come from the injected LogosKG retriever's BFS layers (``retriever.retrieve(seeds,
k).entities_by_hop``), so the retriever must use ``within`` or ``exact`` semantics; ``walk``
layers are not distances and are rejected. Diagnosis hops are undirected (a finding and a
disease are linked whichever way the edge is stored), so ``direction: both`` is required unless
``require_both_directions=false`` (e.g. a KG that already stores both orientations).

Refinement (App. A.7): the KG-supported disease set used by Round 1 can be pruned by the max
cosine similarity between a candidate's label and the note entities (``refine: threshold`` with
``tau``) or to the ``top_n`` most similar (``refine: top_n``). The paper used SapBERT; we use the
packaged all-MiniLM-L6-v2 (:class:`kgreason.retrieval.dense.Embedder`). With a refinement on,
Round 1 keeps only baseline diagnoses that link into the refined disease set. A refinement always
ranks by similarity (Round 2 then uses the same ranking).

Per-example outputs in ``Prediction.extra``: ``baseline``/``round1``/``round2`` name lists, a
``rounds`` dict of the same (what the PDSQI judge reads to score each round), per-round
``{"p", "r", "f1"}`` (App. A.2 Eq. 11–12) under ``baseline_prf``/``round1_prf``/``round2_prf``,
candidate counts, and the retrieved candidate names (``retrieved``, for answer coverage).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from kgreason.kg.linking import link_mentions
from kgreason.kg.store import normalise_name
from kgreason.llm.parsing import ParseResult, parse_json
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, load_prompt, render
from kgreason.retrieval.base import Direction, Semantics
from kgreason.retrieval.dense import LazyEmbedder
from kgreason.types import ChatRequest, Example, Prediction


def parse_name_list(text: str) -> ParseResult:
    """Strict: a JSON list of strings (or an object holding one list). Anything else fails,
    which triggers the bounded re-ask."""
    js = parse_json(text)
    val = js.value
    if js.ok and isinstance(val, dict):
        lists = [v for v in val.values() if isinstance(v, list)]
        val = lists[0] if lists else None
    if not js.ok or not isinstance(val, list):
        return ParseResult(False, [], "expected a JSON list of strings")
    out = [str(x).strip() for x in val if isinstance(x, (str, int, float)) and str(x).strip()]
    return ParseResult(True, list(dict.fromkeys(out)))


def set_prf(pred: Sequence[str], gold: Sequence[str],
            same: Callable[[str, str], bool] | None = None) -> dict[str, float]:
    """Entity-level precision / recall / F1 (logoskg.txt App. A.2, Eq. 11–12).

    ``|pred ∩ gold|`` counts the gold items matched by some prediction (for recall) and the
    predictions matching some gold item (for precision); ``same`` defaults to normalised-name
    equality. Empty ``pred`` gives P = 0; empty ``gold`` gives R = 0.

    >>> set_prf(["Flu", "cold", "asthma"], ["flu", "Pneumonia"])
    {'p': 0.3333333333, 'r': 0.5, 'f1': 0.4}
    """
    eq = same or (lambda a, b: normalise_name(a) == normalise_name(b))
    pred, gold = list(dict.fromkeys(pred)), list(dict.fromkeys(gold))
    tp_p = sum(1 for p in pred if any(eq(p, g) for g in gold))
    tp_r = sum(1 for g in gold if any(eq(p, g) for p in pred))
    p = tp_p / len(pred) if pred else 0.0
    r = tp_r / len(gold) if gold else 0.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return {"p": round(p, 10), "r": round(r, 10), "f1": round(f1, 10)}


class LogosKGDx(BaseReasoner, LazyEmbedder):
    """Two-round KG filtering / enhancement of LLM diagnoses.

    Args:
        hops: k, the hop radius (swept 1..5 in Fig. 3 / 5).
        rounds: 1 = final answers are Round 1; 2 = Round 1 ∪ Round 2 selections.
        exact_hops: use distance == k instead of ≤ k (the "at specific hops" mode of App. A.8).
        disease_type: KG entity type of diagnoses (``kg.entities_of_type``).
        max_diagnoses: differential size asked of the baseline.
        max_candidates: Round 2 candidates shown to the LLM after ranking.
        max_select: Round 2 selections kept.
        rank: ``similarity`` (MiniLM cosine of candidate label vs note entities, max over entities)
            | ``path_support`` (number of note entities within k of the candidate) | ``none``.
        refine: ``none`` | ``threshold`` | ``top_n`` (App. A.7, Table 6).
        tau: similarity threshold for ``refine: threshold``.
        top_n: kept candidates for ``refine: top_n``.
        link_embedding: MiniLM nearest-label fallback when exact/normalised linking fails.
        link_threshold: cosine threshold of that fallback.
        use_findings: use ``example.findings`` as the note entities when present (else extract).
        max_reasks: bounded re-asks on unparseable replies.
        max_tokens: generation budget per call.
        require_both_directions: refuse a retriever whose direction is not ``both``.
        time_hops: also time the retrieval at each h = 1..k (k extra retrievals) and record the
            per-hop times (``hop_times_s``: time of hop h = t(h) - t(h-1)) in the trace and extra.
        prompts_dir: ``kgreason/reasoners/prompts/<prompts_dir>/*.txt``.
    """

    def __init__(
        self, *, kg, retriever, llm=None, hops: int = 3, rounds: int = 2, exact_hops: bool = False,
        disease_type: str | Sequence[str] = ("disease", "pathology"), max_diagnoses: int = 10, max_candidates: int = 50,
        max_select: int = 5, rank: str = "similarity", refine: str = "none", tau: float = 0.8,
        top_n: int = 20, link_embedding: bool = False, link_threshold: float = 0.8,
        use_findings: bool = True, max_reasks: int = 1, max_tokens: int = 512,
        require_both_directions: bool = True, time_hops: bool = False, prompts_dir: str = "logoskg_dx",
        embedder=None,
    ) -> None:
        if rounds not in (1, 2):
            raise ValueError(f"logoskg_dx: rounds must be 1 or 2, got {rounds}")
        if int(hops) < 1:
            raise ValueError(f"logoskg_dx: hops must be >= 1, got {hops}")
        if rank not in ("similarity", "path_support", "none"):
            raise ValueError(f"logoskg_dx: rank must be similarity | path_support | none, got {rank!r}")
        if refine not in ("none", "threshold", "top_n"):
            raise ValueError(f"logoskg_dx: refine must be none | threshold | top_n, got {refine!r}")
        sem = getattr(retriever, "semantics", None)
        if sem is Semantics.WALK or str(getattr(sem, "value", sem)) == "walk":
            raise ValueError("logoskg_dx needs hop distances: use a retriever with semantics within|exact, not walk")
        direction = getattr(retriever, "direction", Direction.BOTH)
        if require_both_directions and str(getattr(direction, "value", direction)) != "both":
            raise ValueError(
                f"logoskg_dx: finding→diagnosis hops are undirected; set retriever.direction=both "
                f"(got {getattr(direction, 'value', direction)}) or reasoner.require_both_directions=false")
        from kgreason.reasoners.kg_dx import diagnosis_types

        types = diagnosis_types(kg, disease_type, "logoskg_dx")
        self.kg, self.retriever, self.llm = kg, retriever, llm
        self.hops, self.rounds, self.exact_hops = int(hops), int(rounds), bool(exact_hops)
        self.disease_type = disease_type
        self.max_diagnoses, self.max_candidates, self.max_select = max_diagnoses, max_candidates, max_select
        self.rank, self.refine, self.tau, self.top_n = rank, refine, float(tau), int(top_n)
        self.link_embedding, self.link_threshold = link_embedding, link_threshold
        self.use_findings, self.max_reasks, self.max_tokens = use_findings, max_reasks, max_tokens
        self.reask = ReaskPolicy(max_reasks)
        self.time_hops = bool(time_hops)
        self.prompts = {s: load_prompt(prompts_dir, s) for s in ("baseline", "extract", "select")}
        self._disease_mask = np.zeros(kg.n_entities, dtype=bool)
        for ty in types:
            self._disease_mask[kg.entities_of_type(ty)] = True
        self._embedder = embedder

    # ------------------------------------------------------------------ helpers
    def _ask(self, t: Trace, purpose: str, prompt: str) -> list[str]:
        req = ChatRequest.of(prompt, max_tokens=self.max_tokens)
        res = self.ask(t, purpose, req, parse_name_list)
        return list(res.value or []) if res.ok else []

    def _link(self, names: Sequence[str]):
        emb = self.embedder if self.link_embedding else None
        return link_mentions(self.kg, list(names), embedder=emb, threshold=self.link_threshold)

    def supported(self, layers: Sequence[np.ndarray], seeds: np.ndarray) -> np.ndarray:
        """Sorted int32 ids at distance ≤ k (seeds included) or == k (``exact_hops``)."""
        if self.exact_hops:
            return np.unique(layers[-1]).astype(np.int32) if len(layers) >= self.hops else np.zeros(0, np.int32)
        parts = [np.asarray(seeds, dtype=np.int32)] + [np.asarray(x, dtype=np.int32) for x in layers]
        return np.unique(np.concatenate(parts)).astype(np.int32)

    def _scores(self, cands: np.ndarray, entity_names: list[str], seeds: np.ndarray) -> np.ndarray:
        """``(len(cands),)`` float32 ranking scores (higher first)."""
        if len(cands) == 0:
            return np.zeros(0, dtype=np.float32)
        if self.rank == "similarity" or self.refine != "none":
            labels = [self.kg.entity_label(int(c)) for c in cands]
            if not entity_names:
                return np.zeros(len(cands), dtype=np.float32)
            return self.embedder.similarity(labels, entity_names).max(axis=1).astype(np.float32)
        if self.rank == "path_support":
            support = np.zeros(self.kg.n_entities, dtype=np.float32)
            for s in seeds.tolist():
                sub = self.retriever.retrieve([s], self.hops)
                support[self.supported(sub.entities_by_hop, sub.seeds)] += 1.0
            return support[cands]
        return np.zeros(len(cands), dtype=np.float32)

    # ------------------------------------------------------------------ main
    def retrieval_plan(self, example: Example) -> list[tuple[list[int], int]]:
        """The k-hop queries :meth:`answer` makes, when they are known before any LLM call
        (structured findings, ``use_findings``); batched by the run loop. Extracted entities
        depend on the LLM, so those examples plan nothing; with ``time_hops`` nothing is
        prefetched either, so the recorded per-hop times are the engine's own."""
        if self.time_hops or not (self.use_findings and example.findings):
            return []
        seeds = list(self._link(list(example.findings)).ids)
        if not seeds:
            return []
        plan = [(seeds, self.hops)]
        if self.rank == "path_support" and self.refine == "none":
            plan += [([s], self.hops) for s in seeds]
        return plan

    def answer(self, example: Example) -> Prediction:
        t = Trace()
        kg, note = self.kg, example.question
        gold = list(example.diagnoses or example.answers)

        baseline = self._ask(t, "baseline", render(self.prompts["baseline"], note=note,
                                                  max_diagnoses=self.max_diagnoses))[: self.max_diagnoses]

        mentions = list(example.findings) if (self.use_findings and example.findings) else []
        if not mentions:
            mentions = self._ask(t, "extract", render(self.prompts["extract"], note=note))
        ent = self._link(mentions)
        t.add("link", "note_entities", linked=ent.linked, failed=ent.failed)
        seeds = np.asarray(ent.ids, dtype=np.int32)
        entity_names = [kg.entity_label(i) for i in ent.ids]

        # ---- LogosKG k-hop retrieval (one call; layers = BFS distance shells)
        t0 = time.perf_counter()
        if len(seeds):
            sub = self.retriever.retrieve(seeds, self.hops)
            layers = sub.entities_by_hop
        else:
            sub, layers = None, []
        retrieve_s = time.perf_counter() - t0
        hop_times: list[float] = []
        if self.time_hops and len(seeds):
            prev = 0.0
            for h in range(1, self.hops + 1):
                t1 = time.perf_counter()
                self.retriever.retrieve(seeds, h)
                cum = time.perf_counter() - t1
                hop_times.append(round(max(cum - prev, 0.0), 6))
                prev = cum
        supported = self.supported(layers, seeds) if len(seeds) else np.zeros(0, np.int32)
        diseases = supported[self._disease_mask[supported]]
        diseases_per_hop = [int(self._disease_mask[np.asarray(x, dtype=np.int64)].sum()) for x in layers]
        if sub is not None:
            t.retrieval("khop", sub, kg, retrieve_s=round(retrieve_s, 6), hop_times_s=hop_times,
                        diseases_per_hop=diseases_per_hop,
                        n_supported=int(len(supported)), n_disease_candidates=int(len(diseases)))

        scores = self._scores(diseases, entity_names, seeds)
        order = np.lexsort((diseases, -scores)) if len(diseases) else np.zeros(0, dtype=np.int64)
        ranked, ranked_scores = diseases[order], scores[order]

        # ---- refinement of the Round-1 support set (App. A.7)
        if self.refine == "threshold":
            allowed = set(ranked[ranked_scores >= self.tau].tolist())
        elif self.refine == "top_n":
            allowed = set(ranked[: self.top_n].tolist())
        else:
            allowed = set(supported.tolist())

        # ---- Round 1: keep baseline diagnoses linked into the supported set
        round1, r1_links = [], []
        for name in baseline:
            lk = self._link([name])
            hit = next((i for i in lk.ids if i in allowed), None)
            r1_links.append((name, [kg.entity_names[i] for i in lk.ids], hit is not None))
            if hit is not None:
                round1.append(name)
        t.add("filter", "round1", hops=self.hops, exact_hops=self.exact_hops, refine=self.refine,
              n_allowed=len(allowed), decisions=r1_links)

        # ---- Round 2: LLM selects among ranked disease candidates
        shown = [kg.entity_label(int(c)) for c in ranked[: self.max_candidates]]
        round2_sel: list[str] = []
        if self.rounds == 2 and shown:
            kept_ids = {i for n in round1 for i in self._link([n]).ids}
            listing = "\n".join(f"- {n}" for n in shown)
            picked = self._ask(t, "select", render(self.prompts["select"], note=note, hops=self.hops,
                                                   max_select=self.max_select, kept=round1 or "none",
                                                   candidates=listing))
            by_norm = {normalise_name(n): n for n in shown}
            for p in picked:
                n = by_norm.get(normalise_name(p))
                if n is not None and n not in round2_sel and kg.find_entity(n) not in kept_ids:
                    round2_sel.append(n)
            round2_sel = round2_sel[: self.max_select]
        t.add("select", "round2", n_candidates=int(len(diseases)), n_shown=len(shown), selected=round2_sel)
        round2 = list(dict.fromkeys(round1 + round2_sel))

        same = self._same
        final = round2 if self.rounds == 2 else round1
        rounds = {"baseline": baseline, "round1": round1}
        if self.rounds == 2:
            rounds["round2"] = round2
        extra = dict(
            baseline=baseline, round1=round1, round2=round2, round2_selected=round2_sel, rounds=rounds,
            baseline_prf=set_prf(baseline, gold, same), round1_prf=set_prf(round1, gold, same),
            round2_prf=set_prf(round2, gold, same),
            n_note_entities=len(mentions), n_linked_entities=int(len(seeds)),
            n_disease_candidates=int(len(diseases)), n_candidates_shown=len(shown),
            diseases_per_hop=diseases_per_hop, retrieve_s=round(retrieve_s, 6), hop_times_s=hop_times,
            retrieved=[kg.entity_label(int(c)) for c in ranked], hops_used=self.hops,
            search_space=int(len(sub.triples)) if sub is not None else 0,
        )
        return t.finish(example, final, **extra)

    def _same(self, a: str, b: str) -> bool:
        if normalise_name(a) == normalise_name(b):
            return True
        ia, ib = self.kg.find_entity(a), self.kg.find_entity(b)
        return ia >= 0 and ia == ib
