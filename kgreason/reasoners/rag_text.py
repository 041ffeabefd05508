"""Retrieval-only baseline of SubQRAG Table 1 ("all-MiniLM-L6-v2"): the top-k passages by cosine
(dense MiniLM) feed one answer prompt.

Where passages come from (:func:`dataset_pool`, shared with SubQRAG): by default the dataset's own
pool, as in the HippoRAG 2 protocol SubQRAG §3.1 follows: the dataset's corpus file
(``dataset.corpus``, e.g. HippoRAG's ``<dataset>_corpus.json``) together with the pooled
paragraphs of every sampled question, one retrieval corpus for all questions. A real dataset
never borrows the embedded world's invented passages: a dataset with no passage at all stops
the run before the first example. ``passages: own`` is the distractor setting instead (each
question retrieves among its own paragraphs).

Nothing retrieved (``passages: own`` and a question without paragraphs): the question is
answered with the IO prompt alone (:func:`~kgreason.reasoners.io.answer_without_retrieval`) and
``extra["retrieval_empty"]`` is True; ``on_empty: abstain`` (ablation ``on_empty_abstain``)
keeps the earlier error row instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kgreason import ranking
from kgreason.embed import Embedder
from kgreason.llm.parsing import parse_answer_field
from kgreason.reasoners.io import answer_without_retrieval, check_on_empty
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, load_prompt, load_schema, render
from kgreason.retrieval.dense import DenseTextRetriever
from kgreason.types import ChatRequest, Example, Prediction

Passage = tuple[str, str]
#: the ranking site of the dense passage retrieval (kgreason/ranking.py)
SITE = "rag_text.passages"


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
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{ln}: expected one JSON object per line, got {line[:60]!r} ({e.msg})") from None
        if not isinstance(r, dict) or "title" not in r or "text" not in r:
            got = sorted(r) if isinstance(r, dict) else type(r).__name__
            raise ValueError(f"{p}:{ln}: expected fields 'title' and 'text', got {got}")
        out.append((str(r["title"]), str(r["text"])))
    return out


def pooled_passages(corpus, examples) -> list[Passage]:
    """The dataset's pool: ``corpus`` (the dataset's corpus file) then every example's own
    paragraphs, in dataset order, each distinct ``(title, text)`` once."""
    seen: set[Passage] = set()
    out: list[Passage] = []
    for p in list(corpus or []) + [q for ex in examples for q in (ex.corpus or ())]:
        key = (str(p[0]), str(p[1]))
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def dataset_pool(dataset, spec: str | None, world_seed: int = 0) -> tuple[list[Passage], str]:
    """``(passages, origin)`` for a run. ``spec`` ``dataset``/None: :func:`pooled_passages` of the
    dataset (origin ``dataset``): its corpus file and the paragraphs of its ``pool_questions``
    when the loader set them (``dataset.pool=protocol``, kgreason/data/multihop.py: every question
    of the protocol sample, not only those run), else of the questions run; the embedded-world datasets (name ``embedded-*``), which ship no
    paragraphs, use the world's verbalised corpus (origin ``embedded``). ``embedded`` or a JSONL
    path: that corpus (``embedded`` only with an embedded-world dataset). Raises when empty."""
    name = str(getattr(dataset, "name", "?"))
    is_world = name.startswith("embedded")
    if spec in (None, "dataset"):
        questions = getattr(dataset, "pool_questions", None)
        pool = pooled_passages(getattr(dataset, "corpus", None), dataset if questions is None else questions)
        if pool:
            return pool, "dataset"
        if not is_world:
            raise ValueError(f"dataset {name!r} has no passages: its examples carry no paragraphs and no "
                             "corpus file is set (dataset.corpus=<corpus.json>); nothing to retrieve from")
        spec = "embedded"
    if spec == "embedded" and not is_world:
        raise ValueError(f"reasoner.corpus=embedded holds the embedded world's generated passages; dataset "
                         f"{name!r} is not the embedded world (use corpus=dataset or a JSONL path)")
    pool = load_corpus(spec, world_seed)
    if not pool:
        raise ValueError(f"reasoner.corpus={spec!r} holds no passages")
    return pool, "embedded" if spec == "embedded" else str(spec)


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
        passages: ``pooled`` (HippoRAG 2 protocol, one corpus for every question, built by
            :meth:`prepare`) | ``own`` (each question's own paragraphs, the distractor setting).
        corpus: the pool with ``passages=pooled``: ``dataset`` | ``embedded`` | JSONL path
            (:func:`dataset_pool`).
        embedder: the run's :class:`~kgreason.embed.Embedder` (None: a private one).
        max_tokens: answer length cap.
        max_reasks: re-asks on an empty answer (kit policy; 0 = none).
        on_empty: ``answer`` (no passage retrieved → the IO prompt) | ``abstain`` (an error row).
    """

    tasks = ("multihop",)  # preflight: the dataset tasks this reasoner answers

    def __init__(self, *, kg=None, retriever=None, llm, top_k: int = 5, passages: str = "pooled",
                 corpus: str | None = "dataset", world_seed: int = 0, max_tokens: int = 64, max_reasks: int = 0,
                 embedder=None, graphdb=None, on_empty: str = "answer") -> None:
        self.on_empty = check_on_empty("RagText", on_empty)
        if passages not in ("pooled", "own"):
            raise ValueError(f"RagText: passages must be pooled | own, got {passages!r}")
        self.llm, self.top_k, self.max_tokens, self.mode = llm, top_k, max_tokens, passages
        self.reask = ReaskPolicy(max_reasks)
        self.embedder = embedder if embedder is not None else Embedder()
        self._corpus_spec, self._world_seed = corpus, world_seed
        self._pool: list[Passage] | None = None
        self.index = PassageIndex(self.embedder)
        self.prompt = load_prompt("rag_text", "answer")
        self.schema = load_schema("rag_text", "answer")  # sent with llm.structured_output=true only

    def prepare(self, examples, done=()) -> None:
        """``passages=pooled``: the run's one retrieval corpus, embedded once before the first question."""
        if self.mode == "pooled":
            self._pool, _ = dataset_pool(examples, self._corpus_spec, self._world_seed)
            if not ranking.recorded_only():  # a replay serving recorded rankings embeds no passage
                self.index.get(self._pool)

    def passages_for(self, example: Example) -> list[Passage]:
        if self.mode == "own":
            if not example.corpus:
                if self.on_empty == "answer":
                    return []
                raise ValueError(f"example {example.id} has no passages (reasoner.passages=own retrieves "
                                 "among each question's own paragraphs)")
            return [tuple(p) for p in example.corpus]  # type: ignore[misc]
        if self._pool is None:
            raise RuntimeError("RagText.prepare(examples) must run first: it builds the pooled corpus")
        return self._pool

    def search(self, question: str, passages: list[Passage]) -> tuple[np.ndarray, np.ndarray]:
        """The ``top_k`` passages by cosine to the question, best first, ties to the earlier
        passage: ``(indices, scores)``, through :func:`kgreason.ranking.ranked` (site
        ``rag_text.passages``, keyed by title, the digest over the passages' texts)."""
        return ranking.ranked(
            SITE, [p[0] for p in passages],
            lambda: (self.embedder.encode([question]) @ self.index.get(passages).matrix.T)[0],
            k=self.top_k, ident=[passage_text(p) for p in passages])

    def answer(self, example: Example) -> Prediction:
        t = Trace()
        passages = self.passages_for(example)
        if not passages:  # nothing to retrieve from: the question alone, as IO
            t.add("retrieve", "dense_passages", titles=[], scores=[], pool=0)
            answers = answer_without_retrieval(self.llm, t, example.question, self.on_empty)
            return t.finish(example, answers, retrieved_passages=[], retrieval_empty=True, pool_size=0)
        ids, scores = self.search(example.question, passages)
        top = [passages[int(i)] for i in ids]
        t.add("retrieve", "dense_passages", titles=[p[0] for p in top], scores=[float(x) for x in scores],
              pool=len(passages))
        req = ChatRequest.of(render(self.prompt, question=example.question,
                                    passages="\n".join(f"[{i}] {passage_text(p)}" for i, p in enumerate(top))),
                             max_tokens=self.max_tokens, json_schema=self.schema)
        ans = self.ask(t, "answer", req, parse_answer_field).value
        return t.finish(example, [ans] if ans else [], retrieved_passages=[p[0] for p in top],
                        retrieval_empty=not top, pool_size=len(passages))
