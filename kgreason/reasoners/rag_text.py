"""Retrieval-only baseline of SubQRAG Table 1 ("all-MiniLM-L6-v2"): the top-k passages by cosine
(dense MiniLM) feed one answer prompt.

Passages come from ``example.corpus`` when the dataset ships them (distractor setting), else from
a run-level corpus: ``corpus: embedded`` (the embedded world's verbalised passages) or a path to
a JSONL file with ``title``/``text`` fields.
"""

from __future__ import annotations

import json
from pathlib import Path

from kgreason.embed import Embedder
from kgreason.llm.parsing import parse_answer_field
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, load_prompt, render
from kgreason.retrieval.dense import DenseTextRetriever
from kgreason.types import ChatRequest, Example, Prediction

Passage = tuple[str, str]


def load_corpus(spec: str | None, world_seed: int = 0) -> list[Passage]:
    """``(title, text)`` passages for ``spec``: ``None`` → [], ``"embedded"`` → the embedded
    world's corpus, else a JSONL path (one ``{"title", "text"}`` object per line)."""
    if not spec:
        return []
    if spec == "embedded":
        from kgreason.kg.embedded import make_world

        return list(make_world(world_seed).corpus)
    p = Path(spec)
    if not p.exists():
        raise FileNotFoundError(f"corpus {spec!r}: expected 'embedded' or a JSONL path")
    out = []
    for ln, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        if "title" not in r or "text" not in r:
            raise ValueError(f"{p}:{ln}: expected fields 'title' and 'text', got {sorted(r)}")
        out.append((str(r["title"]), str(r["text"])))
    return out


def passage_text(p: Passage) -> str:
    """What is embedded and shown for a passage: ``"title: text"`` (HippoRAG's convention)."""
    return f"{p[0]}: {p[1]}"


class PassageIndex:
    """Dense index over passages, built once per distinct passage list (cached by identity)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._last: tuple[tuple[Passage, ...], DenseTextRetriever] | None = None

    def get(self, passages: list[Passage]) -> DenseTextRetriever:
        key = tuple(passages)
        if self._last is None or self._last[0] != key:
            self._last = (key, DenseTextRetriever([passage_text(p) for p in passages], self.embedder))
        return self._last[1]


class RagText(BaseReasoner):
    """Args:
        top_k: passages given to the generator (Table 1 "Retrieval-only").
        corpus: ``embedded`` | JSONL path | null (then every example must carry ``corpus``).
        embedder: the run's :class:`~kgreason.embed.Embedder` (None: a private one).
        max_tokens: answer length cap.
        max_reasks: re-asks on an empty answer (kit policy; 0 = none).
    """

    tasks = ("multihop",)  # preflight: the dataset tasks this reasoner answers

    def __init__(self, *, kg=None, retriever=None, llm, top_k: int = 5, corpus: str | None = "embedded",
                 world_seed: int = 0, max_tokens: int = 64, max_reasks: int = 0, embedder=None,
                 graphdb=None) -> None:
        self.llm, self.top_k, self.max_tokens = llm, top_k, max_tokens
        self.reask = ReaskPolicy(max_reasks)
        self.embedder = embedder if embedder is not None else Embedder()
        self._corpus_spec, self._world_seed = corpus, world_seed
        self._corpus: list[Passage] | None = None
        self.index = PassageIndex(self.embedder)
        self.prompt = load_prompt("rag_text", "answer")

    def passages_for(self, example: Example) -> list[Passage]:
        if example.corpus:
            return [tuple(p) for p in example.corpus]  # type: ignore[misc]
        if self._corpus is None:
            self._corpus = load_corpus(self._corpus_spec, self._world_seed)
        if not self._corpus:
            raise ValueError(f"example {example.id} has no corpus and reasoner.corpus is unset")
        return self._corpus

    def answer(self, example: Example) -> Prediction:
        t = Trace()
        passages = self.passages_for(example)
        hits = self.index.get(passages).search([example.question], self.top_k)[0]
        top = [passages[h.id] for h in hits]
        t.add("retrieve", "dense_passages", titles=[p[0] for p in top], scores=[h.score for h in hits],
              pool=len(passages))
        req = ChatRequest.of(render(self.prompt, question=example.question,
                                    passages="\n".join(f"[{i}] {passage_text(p)}" for i, p in enumerate(top))),
                             max_tokens=self.max_tokens)
        ans = self.ask(t, "answer", req, parse_answer_field).value
        return t.finish(example, [ans] if ans else [], retrieved_passages=[p[0] for p in top])
