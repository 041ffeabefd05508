"""KG retrieval-augmented generation with embedding-similarity triple filtering.

Pipeline for one question:

1. link the topic entities (:func:`kgreason.kg.linking.link_example`);
2. k-hop retrieval with the injected :class:`~kgreason.retrieval.base.GraphRetriever`
   (``hops``, else ``max_hops``; the example's gold hop count only with ``gold_hops: true``);
3. verbalise every activated triple (``KG.verbalise``: ``"head | relation | tail"``);
4. score each triple against the question with all-MiniLM-L6-v2 cosine,
   ``s(e_i, q) = sim(φ(e_i), φ(q))`` (sgr.txt §3.1.2 Eq. 4), keep the top-k (Eq. 6) and, when
   ``tau`` is set, only those with ``s ≥ τ`` (Eq. 5);
5. prompt the LLM with the kept triples (best first) and parse ``Answer: ...``.

Nothing linked, or no triple kept: the question is answered with the IO prompt alone
(:func:`~kgreason.reasoners.io.answer_without_retrieval`, the IO baseline's request), one call
as on every other question, and ``extra["retrieval_empty"]`` is True (``on_empty: abstain``, the
ablation ``on_empty_abstain``: no call, no answer).

Per-example extra: ``retrieved`` (names of every entity the k-hop retrieval reached, so the
``answer_coverage`` metric measures the retrieval, as in SGR/ReKnoS "retrieval rate"),
``retrieved_in_prompt`` (entities of the kept triples), ``search_space`` (candidate triples
scored), ``kept`` (triples in the prompt).
"""

from __future__ import annotations

import time

import numpy as np

from kgreason.ranking import ranked
from kgreason.kg.linking import LinkResult, link_example
from kgreason.embed import Embedder
from kgreason.llm.parsing import parse_answers
from kgreason.reasoners.io import answer_without_retrieval, check_on_empty
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, canonical_triples, load_prompt, render
from kgreason.types import ChatRequest, Example, Prediction, Subgraph

#: the ranking site of Eq. 4-6 (kgreason/ranking.py: recorded in each row, served to a replay)
SITE = "rag.cosine_filter"


