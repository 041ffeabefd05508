"""Retrieval-only reasoner: answers are the k-hop neighbours of the topic entities, ranked by
path support. No LLM.

A candidate's score is the sum over the reconstructed paths that end in it of
``1 + overlap(question words, words of the path's relation names)``, so a path whose relations
the question mentions ("directed", "born") counts more than an arbitrary one. It is the lower
bound every LLM method is compared with, and it writes the retrieved set so answer coverage
(a gold answer among the retrieved entities) is measured for free.
"""

from __future__ import annotations

import re
from collections import defaultdict

from kgreason.kg.linking import link_example
from kgreason.reasoners.base import BaseReasoner, Trace
from kgreason.types import Example, Prediction

_WORD = re.compile(r"[a-z]+")
_STOP = {"the", "of", "a", "an", "in", "which", "who", "what", "where", "is", "was", "did", "by",
         "to", "and", "for", "films", "film", "people", "person"}


def _words(text: str) -> set[str]:
    out = set()
    for w in _WORD.findall(text.lower()):
        if w in _STOP or len(w) < 3:
            continue
        out.add(w[:5])  # crude stemming: "directed"/"director" share "direc"
    return out


class RetrievalOnly(BaseReasoner):
    """Args:
        hops: fixed hop count; ``None`` = ``max_hops`` (or, with ``gold_hops``, the example's
            gold hop count when it has one).
        max_hops: depth when ``hops`` is null.
        gold_hops: read the example's gold hop count (an oracle, as in MetaQA's per-hop
            protocol); off by default, so the default run's figures use no gold hop counts.
        top_k: answers returned, ranked.
    """

    tasks = ("kgqa",)  # preflight: the dataset tasks this reasoner answers
    uses_llm = False  # preflight: no API key, cache or endpoint needed

    def __init__(self, *, kg, retriever, llm=None, hops: int | None = None, max_hops: int = 2,
                 gold_hops: bool = False, top_k: int = 10, embedder=None, graphdb=None) -> None:
        self.kg, self.retriever = kg, retriever
        self.hops, self.max_hops, self.gold_hops, self.top_k = hops, max_hops, bool(gold_hops), top_k
        R = kg.n_relations
        self._rel_words = [_words(n.replace(".", " ").replace("_", " ")) for n in kg.relation_names] * 2
        self._R = R

    def retrieval_plan(self, example: Example) -> list[tuple[list[int], int]]:
        """The k-hop query :meth:`answer` makes (for batched prefetching by the run loop)."""
        ids = link_example(self.kg, example).ids
        return [(list(ids), self.hop_budget(example))] if ids else []

    def answer(self, example: Example) -> Prediction:
        t = Trace()
        link = link_example(self.kg, example)
        t.add("link", "topic_entities", linked=link.linked, failed=link.failed)
        if not link.ids:
            return t.finish(example, [], retrieved=[], link_failed=True, retrieval_empty=True)
        k = self.hop_budget(example)
        sub = t.retrieval("khop", self.retriever.retrieve(link.ids, k), self.kg)
        cands = self.retriever.answer_set(sub)
        qwords = _words(example.question)
        score: dict[int, float] = defaultdict(float)
        for p in sub.paths:
            rels = p[1::2]
            score[p[-1]] += 1.0 + sum(len(qwords & self._rel_words[r]) for r in rels)
        cset = set(cands.tolist())
        # ties by entity name (the MID), not by internal id: the same ranking on any KG source
        ranked = sorted(cset, key=lambda e: (-score.get(e, 0.0), self.kg.entity_names[e]))
        names = [self.kg.entity_label(e) for e in ranked]
        t.add("rank", "path_support", top=[(n, score.get(e, 0.0)) for n, e in zip(names[:10], ranked[:10])])
        return t.finish(
            example, names[: self.top_k], retrieved=names,
            search_space=int(len(sub.triples)), hops_used=int(k), retrieval_empty=not names,
        )
