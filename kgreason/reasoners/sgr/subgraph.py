"""§3.1 Structured subgraph generation (shared/papers/sgr.txt §3.1.1–3.1.2, Eq. 1–6).

§3.1.2: "First, the language model identifies the central entities and relations in the input
question. Second, the knowledge graph is queried to obtain related entities and relations, forming
candidate subgraphs. Third, nodes and edges with low semantic relevance to the question are
filtered out." Here:

1. ``S_q = {V_q, R_q, C_q}`` (Eq. 2) from one model call before any KG read
   (:meth:`SubgraphConstruction.structure_query`). The prompt lists the KG's relation names, or,
   when the KG has more than ``max_schema_types``, the ``structure_relations`` nearest the question
   by the embedder that scores E*_q (:meth:`~SubgraphConstruction.prompt_relations`).
2. ``V_q``: the entities the model named, linked by name (:meth:`~SubgraphConstruction.link_vq`;
   ablation ``topics=dataset``: the dataset's topic entities). ``R_q ⊆ R``: each relation phrase
   mapped to KG relations by name, then by embedding similarity at or above ``rq_threshold``
   (:meth:`~SubgraphConstruction.map_relations`; ``rq_match=exact``: by name only). ``C_q``: the
   constraints as text for the later prompts.
3. The candidates: the k-hop triples around ``V_q`` whose relation is in ``R_q`` (every relation
   when ``R_q`` keeps none: the R_q fallback), and ``E*_q`` (Eq. 4–6): ``s(e_i, q) = cos(φ(e_i),
   φ(q))`` with all-MiniLM-L6-v2, every triple with ``s ≥ τ`` (Eq. 5) or the ``top_k`` best (Eq. 6).

The result is one :class:`QuestionGraph` per question; nothing per question is kept on the reasoner.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from kgreason.kg.linking import LinkResult, link_example, link_mentions
from kgreason.llm.parsing import ParseResult, parse_json
from kgreason.ranking import ranked
from kgreason.reasoners.base import Trace, canonical_triples, render
from kgreason.reasoners.sgr.common import SGRKit
from kgreason.types import Example


def _strings(x) -> list[str]:
    if isinstance(x, str):
        x = [x]
    if not isinstance(x, list):
        return []
    return [str(v).strip() for v in x if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v).strip()]


def parse_structure(text: str) -> ParseResult:
    """Parser for the Eq. 2 reply: ``{"entities": [...], "relations": [...], "constraints": [...]}``
    (a string where a list is expected is read as a one-item list)."""
    js = parse_json(text)
    if not js.ok or not isinstance(js.value, dict) or "entities" not in js.value:
        return ParseResult(False, None, 'expected JSON {"entities": [...], "relations": [...], "constraints": [...]}')
    v = js.value
    return ParseResult(True, {"entities": _strings(v.get("entities")), "relations": _strings(v.get("relations")),
                              "constraints": _strings(v.get("constraints"))})


def relation_key(name: str) -> str:
    """The normalised relation name R_q is matched on by name: lower-case, every run of characters
    other than a-z and 0-9 becomes ``_`` (``Directed by`` → ``directed_by``; the DB type
    ``film__film__directed_by`` → ``film_film_directed_by``)."""
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


@dataclass
class QuestionGraph:
    """One question's §3.1 result: ``S_q`` (Eq. 2) and ``G_q`` (Eq. 3, as ``E*_q``)."""

    example: Example
    s_q: dict | None                     # the Eq. 2 reply, None when unreadable
    link: LinkResult                     # V_q's linking
    vq_source: str                       # question | dataset
    hops: int
    rq: list[int] = field(default_factory=list)           # R_q as KG relation ids
    rq_map: list[tuple[str, list[str], str]] = field(default_factory=list)  # (phrase, KG names, how)
    constraints: str = "(none)"          # C_q as text
    sub: object = None                   # the k-hop retrieval around V_q
    estar: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int32))
    counts: dict = field(default_factory=dict)

    @property
    def topics(self) -> list[int]:
        """``V_q`` as KG entity ids."""
        return self.link.ids

    @property
    def rq_guided(self) -> bool:
        """R_q mapped and chose the candidates (no fallback to every relation)."""
        return bool(self.rq) and not self.counts.get("rq_fallback", True)

    @property
    def has_subgraph(self) -> bool:
        """``V_q`` linked and its k-hop subgraph holds a triple."""
        return self.sub is not None and any(len(h) for h in self.sub.triples_by_hop)

    def subgraph_entities(self) -> set[int]:
        return set(self.sub.entities().tolist()) if self.sub is not None else set()