class RAG(BaseReasoner):
    """Args:
        hops: retrieval depth; ``None`` = ``max_hops`` (or, with ``gold_hops``, the example's
            gold hop count when it has one).
        max_hops: depth when ``hops`` is null.
        gold_hops: read the example's gold hop count (an oracle, MetaQA's per-hop protocol);
            off by default.
        top_k: triples kept by cosine rank (Eq. 6); ``None`` = no top-k cut (then ``tau`` must
            be set).
        tau: similarity threshold (Eq. 5); ``None`` = top-k only.
        max_candidates: cap on triples scored per question (hop-1 triples first); the cut is
            recorded as ``candidates_truncated``.
        temperature, max_tokens: answer generation settings.
        max_reasks: re-asks when the answer reply does not parse (kit policy; 0 = none).
        embedder: the run's :class:`~kgreason.embed.Embedder` (None: a private one, loaded on first use).
        on_empty: ``answer`` (nothing linked / no triple kept → the IO prompt) | ``abstain``.
    """

    tasks = ("kgqa",)  # preflight: the dataset tasks this reasoner answers
    embed_forms = ("triple",)  # the KG embedding store its ranking reads (kgreason/storage/embedstore.py)

    def __init__(self, *, kg, retriever, llm, hops: int | None = None, max_hops: int = 2,
                 gold_hops: bool = False, top_k: int | None = 30, tau: float | None = None, max_candidates: int = 5000,
                 temperature: float = 0.0, max_tokens: int = 256, prompts_dir: str = "rag",
                 embedder=None, graphdb=None, max_reasks: int = 0, on_empty: str = "answer") -> None:
        self.on_empty = check_on_empty("RAG", on_empty)
        if top_k is None and tau is None:
            raise ValueError("RAG: set top_k (Eq. 6) or tau (Eq. 5); both are null")
        self.kg, self.retriever, self.llm = kg, retriever, llm
        self.hops, self.max_hops, self.gold_hops = hops, max_hops, bool(gold_hops)
        self.top_k, self.tau, self.max_candidates = top_k, tau, max_candidates
        self.temperature, self.max_tokens = temperature, max_tokens
        self.template = load_prompt(prompts_dir, "answer")
        self.embedder = embedder if embedder is not None else Embedder()
        self.reask = ReaskPolicy(max_reasks)

    def prepare(self, examples, done=()) -> None:
        """Before the first question: open (or build once) the KG's triple embedding store, which
        :meth:`rank_triples` then reads (``embedder.kg_store: null``: none, texts are embedded)."""
        fn = getattr(self.embedder, "kg_store", None)
        self._store = fn(self.kg, "triple") if fn is not None else None

    # ------------------------------------------------------------------ retrieval (no LLM)
    def retrieve(self, example: Example) -> tuple[LinkResult, Subgraph | None, int]:
        """Link and run the k-hop retrieval: ``(link, subgraph or None, hops used)``."""
        link = link_example(self.kg, example)
        k = self.hop_budget(example)
        if not link.ids:
            return link, None, k
        return link, self.retriever.retrieve(link.ids, k), k

    def retrieval_plan(self, example: Example) -> list[tuple[list[int], int]]:
        """The k-hop query :meth:`retrieve` makes (for batched prefetching by the run loop)."""
        link = link_example(self.kg, example)
        return [(list(link.ids), self.hop_budget(example))] if link.ids else []

    def candidate_triples(self, sub: Subgraph) -> tuple[np.ndarray, bool]:
        """``(m, 3)`` int32 distinct activated triples, hop order kept, capped at
        ``max_candidates``; and whether the cap cut any."""
        if not sub.triples_by_hop:
            return np.zeros((0, 3), dtype=np.int32), False
        # nearest hop first; within a hop in canonical order (not the KG's storage order), so the
        # max_candidates cut and the rank ties are the same on every KG backend
        allt = np.concatenate([canonical_triples(self.kg, np.asarray(h).reshape(-1, 3)) for h in sub.triples_by_hop],
                              axis=0).reshape(-1, 3)
        _, first = np.unique(allt, axis=0, return_index=True)
        allt = allt[np.sort(first)]
        cut = len(allt) > self.max_candidates
        return allt[: self.max_candidates].astype(np.int32), cut

    def rank(self, question: str, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Eq. 4–6: ``(kept indices into texts, their cosine scores)``, best first; ties keep
        the lower index (:func:`kgreason.ranking.ranked`: recorded, and served to a replay)."""
        if not texts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return ranked(SITE, texts, lambda: (self.embedder.encode([question]) @ self.embedder.encode(texts).T)[0],
                      k=self.top_k, tau=self.tau)

    def rank_triples(self, question: str, triples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Eq. 4–6 over ``(m, 3)`` candidate triples: ``(kept indices, cosines)``, best first, ties
        to the lower index. With the KG's triple store, a gather of the candidates' rows and one
        matrix-vector product against the question (the only text embedded); without it, or for
        a triple the store lacks, or before :meth:`prepare`, the verbalised texts are embedded.
        The ranking goes through :func:`kgreason.ranking.ranked` (site ``rag.cosine_filter``, the
        candidates keyed by their verbalised text): recorded in the row, and a replay that serves
        recorded rankings computes no score at all."""
        t0 = time.perf_counter()
        store = getattr(self, "_store", None)
        texts = [self.kg.verbalise(tr) for tr in triples]

        def scores() -> np.ndarray:
            if store is None or len(triples) == 0:
                return (self.embedder.encode([question]) @ self.embedder.encode(texts).T)[0]
            rows = store.triple_rows(self.kg, triples)
            q = self.embedder.encode([question])[0]
            miss = rows < 0
            sims = np.empty(len(rows), dtype=np.float32)
            sims[~miss] = store.scores(q, rows[~miss])
            if miss.any():  # not one of the KG's triples: embedded (and text-cached) here
                sims[miss] = self.embedder.encode([texts[i] for i in np.flatnonzero(miss)]) @ q
            return sims

        if not texts:
            order, sims = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        else:
            order, sims = ranked(SITE, texts, scores, k=self.top_k, tau=self.tau)
        note = getattr(self.embedder, "note_rank", None)
        if note is not None:
            note(time.perf_counter() - t0, len(triples))
        return order, sims

    # ------------------------------------------------------------------ answer
    def answer(self, example: Example) -> Prediction:
        t = Trace()
        link, sub, k = self.retrieve(example)
        t.add("link", "topic_entities", linked=link.linked, failed=link.failed)
        if sub is None:
            answers = answer_without_retrieval(self.llm, t, example.question, self.on_empty)
            return t.finish(example, answers, retrieved=[], search_space=0, link_failed=True,
                            retrieval_empty=True, llm_calls=sum(1 for st in t.steps if st.kind == "llm"))
        t.retrieval("khop", sub, self.kg)
        triples, cut = self.candidate_triples(sub)
        order, scores = self.rank_triples(example.question, triples)
        kept = [self.kg.verbalise(triples[i]) for i in order]
        t.add("rank", "cosine_filter", top_k=self.top_k, tau=self.tau, candidates=len(triples),
              candidates_truncated=cut, kept=[(x, round(float(s), 4)) for x, s in zip(kept, scores)])
        if kept:
            req = ChatRequest.of(render(self.template, question=example.question, facts="\n".join(kept)),
                                 temperature=self.temperature, max_tokens=self.max_tokens)
            answers = self.ask(t, "answer", req, parse_answers).value or []
        else:  # nothing retrieved: the question alone, as IO
            answers = answer_without_retrieval(self.llm, t, example.question, self.on_empty)
        reached = self.retriever.answer_set(sub)
        in_prompt = sorted({int(x) for i in order for x in (triples[i][0], triples[i][2])})
        return t.finish(
            example, answers,
            retrieved=[self.kg.entity_label(int(e)) for e in reached],
            retrieved_in_prompt=[self.kg.entity_label(e) for e in in_prompt],
            search_space=int(len(triples)), kept=len(kept), hops_used=k,
            llm_calls=sum(1 for st in t.steps if st.kind == "llm"), retrieval_empty=not kept,
        )
