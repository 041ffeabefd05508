"""Think-on-Graph-style iterative beam search over the KG (ToG, Sun et al. 2024; the search
ReKnoS (reknos.txt §3) is compared with and forked from). Our own code.

For depth ``d = 1..D`` with a beam of at most ``W`` entity paths (starting at the linked topic
entities):

1. **relation exploration**: gather the relations attached to the beam's tail entities in both
   directions (``rel`` = entity is head, ``rel (backward)`` = entity is tail);
2. **relation pruning** to the ``W`` best by the pruning backend;
3. **entity exploration**: follow the kept relations (at most ``max_entities_per_relation``
   neighbours each, in entity-name (MID) order; ToG samples them at random);
4. **entity pruning** to the ``W`` best entities (each keeps the first path that reached it);
5. **reasoning**: the LLM says whether the paths suffice (yes/no); yes → answer from the paths,
   no → next depth; at ``D`` answer from the paths.

Pruning backends (``prune``): ``llm`` (one call scoring all candidates, as ToG), ``bm25``
(rank_bm25 over candidate text vs question) or ``embedding`` (all-MiniLM-L6-v2 cosine). Scores
ties keep candidate order (relations by name, neighbours by MID: not the KG's storage order, so
the in-memory store and a SPARQL endpoint agree), so every backend is deterministic.

Per-example extra: ``beam_sizes`` (per depth, always ≤ W), ``retrieved`` (every entity that
entered the beam → answer_coverage), ``search_space`` (distinct triples encountered),
``llm_calls``, ``depth_reached``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from kgreason.kg.linking import link_example
from kgreason.embed import Embedder
from kgreason.llm.parsing import parse_answers, parse_candidate_scores, parse_yes_no
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, ask, load_prompt, render
from kgreason.types import ChatRequest, Example, Prediction

_TOKEN = re.compile(r"[a-z0-9]+")
BACKWARD = " (backward)"


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.replace("_", " ").replace(".", " ").lower())


class Pruner:
    """Scores candidate texts against a question: ``llm`` | ``bm25`` | ``embedding``."""

    def __init__(self, backend: str, llm=None, template: str = "", embedder=None,
                 max_tokens: int = 256) -> None:
        if backend not in ("llm", "bm25", "embedding"):
            raise ValueError(f"prune={backend!r}: expected llm | bm25 | embedding")
        self.backend, self.llm, self.template = backend, llm, template
        self.embedder = embedder if embedder is not None else Embedder()
        self.max_tokens = max_tokens
        self.reask = ReaskPolicy()

    def scores(self, question: str, names: list[str], texts: list[str], t: Trace, what: str,
               context: str = "") -> np.ndarray:
        """``(len(names),)`` float64 scores (higher = keep)."""
        if not names:
            return np.zeros(0)
        if self.backend == "bm25":
            from rank_bm25 import BM25Okapi

            bm = BM25Okapi([tokens(x) or ["_"] for x in texts])
            return np.asarray(bm.get_scores(tokens(question)), dtype=np.float64)
        if self.backend == "embedding":
            q = self.embedder.encode([question])
            m = self.embedder.encode([x.replace(".", " ").replace("_", " ") for x in texts])
            return (m @ q[0]).astype(np.float64)
        listing = "\n".join(f"{i + 1}. {n}" for i, n in enumerate(names))
        req = ChatRequest.of(render(self.template, question=question, candidates=listing, what=what,
                                    context=context), max_tokens=self.max_tokens)
        res = ask(self.llm, t, f"prune_{what}", req, lambda text: parse_candidate_scores(text, names),
                  policy=self.reask)
        return np.asarray(res.value if res.ok else [0.0] * len(names), dtype=np.float64)


def top_w(scores: np.ndarray, w: int) -> np.ndarray:
    """Indices of the ``w`` best scores, best first; ties keep the lower index."""
    return np.argsort(-scores, kind="stable")[:w]


@dataclass(frozen=True)
class _Path:
    entity: int
    chain: tuple[tuple[int, int, int, bool], ...]  # (head, rel, tail, backward) as traversed


@dataclass
class _Search:
    """The beam search's state for one question."""

    beam: list[_Path]
    topic: dict[int, int]  # entity → the topic entity its path starts from
    retrieved: dict[int, None]  # every entity that entered the beam, in order
    seen_triples: set[int] = field(default_factory=set)
    beam_sizes: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, topics) -> "_Search":
        beam = [_Path(e, ()) for e in topics]
        return cls(beam, {p.entity: p.entity for p in beam}, {p.entity: None for p in beam})