class SubgraphConstruction(SGRKit):
    """§3.1: ``S_q`` from the question, ``V_q`` / ``R_q`` / ``C_q``, the candidates and ``E*_q``."""

    _rel_index: dict[str, list[int]] | None = None
    _rel_matrix: np.ndarray | None = None

    def structure_query(self, t: Trace, question: str) -> dict | None:
        """§3.1.1, Eq. 2, and §3.1.2 step 1 ("the language model identifies the central entities
        and relations in the input question"): one call, before any KG read, turns ``q`` into
        ``S_q = {V_q, R_q, C_q}`` as entity mentions, relation names/phrases and constraint
        phrases. None when the reply cannot be read (funnel stage ``s_q_parsed`` otherwise)."""
        res = self._ask(t, "structure", render(self.prompts["structure"], relations=self.prompt_relations(question),
                                               question=question), parse_structure)
        if res.ok:
            t.stage("s_q_parsed")
        return res.value if res.ok else None

    def prompt_relations(self, question: str) -> str:
        """The relation names the Eq. 2 prompt lists: every KG relation when there are at most
        ``max_schema_types``; else the ``structure_relations`` nearest the question
        (:meth:`relation_similarity`, the embedder of Eq. 4), best first, under a line saying how
        many of how many they are."""
        names = list(self.kg.relation_names)
        if len(names) <= self.max_schema_types:
            return "\n".join(names)
        # a ranking by cosine that feeds a prompt: recorded, and served back to a replay (kgreason/ranking.py)
        idx, _ = ranked("sgr.relations", names, lambda: self.relation_similarity([question])[0],
                        k=self.structure_relations)
        near = [names[i] for i in idx]
        return (f"(the {len(near)} of the knowledge graph's {len(names)} relations nearest the question)\n"
                + "\n".join(near))

    @staticmethod
    def relation_text(name: str) -> str:
        """A relation name as words: separators (``.`` ``/`` ``_`` ``|``) become spaces and a word
        repeated at once is kept once (``film.film.directed_by`` → ``film directed by``)."""
        words = [w for w in re.split(r"[^0-9A-Za-z]+", name) if w]
        return " ".join(w for i, w in enumerate(words) if i == 0 or w.lower() != words[i - 1].lower())

    @staticmethod
    def relation_tail(name: str) -> str:
        """The words of a relation name's last dotted segment, per part of a CVT path joined with
        ``|`` (``people.person.place_of_birth`` → ``place of birth``;
        ``film.actor.film|film.performance.character`` → ``film character``)."""
        return SubgraphConstruction.relation_text(" ".join(p.rsplit(".", 1)[-1] for p in name.split("|")))

    def relation_similarity(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), n_relations)`` cosine of each text to each KG relation: the larger of its
        cosine to :meth:`relation_text` and to :meth:`relation_tail` (the whole name carries the
        domain, the tail what the relation says). The relations are embedded once per reasoner;
        the KG's relation names only, never its triples."""
        if self._rel_matrix is None:
            names = list(self.kg.relation_names)
            self._rel_matrix = np.stack([self.embedder.encode([self.relation_text(r) for r in names]),
                                         self.embedder.encode([self.relation_tail(r) for r in names])])
        q = self.embedder.encode(list(texts))
        return np.max(self._rel_matrix @ q.T, axis=0).T

    def relations_by_name(self, phrase: str) -> tuple[list[int], str]:
        """KG relations a phrase names: its exact name (``exact``), else its :func:`relation_key`
        equal to the key of a relation's full name or of its last dotted segment (``name``;
        ``produced by`` → ``film.film.produced_by``; a shared segment maps to all its relations).
        ``([], "none")`` when it names none."""
        kg = self.kg
        if kg.has_relation(phrase):
            return [kg.relation_id(phrase)], "exact"
        if self._rel_index is None:
            idx: dict[str, list[int]] = {}
            for rid, name in enumerate(kg.relation_names):
                for key in {relation_key(name), relation_key(name.rsplit(".", 1)[-1])}:
                    if key:
                        idx.setdefault(key, []).append(rid)
            self._rel_index = idx
        got = list(self._rel_index.get(relation_key(phrase), []))
        return got, "name" if got else "none"

    def map_relations(self, phrases: Sequence[str]) -> tuple[list[int], list[tuple[str, list[str], str]]]:
        """``R_q ⊆ R`` (Eq. 2): each relation the model wrote, by name (:meth:`relations_by_name`),
        then (``rq_match=embedding``, the default) to the KG relations nearest it
        (:meth:`relation_similarity`), the best ``rq_per_phrase`` at or above ``rq_threshold`` (method
        ``embedding:<cos>``). ``rq_match=exact`` (ablation ``sgr_rq_exact``) stops at names.
        Returns ``(relation ids, [(phrase, matched KG names, method)])``; a phrase matching nothing
        maps to ``[]`` with method ``none``."""
        kg = self.kg
        ids: list[int] = []
        mapped: list[tuple[str, list[str], str]] = []
        todo: list[int] = []
        for ph in phrases:
            got, how = self.relations_by_name(ph)
            if not got and self.rq_match == "embedding":
                todo.append(len(mapped))
            mapped.append((ph, [kg.relation_names[i] for i in got], how))
            ids += got
        if todo:
            names = list(kg.relation_names)
            matrix: dict[str, np.ndarray] = {}

            def row(n: int) -> np.ndarray:  # every phrase's cosines, computed once, when a ranking needs them
                if "m" not in matrix:
                    matrix["m"] = self.relation_similarity([mapped[jj][0] for jj in todo])
                return matrix["m"][n]

            for n, j in enumerate(todo):
                idx, sc = ranked("sgr.rq", names, lambda n=n: row(n), k=self.rq_per_phrase, tau=self.rq_threshold,
                                 ident=[mapped[j][0], *names])
                best = [int(i) for i in idx]
                if best:
                    how = "embedding:" + ",".join(f"{s:.3f}" for s in sc)
                    mapped[j] = (mapped[j][0], [kg.relation_names[i] for i in best], how)
                    ids += best
        return list(dict.fromkeys(ids)), mapped

    def link_vq(self, t: Trace, example: Example, s_q: dict | None) -> tuple[LinkResult, str]:
        """``V_q``: the Eq. 2 entity mentions linked by name (``link_mentions``: exact id/name, then
        the normalised name / label / alias); ablation ``topics=dataset``: the dataset's linked
        topic entities. Recorded as the ``link`` step (funnel stage ``v_q_linked``)."""
        if self.topics == "question":
            link, source = link_mentions(self.kg, s_q["entities"] if s_q else []), "question"
        else:
            link, source = link_example(self.kg, example), "dataset"
        t.add("link", "topic_entities", linked=link.linked, failed=link.failed, source=source)
        if link.ids:
            t.stage("v_q_linked")
        return link, source

    def construct(self, t: Trace, example: Example, s_q: dict | None) -> QuestionGraph:
        """§3.1.2 steps 1–3 after the Eq. 2 call: ``V_q`` linked, ``R_q`` mapped, ``C_q`` kept, the
        k-hop retrieval around ``V_q`` and ``E*_q`` (:meth:`candidate_subgraph`). Stops after the
        linking when ``V_q`` is empty, and after the retrieval when it holds no triple (the
        reasoner then answers as ``on_empty`` says)."""
        link, source = self.link_vq(t, example, s_q)
        q = QuestionGraph(example, s_q, link, source, self.hop_budget(example))
        if not link.ids:
            return q
        q.rq, q.rq_map = self.map_relations(s_q["relations"]) if s_q else ([], [])
        q.constraints = "; ".join(s_q["constraints"]) if s_q and s_q["constraints"] else "(none)"
        t.add("structure", "S_q", V_q=[self._label(i) for i in q.topics], R_q=q.rq_map, C_q=q.constraints)
        q.sub = t.retrieval("khop", self.retriever.retrieve(q.topics, q.hops), self.kg)
        if q.has_subgraph:
            q.estar, q.counts = self.candidate_subgraph(t, example.question, q.sub, q.rq)
        return q

    def candidates(self, sub, rq: Sequence[int]) -> tuple[np.ndarray, bool]:
        """§3.1.2 step 2 ("the knowledge graph is queried to obtain related entities and
        relations, forming candidate subgraphs"): the triples of the k-hop expansion from
        ``V_q`` (nearest hops first, canonical order within a hop), keeping those whose relation
        is in ``R_q``. When ``R_q`` is empty or keeps no triple, every relation is kept (returned
        flag ``True``: the R_q fallback)."""
        cands = [canonical_triples(self.kg, np.asarray(tr).reshape(-1, 3)) for tr in sub.triples_by_hop]
        allt = np.concatenate(cands, axis=0) if cands else np.zeros((0, 3), dtype=np.int32)
        if len(allt):
            _, first = np.unique(allt, axis=0, return_index=True)
            allt = allt[np.sort(first)]
        if len(rq):
            keep = np.isin(allt[:, 1], np.asarray(list(rq)))
            if keep.any():
                return allt[keep], False
        return allt, True

    def subgraph(self, question: str, cands: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """§3.1.2 step 3, Eq. 4–6: ``s(e_i, q) = cos(φ(e_i), φ(q))`` for the candidates (the
        first ``max_candidate_triples`` when that cost cap is set; null = all, the paper), then
        ``E*_q = {e_i | s ≥ τ}`` (Eq. 5, every such triple) or the ``top_k`` best (Eq. 6).
        Returns ``(E*_q (k, 3) int32, their scores, number of candidates scored)``."""
        allt = np.asarray(cands).reshape(-1, 3)
        if self.max_candidate_triples is not None:
            allt = allt[: self.max_candidate_triples]
        if len(allt) == 0:
            return allt.reshape(0, 3), np.zeros(0, dtype=np.float32), 0
        texts = self._verbalise(allt)
        # Eq. 4 scores; Eq. 5 (every triple with s >= tau) or Eq. 6 (the top_k best): a ranking that
        # feeds the prompts, recorded and served back to a replay (kgreason/ranking.py)
        order, scores = ranked("sgr.estar", texts, lambda: self.embedder.similarity([question], texts)[0],
                               k=None if self.tau is not None else self.top_k, tau=self.tau)
        return allt[order], scores, len(allt)

    def candidate_subgraph(self, t: Trace, question: str, sub, rq: Sequence[int]) -> tuple[np.ndarray, dict]:
        """§3.1.2 steps 2–3: the candidates (:meth:`candidates`, guided by ``R_q``) and ``E*_q``
        (:meth:`subgraph`), recorded as the ``subgraph`` step (funnel stages ``r_q_mapped``: R_q
        chose the candidates, no fallback; ``e_star_nonempty``). Returns ``(E*_q, counts)`` where
        counts holds ``candidates_total``, ``candidates_scored``, ``candidates_truncated``
        (total > scored: the ``max_candidate_triples`` cap cut them) and ``rq_fallback``."""
        cands, fallback = self.candidates(sub, rq)
        estar, scores, n_scored = self.subgraph(question, cands)
        counts = {"candidates_total": int(len(cands)), "candidates_scored": int(n_scored),
                  "candidates_truncated": bool(len(cands) > n_scored), "rq_fallback": bool(fallback)}
        t.add("subgraph", "E*_q", **counts, kept=len(estar), tau=self.tau, top_k=self.top_k,
              top=[(self.kg.verbalise(tr), round(float(s), 4)) for tr, s in zip(estar, scores)])
        if not fallback:
            t.stage("r_q_mapped")
        if len(estar):
            t.stage("e_star_nonempty")
        return estar, counts

    def nearby_relations(self, sub) -> list[str]:
        """Sorted names of the relations in the k-hop subgraph (shown to the schema and Cypher
        prompts so the model uses the KG's own relation types)."""
        if not sub.triples_by_hop or not sum(len(x) for x in sub.triples_by_hop):
            return []
        return sorted({self.kg.relation_names[int(r)] for r in np.concatenate(sub.triples_by_hop)[:, 1]})
