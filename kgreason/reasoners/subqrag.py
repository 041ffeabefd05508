"""SubQRAG (shared/papers/subqrag.txt): sub-question driven dynamic graph RAG.

Per question (Fig. 1):

1. **Decomposition** (§2.2.1): one LLM call → an ordered JSON list of sub-questions
   ``q_1..q_n``; later ones refer to earlier answers as ``#1``, ``#2`` (as in Fig. 1).
2. **Rewriting** (§2.2.2, Eq. 2): ``q'_i = Rewrite(q_i, A_<i)``. Placeholders ``#j`` are replaced
   by ``a_j``; a sub-question that has no placeholder but follows answered ones goes through one
   LLM rewrite call (``llm_rewrite``) that injects the earlier answers.
3. **Triple retrieval** (§2.3, Eq. 3): ``T_sub = top-k cos(f(q'_i), f((h,r,t)))`` over the
   verbalised triples of the working KG (MiniLM). The generator answers from ``T_sub`` and names
   the triples it used (``T_used_i``, by index, JSON) and whether they sufficed. The paper
   (§2.3) leaves that judgement to the generator, and so does the default
   (``require_grounded=false``). The ablation ``subqrag_require_grounded`` also needs a
   "sufficient" answer to be named by a triple it used (:func:`answer_grounded`): a 1.5B
   generator called every sub-question sufficient, answering with relation names and its own
   knowledge, so the corpus fallback never ran (docs/subqrag.md; chosen on 3 validation questions).
4. **Dynamic graph update** (§2.3, Eq. 4, ``T*_new = Extract(D)``): when they do not suffice,
   the top passages (cosine) answer the sub-question. Every one of them (``D``; §2.3: "we
   retrieve relevant documents and generate the answer based on their context. From these
   documents, new triples ... are extracted"; the ablation ``subqrag_extract_top2`` keeps the
   first ``extract_passages``) goes, with the sub-question, to one question-guided extraction call
   (prompts/subqrag/update_extract.txt), so it can state what the generic offline pass missed.
   Its triples are validated with the offline rule (well-formed, head and tail mentioned in one
   read passage), de-duplicated against G and the new ones written into G (embedded for Eq. 3)
   with their passage as provenance; ``extra["triples_written"]`` counts them. Later
   sub-questions retrieve them; with ``update_scope="run"`` (the default, §2.3 "continually
   update the pre-constructed KG") later questions too, in dataset order (workers must be 1 and
   a resume must keep a prefix of the dataset, else it is refused); ``update_scope="question"``
   removes a question's writes when it is answered. ``T_used_i``: the ``top_k`` of the read
   passages' triples (their offline extraction, read from the index, and the guided one) by Eq.
   3's cosine to the sub-question, new to G or not (``fallback_memory="eq3"``; ablation
   ``subqrag_memory_answer_named``: those that contain the sub-answer).
5. **Answer generation** (§2.4, Eq. 5): graph memory ``T_used = ∪_i T_used_i`` + the original
   question → final answer. Nothing else reaches this prompt (no sub-question answers).

Before the first question (:meth:`SubQRAG.prepare`, called once by the run loop):
**offline indexing** (§2.1, Eq. 1) of the run's whole passage pool (the HippoRAG 2 protocol of
§3.1: the dataset's corpus file and the pooled paragraphs of every sampled question,
:func:`~kgreason.reasoners.rag_text.dataset_pool`) into one corpus-level KG, cached on disk by
corpus, model and prompt (:func:`~kgreason.reasoners.subqrag_index.index_corpus`) and counted as
``llm/index/*``. A resumed run rebuilds the same state: the cached index, then the write-backs
of the examples already answered, replayed in dataset order from their rows (``write_back``).

Funnel (``SubQRAG.funnel``, ``extra["funnel"]``, ``funnel/*`` in metrics.json; docs/subqrag.md),
in the method's order:

* ``decomposed``: the decomposition reply (§2.2.1) parsed into two or more sub-questions (an
  unusable reply, or one sub-question, leaves the question whole);
* ``rewritten``: a later sub-question was rewritten with an earlier answer (Eq. 2: a ``#j``
  filled in, or the rewrite call changed it);
* ``graph_answered``: at least one sub-question was answered from Eq. 3's triples (the
  generator called them sufficient): a hit in the graph;
* ``fell_back``: at least one sub-question fell back to the corpus (§2.3);
* ``graph_written``: Eq. 4 wrote at least one new triple into G;
* ``memory_nonempty``: the graph memory T_used of the final prompt (Eq. 5) holds a triple.

The per-question counts behind them are in ``extra``: ``subquestions``, ``rewritten``,
``triples_written`` and each sub-question's ``source`` in the trace.

Ablations (Table 2): ``decomposition=False`` (the question is its own single sub-question),
``rewriting=False`` (sub-questions are used verbatim, placeholders left in), ``update=False``
(the passage fallback still answers, but no triple is read, extracted or written back, so the
passage answer reaches the final prompt through no triple; ``triples_written`` is 0), ``top_k``.
"""