def render_chain(kg, topic: int, chain) -> str:
    out = kg.entity_label(topic)
    for h, r, tl, back in chain:
        rel = kg.relation_names[r]
        out += f" <-[{rel}]- {kg.entity_label(h)}" if back else f" -[{rel}]-> {kg.entity_label(tl)}"
    return out


class ToG(BaseReasoner):
    """Args:
        width: beam width W (relations and entities kept per depth).
        depth: maximum depth D.
        prune: pruning backend ``llm`` | ``bm25`` | ``embedding``.
        max_entities_per_relation: neighbours followed per (entity, relation) (ToG samples 10).
        temperature, max_tokens: settings of the reasoning and answer calls.
        max_reasks: re-asks on an unparseable pruning / reasoning / answer reply (kit policy;
            0 = none, as ToG).
    """

    tasks = ("kgqa",)  # preflight: the dataset tasks this reasoner answers

    def __init__(self, *, kg, retriever=None, llm, width: int = 3, depth: int = 3,
                 prune: str = "llm", max_entities_per_relation: int = 20, temperature: float = 0.0,
                 max_tokens: int = 256, prompts_dir: str = "tog", embedder=None, graphdb=None,
                 max_reasks: int = 0) -> None:
        if width < 1 or depth < 1:
            raise ValueError(f"ToG: width and depth must be ≥ 1, got width={width}, depth={depth}")
        self.kg, self.llm = kg, llm
        self.width, self.depth = int(width), int(depth)
        self.max_per_rel = int(max_entities_per_relation)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.prompts = {s: load_prompt(prompts_dir, s) for s in ("prune", "reason", "answer")}
        self.pruner = Pruner(prune, llm, self.prompts["prune"], embedder)
        self.reask = self.pruner.reask = ReaskPolicy(max_reasks)

    def _ask(self, t: Trace, step: str, parser, **values):
        req = ChatRequest.of(render(self.prompts[step], **values), temperature=self.temperature,
                             max_tokens=self.max_tokens)
        return self.ask(t, step, req, parser)

    def answer(self, example: Example) -> Prediction:
        """Link the topic entities, then per depth: relation exploration and pruning, entity
        exploration and pruning, reasoning (module docstring steps 1–5)."""
        kg, t = self.kg, Trace()
        link = link_example(kg, example)
        t.add("link", "topic_entities", linked=link.linked, failed=link.failed)
        s = _Search.start(link.ids[: self.width])
        q = example.question
        calls0 = len(t.steps)
        depth_reached = 0
        answers: list[str] | None = None
        for d in range(1, self.depth + 1):
            if not s.beam:
                break
            depth_reached = d
            kept_rels = self.prune_relations(t, q, d, self.explore_relations(s.beam))
            ent_paths, ent_text = self.explore_entities(s, kept_rels)
            paths_txt = self.prune_entities(t, q, d, s, kept_rels, ent_paths, ent_text)
            if not s.beam:
                break
            answers = self.reason(t, q, d, paths_txt)
            if answers is not None:
                break
        if answers is None:  # the beam emptied before D: answer from what was gathered
            answers = self._ask(t, "answer", parse_answers, question=q,
                                paths=self._paths_text(s.beam, s.topic) or "(no paths found)").value or []
        n_calls = sum(1 for st in t.steps[calls0:] if st.kind == "llm")
        return t.finish(
            example, answers, retrieved=[kg.entity_label(e) for e in s.retrieved],
            search_space=len(s.seen_triples), beam_sizes=s.beam_sizes, llm_calls=n_calls,
            depth_reached=depth_reached,
        )

    def explore_relations(self, beam: list[_Path]) -> list[tuple[int, bool]]:
        """Step 1, relation exploration: ``(relation, backward)`` attached to the beam's tail
        entities, in (relation name, forward first) order, not the KG's storage order, so
        pruning ties resolve alike on the in-memory store and a SPARQL endpoint."""
        kg = self.kg
        cands: dict[tuple[int, bool], None] = {}
        for p in beam:
            for tid in kg.out_triples(p.entity):
                cands[(int(kg.rels[tid]), False)] = None
            for tid in kg.in_triples(p.entity):
                cands[(int(kg.rels[tid]), True)] = None
        return sorted(cands, key=lambda rb: (kg.relation_names[rb[0]], rb[1]))

    def prune_relations(self, t: Trace, q: str, d: int, rel_list: list[tuple[int, bool]]) -> list[tuple[int, bool]]:
        """Step 2, relation pruning: the ``W`` best candidates by the pruning backend."""
        kg = self.kg
        names = [kg.relation_names[r] + (BACKWARD if b else "") for r, b in rel_list]
        # lexical / embedding backends see the property words ("directed by"): the shared
        # "film film" prefix otherwise dominates MiniLM's similarity to the question
        texts = [kg.relation_names[r].rsplit(".", 1)[-1].replace("_", " ") for r, _ in rel_list]
        sc = self.pruner.scores(q, names, texts, t, "relations")
        kept_rels = [rel_list[i] for i in top_w(sc, self.width)]
        t.add("prune", "relations", depth=d, candidates=len(names),
              kept=[names[rel_list.index(k)] for k in kept_rels])
        return kept_rels

    def explore_entities(self, s: "_Search", kept_rels: list[tuple[int, bool]]) -> tuple[dict[int, _Path], dict[int, list[str]]]:
        """Step 3, entity exploration: follow each kept relation from each beam entity (at most
        ``max_entities_per_relation`` neighbours, in name (MID) order). Returns the first path reaching
        each new entity and the ``"relation entity"`` texts the pruner scores."""
        kg = self.kg
        ent_paths: dict[int, _Path] = {}
        ent_text: dict[int, list[str]] = {}
        for p in s.beam:
            for r, back in kept_rels:
                tids = kg.in_triples(p.entity) if back else kg.out_triples(p.entity)
                tids = [int(x) for x in tids if kg.rels[x] == r]
                nb_of = kg.heads if back else kg.tails  # neighbours in name (MID) order
                tids = sorted(tids, key=lambda x: kg.entity_names[int(nb_of[x])])[: self.max_per_rel]
                for tid in tids:
                    s.seen_triples.add(tid)
                    h, tl = int(kg.heads[tid]), int(kg.tails[tid])
                    nb = h if back else tl
                    if nb == p.entity:
                        continue
                    if nb not in ent_paths:
                        ent_paths[nb] = _Path(nb, p.chain + ((h, r, tl, back),))
                        s.topic[nb] = s.topic[p.entity]
                        ent_text[nb] = []
                    ent_text[nb].append(f"{kg.relation_names[r]} {kg.entity_label(nb)}")
        return ent_paths, ent_text

    def prune_entities(self, t: Trace, q: str, d: int, s: "_Search", kept_rels: list[tuple[int, bool]],
                       ent_paths: dict[int, _Path], ent_text: dict[int, list[str]]) -> str:
        """Step 4, entity pruning: the new beam is the ``W`` best entities. Returns the beam's
        paths as text for the reasoning prompt."""
        kg, W = self.kg, self.width
        ents = list(ent_paths)
        enames = [kg.entity_label(e) for e in ents]
        etexts = [" ".join(dict.fromkeys(ent_text[e])) for e in ents]
        ctx = "Relations followed: " + "; ".join(
            kg.relation_names[r] + (BACKWARD if b else "") for r, b in kept_rels)
        esc = self.pruner.scores(q, enames, etexts, t, "entities", context=ctx)
        s.beam = [ent_paths[ents[i]] for i in top_w(esc, W)]
        assert len(s.beam) <= W, "beam exceeded its width"
        s.beam_sizes.append(len(s.beam))
        for p in s.beam:
            s.retrieved.setdefault(p.entity, None)
        paths_txt = self._paths_text(s.beam, s.topic)
        t.add("beam", "entities", depth=d, candidates=len(ents), kept=[kg.entity_label(p.entity) for p in s.beam])
        return paths_txt

    def reason(self, t: Trace, q: str, d: int, paths_txt: str) -> list[str] | None:
        """Step 5, reasoning: ask whether the paths suffice; on yes (or at depth ``D``) answer
        from them, else return None (search one level deeper)."""
        res = self._ask(t, "reason", parse_yes_no, question=q, paths=paths_txt)
        if (res.ok and res.value) or d == self.depth:
            return self._ask(t, "answer", parse_answers, question=q, paths=paths_txt).value or []
        return None

    def _paths_text(self, beam, topic) -> str:
        return "\n".join(render_chain(self.kg, topic[p.entity], p.chain) for p in beam)
