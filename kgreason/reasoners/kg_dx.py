"""Structural diagnosis baseline (no LLM): rank candidate diagnoses by KG support.

For a patient with linked evidences ``E`` (``example.topic_entities`` / ``findings``, KG ids or
names) and hop radius k, each disease-type entity d gets

    support(d) = |{e ∈ E : dist(e, d) ≤ k}|        (``exact_hops``: dist == k)

with distances from the injected LogosKG retriever (one ``retrieve([e], k)`` per evidence; BFS
layers, so ``within``/``exact`` semantics; hops are undirected, direction ``both``). Candidates
are the diseases with support ≥ 1, ranked by support, then by the share of the disease's own
k-hop evidences that the patient shows (``support / reach(d)``, favouring specific diseases),
then by id. The ``consistent`` set — diseases supported by *every* linked evidence — is the
quantity of the DDXPlus figure reproduced in ``kgreason.bench.dx_offline`` (1.12 pathologies per
patient on average, exactly the gold one for 92.5 % of the 588-patient sample, k = 1).

  E1 --+                 support(D1) = 3  (all evidences: "consistent")
  E2 --+--> D1           support(D2) = 1
  E3 --+--> D2

It writes ``retrieved`` (every candidate) so answer coverage is the Round-1 oracle bound.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kgreason.kg.linking import EmbeddingLinker, link_mentions
from kgreason.reasoners.base import BaseReasoner, Trace, entity_ranks
from kgreason.reasoners.dx_common import check_hop_retriever, diagnosis_mask, within_k
from kgreason.types import Example, Prediction

__all__ = ["KGDx"]


class KGDx(BaseReasoner):
    """Args:
        hops: k.
        exact_hops: count evidences at distance == k instead of ≤ k.
        disease_type: KG entity type(s) of diagnoses.
        top_k: answers returned.
        require_both_directions: refuse a retriever whose direction is not ``both``.
        link_embedding: MiniLM nearest-label fallback for evidences no KG name/alias matches
            (needed when the evidences are not the KG's own names: DDXPlus on UMLS / PrimeKG).
        link_threshold: cosine threshold of that fallback.
        embedder: the run's :class:`~kgreason.embed.Embedder` (used only with ``link_embedding``).
    """

    tasks = ("diagnosis",)  # preflight: the dataset tasks this reasoner answers
    uses_llm = False  # preflight: no API key, cache or endpoint needed

    def __init__(self, *, kg, retriever, llm=None, hops: int = 1, exact_hops: bool = False,
                 disease_type: str | Sequence[str] = ("disease", "pathology"), top_k: int = 10,
                 require_both_directions: bool = True, link_embedding: bool = False,
                 link_threshold: float = 0.8, embedder=None, graphdb=None) -> None:
        check_hop_retriever(retriever, "kg_dx", require_both_directions)
        self.kg, self.retriever = kg, retriever
        self.hops, self.exact_hops, self.top_k = int(hops), bool(exact_hops), int(top_k)
        self.disease_type = disease_type
        self._disease = diagnosis_mask(kg, disease_type, "kg_dx")
        self._reach_cache: dict[int, int] = {}
        if link_embedding:
            from kgreason.embed import Embedder

            self.linker = EmbeddingLinker(kg, embedder if embedder is not None else Embedder())
        else:
            self.linker = None
        self.link_threshold = float(link_threshold)

    def link(self, example: Example):
        """The patient's evidences (``topic_entities``, else ``findings``) linked to KG ids."""
        names = list(example.topic_entities) or list(example.findings)
        return link_mentions(self.kg, names, embedder=self.linker, threshold=self.link_threshold)

    def reached(self, seeds) -> np.ndarray:
        """Sorted int32 ids at distance ≤ k from ``seeds`` (seeds included) or == k."""
        sub = self.retriever.retrieve(list(seeds), self.hops)
        return within_k(sub.seeds, sub.entities_by_hop, self.hops, self.exact_hops)

    def _reach(self, d: int) -> int:
        if d not in self._reach_cache:
            r = self.reached([d])
            self._reach_cache[d] = int(len(r)) - (0 if self.exact_hops else 1)
        return self._reach_cache[d]

    def retrieval_plan(self, example: Example) -> list[tuple[list[int], int]]:
        """One k-hop query per linked evidence (what :meth:`answer` asks), for batched prefetching."""
        return [([e], self.hops) for e in self.link(example).ids]

    def support(self, evidence_ids: Sequence[int]) -> np.ndarray:
        """``(n_entities,)`` int32: support(d) = number of evidences within k (== k) of d."""
        support = np.zeros(self.kg.n_entities, dtype=np.int32)
        for e in evidence_ids:
            support[self.reached([e])] += 1
        return support

    def rank(self, support: np.ndarray) -> np.ndarray:
        """Diseases with support ≥ 1, by support, then specificity ``support / reach(d)``, then the
        canonical entity key (id string, then label; never the internal id)."""
        cands = np.flatnonzero((support > 0) & self._disease).astype(np.int32)
        share = np.array([support[d] / max(self._reach(int(d)), 1) for d in cands], dtype=np.float64)
        return cands[np.lexsort((entity_ranks(self.kg, cands), -share, -support[cands]))]

    def answer(self, example: Example) -> Prediction:
        t = Trace()
        kg = self.kg
        link = self.link(example)
        t.add("link", "evidences", linked=link.linked, failed=link.failed)
        if not link.ids:
            return t.finish(example, [], retrieved=[], link_failed=True, n_consistent=0, retrieval_empty=True)
        support = self.support(link.ids)
        ranked = self.rank(support)
        n = len(link.ids)
        consistent = [kg.entity_label(int(d)) for d in ranked if support[d] == n]
        names = [kg.entity_label(int(d)) for d in ranked]
        t.add("rank", "kg_support", n_evidences=n, n_candidates=len(names),
              top=[(kg.entity_label(int(d)), int(support[d])) for d in ranked[:10]])
        return t.finish(example, names[: self.top_k], retrieved=names, consistent=consistent,
                        n_consistent=len(consistent), n_candidates=len(names), hops_used=self.hops,
                        retrieval_empty=not names)
