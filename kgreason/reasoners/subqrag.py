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
4. **Dynamic graph update** (§2.3, Eq. 4): when they do not suffice, the top passages (cosine)
   answer the sub-question; ``Extract(D)`` gives the triples of the first ``extract_passages`` of
   them. A passage the offline index holds is read from it (the same extraction request, §2.1);
   a passage an earlier fallback of this run mined is read from that; only any other passage
   goes to the LLM, whose triples are validated (well-formed, head and tail mentioned in the
   passage), de-duplicated against the working KG and written back with their passage as
   provenance. The working KG lives for the whole run, so later sub-questions AND later
   questions retrieve them. ``T_used_i``: the ``top_k`` of those passages' triples by Eq. 3's
   cosine to the sub-question, whether the write-back added them or the graph already held them
   (``fallback_memory="eq3"``; ablation ``subqrag_memory_answer_named``: those that contain the
   sub-answer, the earlier rule, which real replies never matched).
5. **Answer generation** (§2.4, Eq. 5): graph memory ``T_used = ∪_i T_used_i`` + the original
   question → final answer. Nothing else reaches this prompt (no sub-question answers).

Before the first question (:meth:`SubQRAG.prepare`, called once by the run loop):
**offline indexing** (§2.1, Eq. 1) of the run's whole passage pool (the HippoRAG 2 protocol of
§3.1: the dataset's corpus file and the pooled paragraphs of every sampled question,
:func:`~kgreason.reasoners.rag_text.dataset_pool`) into one corpus-level KG, cached on disk by
corpus, model and prompt (:func:`~kgreason.reasoners.subqrag_index.index_corpus`) and counted as
``llm/index/*``. A resumed run rebuilds the same state: the cached index, then the write-backs
of the examples already answered, replayed in dataset order from their rows (``write_back``).

Ablations (Table 2): ``decomposition=False`` (the question is its own single sub-question),
``rewriting=False`` (sub-questions are used verbatim, placeholders left in), ``update=False``
(the passage fallback still answers, but no triple is read, extracted or written back, so the
passage answer reaches the final prompt through no triple), ``top_k``.
"""

from __future__ import annotations

import logging
import re
import traceback
from typing import Any

from kgreason.embed import Embedder
from kgreason.llm.parsing import ParseResult, parse_answer_field, parse_first_line, parse_list, parse_triple_answer
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, load_prompt, render
from kgreason.reasoners.rag_text import PassageIndex, dataset_pool, passage_text
from kgreason.reasoners.subqrag_index import (Triple, extraction_request, normalise_text, triple_key,
                                              triple_parser)
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
        return [(h.id, h.score) for h in self.index.search([query], k)[0]]

    def rank(self, query: str, ids: list[int], k: int) -> list[int]:
        """Eq. 3's score restricted to ``ids``: the ``k`` of them with the highest cosine to
        ``query``, best first (ties: the earlier in ``ids``)."""
        if not ids or k <= 0:
            return []
        sims = self.index.embedder.encode([query]) @ self.index.matrix[ids].T
        order = sorted(range(len(ids)), key=lambda j: (-float(sims[0, j]), j))
        return [ids[j] for j in order[:k]]

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

    def to_kg(self, name: str = "subqrag_working"):
        from kgreason.kg.store import KG

        return KG.from_triples(self.triples, name=name)


class SubQRAG(BaseReasoner):
    """Args:
        top_k: triples retrieved per sub-question (Eq. 3; paper: 5).
        passage_top_k: passages used by the corpus fallback (§2.3).
        extract_passages: how many of those passages give triples (Eq. 4): read from the offline
            index or an earlier fallback when it holds them, else extracted by the LLM.
        decomposition / rewriting / update: Table 2 ablation switches.
        llm_rewrite: rewrite placeholder-free dependent sub-questions with an LLM call (Eq. 2).
        max_subquestions: cap on the decomposition length.
        corpus: the passage pool: ``dataset`` (its corpus file + every question's paragraphs) |
            ``embedded`` | JSONL path (:func:`~kgreason.reasoners.rag_text.dataset_pool`).
        validate: keep only extracted triples whose head and tail occur in the passage.
        embedder: the run's :class:`~kgreason.embed.Embedder` (None: a private one).
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

    def __init__(self, *, kg=None, retriever=None, llm, top_k: int = 5, passage_top_k: int = 3,
                 extract_passages: int = 2, decomposition: bool = True, rewriting: bool = True,
                 update: bool = True, llm_rewrite: bool = True, max_subquestions: int = 5,
                 corpus: str | None = "dataset", world_seed: int = 0, validate: bool = True,
                 max_tokens: int = 256, kg_source: str = "auto",
                 index_dir: str | None = ".cache/kgreason/subqrag_index", max_reasks: int = 0,
                 require_grounded: bool = False, fallback_memory: str = "eq3", embedder=None,
                 graphdb=None) -> None:
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
        self.top_k, self.passage_top_k, self.extract_passages = top_k, passage_top_k, extract_passages
        self.decomposition, self.rewriting, self.update = decomposition, rewriting, update
        self.llm_rewrite, self.max_subquestions, self.validate = llm_rewrite, max_subquestions, validate
        self.max_tokens = max_tokens
        self.require_grounded = bool(require_grounded)
        self.fallback_memory = fallback_memory
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
        self._extracted: dict[str, list[Triple]] = {}  # passage id -> triples mined online this run
        self.prompts = {s: load_prompt("subqrag", s) for s in
                        ("decompose", "rewrite", "answer_triples", "answer_passages", "final_answer")}

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
        if self.kg_source == "index" and not self.index_dir:
            raise ValueError("SubQRAG: offline indexing (kg_source=index) needs reasoner.index_dir")
        self.passages.get(self._pool)
        self._pids = [pid for pid, _, _ in passage_rows(self._pool)]
        self._indexed, self._extracted = {}, {}
        self._graph = self._index_graph() if self.kg_source == "index" else self._injected_graph()
        for row in done:  # resume: the same graph as an uninterrupted run at this point
            # (an error row too: a failing example keeps what it wrote back before it failed)
            for wb in (row.get("extra") or {}).get("write_back", []):
                triples = [tuple(x) for x in wb["triples"]]
                self._extracted[wb["passage"]] = triples
                self._graph.add(triples, source=wb["passage"])

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
            res = index_corpus(rows, self.llm, self.index_dir, validate=self.validate)
        self.index_stats = {"passages": len(rows), "triples": len(res.triples), "calls_made": res.calls_made,
                            "passages_cached": res.passages_cached, "directory": str(res.directory)}
        self._indexed = dict(res.by_passage)
        log.info("SubQRAG index: %s", self.index_stats)
        return WorkingGraph(res.triples, self.embedder, provenance=res.provenance)

    # ------------------------------------------------------------------ LLM steps
    def _call(self, t: Trace, purpose: str, prompt: str, parser) -> ParseResult:
        return self.ask(t, purpose, ChatRequest.of(prompt, max_tokens=self.max_tokens), parser)

    def decompose(self, t: Trace, question: str) -> list[str]:
        """§2.2.1: ordered sub-questions (the question itself when the reply is unusable)."""
        res = self._call(t, "decompose", render(self.prompts["decompose"], question=question), parse_list)
        subs = [s for s in (res.value or []) if s] if res.ok else []
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
        """§2.3 corpus fallback + Eq. 4: ``(answer, T_used_i)``. The passages' triples come from the
        offline index, else from an earlier fallback of this run, else from one LLM extraction
        that is written back; ``T_used_i`` are chosen among them by ``fallback_memory``, new to the
        graph or not."""
        passages = self._pool or []
        hits = self.passages.get(passages).search([subq], self.passage_top_k)[0]
        top = [passages[h.id] for h in hits]
        t.add("retrieve", "passages", query=subq, titles=[p[0] for p in top], scores=[h.score for h in hits])
        listing = "\n".join(f"[{j}] {passage_text(p)}" for j, p in enumerate(top))
        ans = self._call(t, "answer_passages", render(self.prompts["answer_passages"], passages=listing, subquestion=subq),
                         parse_answer_field).value
        if not self.update:
            return ans, []
        g = self.graph
        found: list[int] = []  # graph ids of the passages' triples, in passage then reply order
        for h in hits[: self.extract_passages]:
            title, text = passages[h.id]
            pid = self._pids[h.id]
            if pid in self._indexed or pid in self._extracted:
                source = "index" if pid in self._indexed else "run"
                triples = self._indexed[pid] if source == "index" else self._extracted[pid]
                t.add("update", "read", passage=pid, source=source, triples=[list(x) for x in triples])
            else:
                res = self.ask(t, "extract", extraction_request(title, text, self.max_tokens * 2),
                               triple_parser(title, text, validate=self.validate))
                triples, bad = res.value if res.value is not None else ([], 1)
                self._extracted[pid] = list(triples)
                t.extra.setdefault("write_back", []).append({"passage": pid, "triples": [list(x) for x in triples]})
                added = g.add(triples, source=pid)
                t.add("update", "write_back", passage=pid, source="llm", extracted=len(triples), rejected=bad,
                      added=[list(g.triples[i]) for i in added],
                      duplicates=len(triples) - len(added))
            for x in triples:
                i = g.id_of(x)
                if i is not None and i not in found:
                    found.append(i)
        if self.fallback_memory == "answer_named":
            a = ans.casefold()
            used = [i for i in found if a and (a in g.triples[i][0].casefold() or a in g.triples[i][2].casefold())]
            return ans, used[: self.top_k]
        return ans, g.rank(subq, found, self.top_k)

    # ------------------------------------------------------------------ main
    def answer(self, example: Example) -> Prediction:
        self.graph  # noqa: B018 - answering before prepare() is a programming error: it raises here
        t = Trace()
        try:
            return self._answer(t, example)
        except Exception as e:  # noqa: BLE001 - recorded like the run loop records any failure
            # The run-long graph keeps what this attempt wrote back before it failed (Eq. 4), so the
            # error row carries those write-backs (t.extra["write_back"]) and a resume replays them.
            return t.finish(example, [], error=f"{type(e).__name__}: {e}",
                            traceback=traceback.format_exc(limit=8))

    def _answer(self, t: Trace, example: Example) -> Prediction:
        q = example.question
        subs = self.decompose(t, q) if self.decomposition else [q]
        prev: list[tuple[str, str]] = []
        memory: list[int] = []
        steps: list[dict[str, Any]] = []
        writes_before = len(self.graph)
        for i, sq in enumerate(subs):
            rq = self.rewrite(t, sq, prev) if (self.rewriting and i > 0) else sq
            ans, used, ok = self.answer_from_triples(t, rq)
            source = "triples"
            if not ok:
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
        # nothing retrieved: no triple and no passage for any sub-question (§2.3's fallback reads
        # the corpus whenever the graph falls short, so this stays False while the pool has passages)
        empty = not any(st.kind == "retrieve" and (st.data.get("triples") or st.data.get("titles")) for st in t.steps)
        return t.finish(example, [final] if final else [], retrieval_empty=empty, subquestions=[s["subquestion"] for s in steps],
                        rewritten=[s["rewritten"] for s in steps], graph_memory=mem_triples,
                        written_back=len(g) - writes_before, retrieved=[x for tr in mem_triples for x in (tr[0], tr[2])])