from __future__ import annotations

import logging
import re
import traceback
from typing import Any

from kgreason import ranking
from kgreason.embed import Embedder
from kgreason.llm.parsing import ParseResult, parse_answer_field, parse_first_line, parse_list, parse_triple_answer
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, load_prompt, load_schema, render
from kgreason.reasoners.rag_text import PassageIndex, dataset_pool, passage_text
from kgreason.reasoners.subqrag_index import (Triple, guided_extraction_request, guided_triple_parser,
                                              normalise_text, triple_key)
from kgreason.retrieval.base import Hit
from kgreason.retrieval.dense import DenseTextRetriever
from kgreason.types import ChatRequest, Example, Prediction

_PLACEHOLDER = re.compile(r"#(\d+)")
log = logging.getLogger(__name__)


def passage_rows(pool: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``(id, title, text)`` for :func:`index_corpus`: the id is the title, made unique with
    ``" [n]"`` when two passages share a title."""
    seen: dict[str, int] = {}
    rows = []
    for title, text in pool:
        n = seen[title] = seen.get(title, 0) + 1
        rows.append((title if n == 1 else f"{title} [{n}]", title, text))
    return rows


_YES_NO = {"yes", "no"}


def _words(x: str) -> str:
    """``" a b "``: lower-cased words with punctuation dropped, padded for whole-word ``in``."""
    return " " + " ".join(re.sub(r"[^\w ]+", " ", x.casefold()).split()) + " "


def answer_grounded(answer: str, triples: list[Triple]) -> bool:
    """Whether ``answer`` is named by the head or tail of one of ``triples`` (case-insensitive,
    either string inside the other); a yes/no answer needs at least one triple. A relation name
    or an entity absent from the triples is not grounded."""
    a = _words(answer)
    if not a.strip() or not triples:
        return False
    if a.strip() in _YES_NO:
        return True
    for h, _, t in triples:
        for e in (_words(h), _words(t)):
            if e.strip() and (e in a or a in e):
                return True
    return False


FALLBACK_MEMORY = ("eq3", "answer_named")  # SubQRAG(fallback_memory=...): T_used_i after a fallback
UPDATE_SCOPES = ("run", "question")  # SubQRAG(update_scope=...): which questions see a write-back


def verbalise(t: Triple) -> str:
    """``"head | relation | tail"``, relation ids like ``film.film.directed_by`` shortened to
    ``directed by`` so the embedding sees words."""
    r = t[1].rsplit(".", 1)[-1].replace("_", " ")
    return f"{t[0]} | {r} | {t[2]}"


def substitute(subq: str, answers: list[str]) -> str:
    """Replace ``#j`` (1-based) by the j-th earlier answer; unknown indices are left as is."""
    def rep(m: re.Match) -> str:
        j = int(m.group(1)) - 1
        return answers[j] if 0 <= j < len(answers) and answers[j] else m.group(0)

    return _PLACEHOLDER.sub(rep, subq)


class WorkingGraph:
    """The reasoner's triple store for the run: string triples + provenance + a dense index over
    their verbalisations. Starts from the injected KG; grows by write-back (Eq. 4)."""

    def __init__(self, triples: list[Triple], embedder: Embedder, provenance: dict | None = None) -> None:
        self.triples: list[Triple] = []
        self.keys: dict[tuple[str, str, str], int] = {}  # de-duplication key -> triple id
        self.provenance: dict[int, list[str]] = {}
        for t in triples:
            k = triple_key(t)
            if k not in self.keys:
                self.keys[k] = len(self.triples)
                self.triples.append(t)
        for i, t in enumerate(self.triples):
            self.provenance[i] = list((provenance or {}).get(t, ["kg"]))
        self.index = DenseTextRetriever([verbalise(t) for t in self.triples], embedder)

    def __len__(self) -> int:
        return len(self.triples)

    def __contains__(self, t: Triple) -> bool:
        return triple_key(t) in self.keys

    def id_of(self, t: Triple) -> int | None:
        """The id of the graph's triple with ``t``'s de-duplication key (None when absent)."""
        return self.keys.get(triple_key(t))

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Eq. 3: the ``k`` triples of the graph with the highest cosine to ``query``, best first
        (ties: the earlier triple), through :func:`kgreason.ranking.ranked` (site ``subqrag.triples``)."""
        if not self.triples:
            return []
        keys = self.index.texts
        order, scores = ranking.ranked(
            "subqrag.triples", keys, lambda: (self.index.embedder.encode([query]) @ self.index.matrix.T)[0], k=k)
        return [(int(i), float(s)) for i, s in zip(order, scores)]

    def rank(self, query: str, ids: list[int], k: int) -> list[int]:
        """Eq. 3's score restricted to ``ids``: the ``k`` of them with the highest cosine to
        ``query``, best first (ties: the earlier in ``ids``; site ``subqrag.memory``)."""
        if not ids or k <= 0:
            return []
        keys = [self.index.texts[i] for i in ids]
        order, _ = ranking.ranked(
            "subqrag.memory", keys, lambda: (self.index.embedder.encode([query]) @ self.index.matrix[ids].T)[0], k=k)
        return [ids[int(j)] for j in order]

    def add(self, triples: list[Triple], source: str) -> list[int]:
        """Write back new triples (duplicates skipped); returns the ids of those added."""
        new: list[int] = []
        for t in triples:
            k = triple_key(t)
            if k in self.keys:
                continue
            self.keys[k] = len(self.triples)
            self.triples.append(t)
            new.append(len(self.triples) - 1)
            self.provenance[new[-1]] = [source]
        self.index.add([verbalise(self.triples[i]) for i in new])
        return new

    def truncate(self, n: int) -> None:
        """Forget every triple written after the first ``n`` (``update_scope="question"``: a
        question's writes are removed once it is answered)."""
        if n >= len(self.triples):
            return
        for t in self.triples[n:]:
            del self.keys[triple_key(t)]
        for i in range(n, len(self.triples)):
            self.provenance.pop(i, None)
        del self.triples[n:]
        self.index.texts = self.index.texts[:n]
        self.index.matrix = self.index.matrix[:n]

    def to_kg(self, name: str = "subqrag_working"):
        from kgreason.kg.store import KG

        return KG.from_triples(self.triples, name=name)


class SubQRAG(BaseReasoner):
    """Args:
        top_k: triples retrieved per sub-question (Eq. 3; paper: 5).
        passage_top_k: passages used by the corpus fallback (§2.3).
        extract_passages: how many of those passages (``D`` of Eq. 4) go to the question-guided
            extraction, and give their offline-index triples to the memory. None (default,
            §2.3: the documents the answer was generated from) = every passage read; an int
            keeps the first that many (ablation ``subqrag_extract_top2``: 2, a shorter call).
        decomposition / rewriting / update: Table 2 ablation switches.
        update_scope: which questions see a write-back (Eq. 4). ``run`` (default; §2.3 "continually
            update the pre-constructed KG"): every later sub-question and question, in dataset
            order; a question's result then depends on the questions before it, so examples run
            one at a time and a resume must keep a prefix of the dataset (refused otherwise).
            ``question``: the question's later sub-questions only (its writes are removed after it).
        llm_rewrite: rewrite placeholder-free dependent sub-questions with an LLM call (Eq. 2).
        max_subquestions: cap on the decomposition length.
        corpus: the passage pool: ``dataset`` (its corpus file + every question's paragraphs) |
            ``embedded`` | JSONL path (:func:`~kgreason.reasoners.rag_text.dataset_pool`).
        validate: keep only extracted triples whose head and tail occur in the passage.
        embedder: the run's :class:`~kgreason.embed.Embedder` (None: a private one).
        max_tokens: reply cap of each per-question call; the question-guided extraction (Eq. 4)
            gets twice it.
        index_max_tokens: reply cap of each offline index extraction (§2.1, default 512); it is
            part of the index cache's key.
        kg_source: where the working graph starts. ``injected``: the injected ``kg`` (the
            embedded world). ``index``: the whole pool indexed offline with the LLM in
            :meth:`prepare` (§2.1, :func:`kgreason.reasoners.subqrag_index.index_corpus`,
            resumable, cached by corpus hash under ``index_dir``). ``auto``: ``index`` when the
            pool is the dataset's own, else ``injected``.
        index_dir: root of the offline index cache.
        max_reasks: re-asks on an unparseable reply (kit policy; 0 = none).
        require_grounded: false (default, §2.3): sufficiency is the generator's judgement alone;
            true (ablation ``subqrag_require_grounded``): a "sufficient" triple answer also needs
            a used triple that names it (:func:`answer_grounded`).
        fallback_memory: which of the fallback passages' triples are ``T_used_i`` (§2.3 does not
            say). ``eq3`` (default): the ``top_k`` of them by Eq. 3's cosine to the sub-question,
            the paper's one rule for choosing a sub-question's triples. ``answer_named``
            (ablation ``subqrag_memory_answer_named``): those whose head or tail contains the
            passage answer (case-insensitive), at most ``top_k``.
    """

    tasks = ("multihop",)  # preflight: the dataset tasks this reasoner answers

    thread_safe = False  # example_workers must stay 1: graph updates must reach later questions in order
    # the stages a question passes (module docstring, "Funnel"), in the method's order
    funnel = ("decomposed", "rewritten", "graph_answered", "fell_back", "graph_written", "memory_nonempty")
    # run-level figures of the graph update (kgreason/metrics): mean per question and the run's sum
    metrics = ("triples_written", "triples_written_total")

    def __init__(self, *, kg=None, retriever=None, llm, top_k: int = 5, passage_top_k: int = 3,
                 extract_passages: int | None = None, decomposition: bool = True, rewriting: bool = True,
                 update: bool = True, llm_rewrite: bool = True, max_subquestions: int = 5,
                 corpus: str | None = "dataset", world_seed: int = 0, validate: bool = True,
                 max_tokens: int = 256, index_max_tokens: int = 512, kg_source: str = "auto",
                 index_dir: str | None = ".cache/kgreason/subqrag_index", max_reasks: int = 0,
                 require_grounded: bool = False, fallback_memory: str = "eq3", update_scope: str = "run",
                 embedder=None, graphdb=None) -> None:
        if update_scope not in UPDATE_SCOPES:
            raise ValueError(f"SubQRAG: update_scope must be one of {' | '.join(UPDATE_SCOPES)}, "
                             f"got {update_scope!r}")
        if fallback_memory not in FALLBACK_MEMORY:
            raise ValueError(f"SubQRAG: fallback_memory must be one of {' | '.join(FALLBACK_MEMORY)}, "
                             f"got {fallback_memory!r}")
        if kg_source not in ("auto", "injected", "index"):
            raise ValueError(f"SubQRAG: kg_source must be auto | injected | index, got {kg_source!r}")
        if kg_source == "index" and not index_dir:
            raise ValueError("SubQRAG: kg_source=index needs index_dir")
        if kg_source == "injected" and kg is not None:
            from kgreason.kg.source import require_in_memory

            require_in_memory(kg, "SubQRAG with kg_source=injected (embeds every KG triple)")
        self.llm = llm
        if extract_passages is not None and int(extract_passages) < 1:
            raise ValueError(f"SubQRAG: extract_passages must be null (every passage read) or >= 1, "
                             f"got {extract_passages!r}")
        self.top_k, self.passage_top_k = top_k, passage_top_k
        self.extract_passages = None if extract_passages is None else int(extract_passages)
        self.decomposition, self.rewriting, self.update = decomposition, rewriting, update
        self.llm_rewrite, self.max_subquestions, self.validate = llm_rewrite, max_subquestions, validate
        self.max_tokens = max_tokens
        if int(index_max_tokens) < 1:
            raise ValueError(f"SubQRAG: index_max_tokens must be >= 1, got {index_max_tokens!r}")
        self.index_max_tokens = int(index_max_tokens)
        self.require_grounded = bool(require_grounded)
        self.fallback_memory = fallback_memory
        self.update_scope = update_scope
        self.reask = ReaskPolicy(max_reasks)
        self.embedder = embedder if embedder is not None else Embedder()
        self._corpus_spec, self._world_seed = corpus, world_seed
        self._pool: list[tuple[str, str]] | None = None  # set by prepare()
        self.passages = PassageIndex(self.embedder)
        self._kg = kg
        self.kg_source = kg_source
        self.index_dir = index_dir
        self.index_stats: dict[str, Any] = {}
        self._graph: WorkingGraph | None = None
        self._pids: list[str] = []  # pool passage ids (passage_rows), by pool position
        self._indexed: dict[str, list[Triple]] = {}  # passage id -> its offline extraction (§2.1)
        self.prompts = {s: load_prompt("subqrag", s) for s in
                        ("decompose", "rewrite", "answer_triples", "answer_passages", "final_answer")}
        # each JSON reply's form, sent with llm.structured_output=true only (rewrite's reply is free text)
        self.schemas = {s: load_schema("subqrag", s) for s in self.prompts}

    # ------------------------------------------------------------------ state
    @property
    def graph(self) -> WorkingGraph:
        if self._graph is None:
            raise RuntimeError("SubQRAG.prepare(examples) must run before answering: it builds the "
                               "corpus-level graph (subqrag.txt §2.1)")
        return self._graph

    def prepare(self, examples, done=()) -> None:
        """Once per run, before the first question: the passage pool, the working graph (offline
        index of the pool, §2.1, or the injected KG), then the write-backs of ``done`` rows."""
        self._pool, origin = dataset_pool(examples, self._corpus_spec, self._world_seed)
        if self.kg_source == "auto":
            self.kg_source = "index" if origin == "dataset" else "injected"
            # said once at start-up: with a JSONL or embedded pool, auto does not index the pool
            log.info("SubQRAG kg_source=auto -> %s: the pool is %s (%d passages); %s", self.kg_source,
                     "the dataset's own" if origin == "dataset" else repr(origin), len(self._pool),
                     "it is indexed offline before the first question (§2.1)" if self.kg_source == "index"
                     else "the working graph starts from the injected kg, the pool is not indexed "
                          "(reasoner.kg_source=index indexes it)")
        if self.kg_source == "index" and not self.index_dir:
            raise ValueError("SubQRAG: offline indexing (kg_source=index) needs reasoner.index_dir")
        self.passages.get(self._pool)
        self._pids = [pid for pid, _, _ in passage_rows(self._pool)]
        self._indexed = {}
        self._graph = self._index_graph() if self.kg_source == "index" else self._injected_graph()
        if self.update_scope != "run" or not self.update:
            return  # no question sees another's writes: nothing to replay
        done = list(done or ())
        ids = [ex.id for ex in examples]
        kept = [row.get("id") for row in done]
        if kept != ids[:len(kept)]:
            from kgreason.preflight import PreflightError  # a start-up refusal: one line, exit 2

            gap = next((i for i in ids if i not in set(kept)), "?")
            raise PreflightError(f"SubQRAG update_scope=run: this resume would answer question {gap} after later "
                             "questions wrote into the graph, so its answer would depend on the resume; "
                             "use a fresh run dir, retry_errors=false, or reasoner.update_scope=question")
        for row in done:  # resume: the same graph as an uninterrupted run at this point
            # (an error row too: a failing example keeps what it wrote back before it failed)
            for wb in (row.get("extra") or {}).get("write_back", []):
                self._graph.add([tuple(x) for x in wb["triples"]], source=wb["passage"])

    def _injected_graph(self) -> WorkingGraph:
        kg = self._kg
        triples: list[Triple] = []
        if kg is not None:
            names = [kg.entity_label(i) for i in range(kg.n_entities)]
            triples = [(names[h], kg.relation_names[r], names[t]) for h, r, t in kg.triples]
        return WorkingGraph(triples, self.embedder)

    def _index_graph(self) -> WorkingGraph:
        """§2.1 / Eq. 1: one LLM extraction per pool passage (cached, resumable), de-duplicated,
        as the run's starting graph. Calls are counted as ``llm/index/*`` (run-level)."""
        from kgreason.llm.accounting import llm_purpose
        from kgreason.reasoners.subqrag_index import index_corpus

        rows = passage_rows(self._pool or [])
        with llm_purpose("index"):
            res = index_corpus(rows, self.llm, self.index_dir, validate=self.validate,
                               max_tokens=self.index_max_tokens)
        self.index_stats = {"passages": len(rows), "triples": len(res.triples), "calls_made": res.calls_made,
                            "passages_cached": res.passages_cached, "directory": str(res.directory)}
        self._indexed = dict(res.by_passage)
        log.info("SubQRAG index: %s", self.index_stats)
        return WorkingGraph(res.triples, self.embedder, provenance=res.provenance)

    # ------------------------------------------------------------------ LLM steps
    def _call(self, t: Trace, purpose: str, prompt: str, parser, form: str | None = None) -> ParseResult:
        """One call; ``form``: the prompt whose reply schema the request carries (default ``purpose``)."""
        schema = self.schemas.get(form or purpose)
        return self.ask(t, purpose, ChatRequest.of(prompt, max_tokens=self.max_tokens, json_schema=schema), parser)

    def decompose(self, t: Trace, question: str) -> list[str]:
        """§2.2.1: ordered sub-questions (the question itself when the reply is unusable)."""
        res = self._call(t, "decompose", render(self.prompts["decompose"], question=question), parse_list)
        subs = [s for s in (res.value or []) if s] if res.ok else []
        t.stage("decomposed", len(subs[: self.max_subquestions]) >= 2)
        return subs[: self.max_subquestions] or [question]

    def rewrite(self, t: Trace, subq: str, prev: list[tuple[str, str]]) -> str:
        """§2.2.2 Eq. 2: inject earlier answers into ``subq``."""
        answers = [a for _, a in prev]
        if _PLACEHOLDER.search(subq):
            return substitute(subq, answers)
        if self.llm_rewrite and prev:
            listing = "\n".join(f"#{j + 1} {q} -> {a}" for j, (q, a) in enumerate(prev))
            out = self._call(t, "rewrite", render(self.prompts["rewrite"], previous=listing, subquestion=subq),
                             parse_first_line).value
            return out or subq
        return subq

    def answer_from_triples(self, t: Trace, subq: str) -> tuple[str, list[int], bool]:
        """Eq. 3 + generator: ``(answer, used triple ids, sufficient)``."""
        g = self.graph
        hits = g.search(subq, self.top_k)
        ids = [i for i, _ in hits]
        t.add("retrieve", "triples", query=subq, triples=[list(g.triples[i]) for i in ids],
              scores=[s for _, s in hits])
        listing = "\n".join(f"[{j}] {verbalise(g.triples[i])}" for j, i in enumerate(ids))
        res = self._call(t, "answer_triples", render(self.prompts["answer_triples"], triples=listing, subquestion=subq),
                         parse_triple_answer)
        if not res.ok:
            return "", [], False
        ans = normalise_text(res.value["answer"])
        used = []
        for j in res.value["used"]:
            if 0 <= j < len(ids) and ids[j] not in used:
                used.append(ids[j])
        sufficient = res.value["sufficient"] and bool(ans) and ans.lower() not in ("unknown", "none")
        if sufficient and self.require_grounded and not answer_grounded(ans, [g.triples[i] for i in used]):
            t.add("note", "ungrounded", answer=ans, used=[list(g.triples[i]) for i in used],
                  reason="the generator called the triples sufficient, but no triple it used names the answer")
            sufficient = False
        return ans, used, sufficient

    def fallback(self, t: Trace, subq: str, example: Example) -> tuple[str, list[int]]:
        """§2.3 corpus fallback + Eq. 4: ``(answer, T_used_i)``. The top passages answer the
        sub-question; all of them (``D``; the first ``extract_passages`` when set) give their offline-index
        triples (read, §2.1) and go with the sub-question to one guided extraction whose valid
        triples are de-duplicated against G and the new ones written into G (:meth:`update_graph`).
        ``T_used_i`` are chosen among all these triples by ``fallback_memory``, new to G or not."""
        passages = self._pool or []
        if passages:
            order, scores = ranking.ranked(
                "subqrag.passages", [p[0] for p in passages],
                lambda: (self.passages.get(passages).embedder.encode([subq]) @ self.passages.get(passages).matrix.T)[0],
                k=self.passage_top_k, ident=[passage_text(p) for p in passages])
            hits = [Hit(int(i), passage_text(passages[int(i)]), float(sc)) for i, sc in zip(order, scores)]
        else:
            hits = []
        top = [passages[h.id] for h in hits]
        t.add("retrieve", "passages", query=subq, titles=[p[0] for p in top], scores=[h.score for h in hits])
        listing = "\n".join(f"[{j}] {passage_text(p)}" for j, p in enumerate(top))
        ans = self._call(t, "answer_passages", render(self.prompts["answer_passages"], passages=listing, subquestion=subq),
                         parse_answer_field).value
        if not self.update:
            return ans, []
        g = self.graph
        read = [(self._pids[h.id], *passages[h.id]) for h in hits[: self.extract_passages]]  # None: all
        found: list[int] = []  # graph ids of the read passages' triples: offline ones, then the guided reply's
        for pid, _title, _text in read:
            if pid in self._indexed:
                t.add("update", "read", passage=pid, source="index", triples=[list(x) for x in self._indexed[pid]])
                found += [i for i in map(g.id_of, self._indexed[pid]) if i is not None]
        found += self.update_graph(t, subq, read)
        found = list(dict.fromkeys(found))
        if self.fallback_memory == "answer_named":
            a = ans.casefold()
            used = [i for i in found if a and (a in g.triples[i][0].casefold() or a in g.triples[i][2].casefold())]
            return ans, used[: self.top_k]
        return ans, g.rank(subq, found, self.top_k)

    def update_graph(self, t: Trace, subq: str, read: list[tuple[str, str, str]]) -> list[int]:
        """Eq. 4, ``T*_new = Extract(D)``: one extraction call guided by the sub-question over the
        read passages ``(id, title, text)``; its triples validated (the offline rule, per passage),
        de-duplicated against G, and the new ones written into G with their passage as provenance
        (recorded in ``extra.write_back`` for a resume and counted in ``extra.triples_written``).
        Returns the graph ids of every valid triple of the reply, new or already in G."""
        if not read:
            return []
        g = self.graph
        req = guided_extraction_request(subq, [(title, text) for _, title, text in read], self.max_tokens * 2)
        res = self.ask(t, "update_extract", req, guided_triple_parser(read, validate=self.validate))
        triples, sources, bad = res.value if res.value is not None else ([], [], 1)
        added: list[int] = []
        for x, src in zip(triples, sources):
            new = g.add([x], source=src)
            if new:
                added += new
                wb = t.extra.setdefault("write_back", [])
                if wb and wb[-1]["passage"] == src:
                    wb[-1]["triples"].append(list(x))
                else:
                    wb.append({"passage": src, "triples": [list(x)]})
        t.extra["triples_written"] = t.extra.get("triples_written", 0) + len(added)
        t.add("update", "write_back", subquestion=subq, passages=[pid for pid, _, _ in read], extracted=len(triples),
              rejected=bad, added=[list(g.triples[i]) for i in added], duplicates=len(triples) - len(added))
        return [i for i in map(g.id_of, triples) if i is not None]

    # ------------------------------------------------------------------ main
    def answer(self, example: Example) -> Prediction:
        n_before = len(self.graph)  # answering before prepare() is a programming error: it raises here
        t = Trace()
        t.extra["triples_written"] = 0  # Eq. 4 writes into G by this question
        t.extra["pool_size"] = len(self._pool or [])  # the fallback's passage pool (retrieval/pool_size)
        try:
            return self._answer(t, example)
        except Exception as e:  # noqa: BLE001 - recorded like the run loop records any failure
            # With update_scope=run the graph keeps what this attempt wrote back before it failed
            # (Eq. 4), so the error row carries those write-backs (t.extra["write_back"]) and a
            # resume replays them.
            return t.finish(example, [], error=f"{type(e).__name__}: {e}",
                            traceback=traceback.format_exc(limit=8))
        finally:
            if self.update_scope == "question":
                self.graph.truncate(n_before)  # the question's writes reach no other question

    def _answer(self, t: Trace, example: Example) -> Prediction:
        q = example.question
        subs = self.decompose(t, q) if self.decomposition else [q]
        prev: list[tuple[str, str]] = []
        memory: list[int] = []
        steps: list[dict[str, Any]] = []
        for stage in self.funnel:
            t.stage(stage, bool(t.extra.get("funnel", {}).get(stage, False)))
        for i, sq in enumerate(subs):
            rq = self.rewrite(t, sq, prev) if (self.rewriting and i > 0) else sq
            if rq != sq:
                t.stage("rewritten")
            ans, used, ok = self.answer_from_triples(t, rq)
            source = "triples"
            if ok:
                t.stage("graph_answered")
            else:
                t.stage("fell_back")
                ans, used = self.fallback(t, rq, example)
                source = "passages"
            for u in used:
                if u not in memory:
                    memory.append(u)
            prev.append((rq, ans))
            steps.append({"subquestion": sq, "rewritten": rq, "answer": ans, "source": source,
                          "used": [list(self.graph.triples[u]) for u in used]})
            t.add("subquestion", f"q{i + 1}", **steps[-1])
        g = self.graph
        # Eq. 5: the original question and the graph memory T_used, nothing else
        mem_text = "\n".join(verbalise(g.triples[u]) for u in memory) or "(empty)"
        final = self._call(t, "final_answer", render(self.prompts["final_answer"], memory=mem_text, question=q),
                           parse_answer_field).value
        mem_triples = [list(g.triples[u]) for u in memory]
        t.add("memory", "graph_memory", triples=mem_triples)
        t.stage("graph_written", bool(t.extra.get("triples_written")))
        t.stage("memory_nonempty", bool(mem_triples))
        # nothing retrieved: no triple and no passage for any sub-question (§2.3's fallback reads
        # the corpus whenever the graph falls short, so this stays False while the pool has passages)
        empty = not any(st.kind == "retrieve" and (st.data.get("triples") or st.data.get("titles")) for st in t.steps)
        return t.finish(example, [final] if final else [], retrieval_empty=empty, subquestions=[s["subquestion"] for s in steps],
                        rewritten=[s["rewritten"] for s in steps], graph_memory=mem_triples,
                        retrieved=[x for tr in mem_triples for x in (tr[0], tr[2])])
