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
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from kgreason.kg.linking import link_example
from kgreason.llm.parsing import ParseResult, parse_scores, parse_yes_no
from kgreason.reasoners.base import Trace, load_prompt, render
from kgreason.reasoners.cot import parse_answers
from kgreason.retrieval.dense import LazyEmbedder
from kgreason.types import ChatRequest, Example, Prediction

_TOKEN = re.compile(r"[a-z0-9]+")
BACKWARD = " (backward)"


def parse_candidate_scores(text: str, names: Sequence[str]) -> ParseResult:
    """One score in [0, 1] per candidate name.

    Name-keyed replies (``"film.film (backward): 0.8"``, ToG's ``"{name (Score: 0.8)}"``, or a
    JSON object) are read by name, unmentioned candidates scoring 0; otherwise the first
    ``len(names)`` numbers are taken in order (:func:`parse_scores`).

    >>> parse_candidate_scores("film.film (backward): 0.9; film.film: 0.2", ["film.film", "film.film (backward)"]).value
    [0.2, 0.9]
    """
    found: dict[int, float] = {}
    for i, name in enumerate(names):
        pat = re.compile(r"(?<![\w.~])" + re.escape(name) + r"\"?\s*(?:\(\s*score\s*[:=]?\s*|[:=]\s*)([-+]?\d*\.?\d+)", re.I)
        m = pat.search(text)
        if m:
            found[i] = min(1.0, max(0.0, float(m.group(1))))
    if found:
        return ParseResult(True, [found.get(i, 0.0) for i in range(len(names))])
    return parse_scores(text, len(names))


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.replace("_", " ").replace(".", " ").lower())


class Pruner(LazyEmbedder):
    """Scores candidate texts against a question: ``llm`` | ``bm25`` | ``embedding``."""

    def __init__(self, backend: str, llm=None, template: str = "", embedder=None,
                 max_tokens: int = 256) -> None:
        if backend not in ("llm", "bm25", "embedding"):
            raise ValueError(f"prune={backend!r}: expected llm | bm25 | embedding")
        self.backend, self.llm, self.template = backend, llm, template
        self._embedder, self.max_tokens = embedder, max_tokens

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
        comp = self.llm.generate([req])[0]
        res = parse_candidate_scores(comp.text, names)
        t.llm(f"prune_{what}", req, comp, parsed=res.value, parse_ok=res.ok)
        return np.asarray(res.value if res.ok else [0.0] * len(names), dtype=np.float64)


def top_w(scores: np.ndarray, w: int) -> np.ndarray:
    """Indices of the ``w`` best scores, best first; ties keep the lower index."""
    return np.argsort(-scores, kind="stable")[:w]


@dataclass(frozen=True)
class _Path:
    entity: int
    chain: tuple[tuple[int, int, int, bool], ...]  # (head, rel, tail, backward) as traversed


def render_chain(kg, topic: int, chain) -> str:
    out = kg.entity_label(topic)
    for h, r, tl, back in chain:
        rel = kg.relation_names[r]
        out += f" <-[{rel}]- {kg.entity_label(h)}" if back else f" -[{rel}]-> {kg.entity_label(tl)}"
    return out


class ToG:
    """Args:
        width: beam width W (relations and entities kept per depth).
        depth: maximum depth D.
        prune: pruning backend ``llm`` | ``bm25`` | ``embedding``.
        max_entities_per_relation: neighbours followed per (entity, relation) (ToG samples 10).
        temperature, max_tokens: settings of the reasoning and answer calls.
    """

    def __init__(self, *, kg, retriever=None, llm, width: int = 3, depth: int = 3,
                 prune: str = "llm", max_entities_per_relation: int = 20, temperature: float = 0.0,
                 max_tokens: int = 256, prompts_dir: str = "tog", embedder=None) -> None:
        if width < 1 or depth < 1:
            raise ValueError(f"ToG: width and depth must be ≥ 1, got width={width}, depth={depth}")
        self.kg, self.llm = kg, llm
        self.width, self.depth = int(width), int(depth)
        self.max_per_rel = int(max_entities_per_relation)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.prompts = {s: load_prompt(prompts_dir, s) for s in ("prune", "reason", "answer")}
        self.pruner = Pruner(prune, llm, self.prompts["prune"], embedder)

    def _ask(self, t: Trace, step: str, parser, **values):
        req = ChatRequest.of(render(self.prompts[step], **values), temperature=self.temperature,
                             max_tokens=self.max_tokens)
        comp = self.llm.generate([req])[0]
        res = parser(comp.text)
        t.llm(step, req, comp, parsed=res.value, parse_ok=res.ok)
        return res

    def answer(self, example: Example) -> Prediction:
        kg, W = self.kg, self.width
        t = Trace()
        link = link_example(kg, example)
        t.add("link", "topic_entities", linked=link.linked, failed=link.failed)
        beam = [_Path(e, ()) for e in link.ids[:W]]
        topic = {p.entity: p.entity for p in beam}
        seen_triples: set[int] = set()
        retrieved: dict[int, None] = {p.entity: None for p in beam}
        beam_sizes: list[int] = []
        q = example.question
        calls0 = len(t.steps)
        depth_reached = 0
        answers: list[str] | None = None
        for d in range(1, self.depth + 1):
            if not beam:
                break
            depth_reached = d
            # 1-2. relation exploration and pruning
            cands: dict[tuple[int, bool], None] = {}
            for p in beam:
                for tid in kg.out_triples(p.entity):
                    cands[(int(kg.rels[tid]), False)] = None
                for tid in kg.in_triples(p.entity):
                    cands[(int(kg.rels[tid]), True)] = None
            # candidates in (relation name, forward first) order, not the KG's storage order, so
            # pruning ties resolve alike on the in-memory store and a SPARQL endpoint
            rel_list = sorted(cands, key=lambda rb: (kg.relation_names[rb[0]], rb[1]))
            names = [kg.relation_names[r] + (BACKWARD if b else "") for r, b in rel_list]
            # lexical / embedding backends see the property words ("directed by"): the shared
            # "film film" prefix otherwise dominates MiniLM's similarity to the question
            texts = [kg.relation_names[r].rsplit(".", 1)[-1].replace("_", " ") for r, _ in rel_list]
            sc = self.pruner.scores(q, names, texts, t, "relations")
            kept_rels = [rel_list[i] for i in top_w(sc, W)]
            t.add("prune", "relations", depth=d, candidates=len(names),
                  kept=[names[rel_list.index(k)] for k in kept_rels])
            # 3. entity exploration
            ent_paths: dict[int, _Path] = {}
            ent_text: dict[int, list[str]] = {}
            for p in beam:
                for r, back in kept_rels:
                    tids = kg.in_triples(p.entity) if back else kg.out_triples(p.entity)
                    tids = [int(x) for x in tids if kg.rels[x] == r]
                    nb_of = kg.heads if back else kg.tails  # neighbours in name (MID) order
                    tids = sorted(tids, key=lambda x: kg.entity_names[int(nb_of[x])])[: self.max_per_rel]
                    for tid in tids:
                        seen_triples.add(tid)
                        h, tl = int(kg.heads[tid]), int(kg.tails[tid])
                        nb = h if back else tl
                        if nb == p.entity:
                            continue
                        if nb not in ent_paths:
                            ent_paths[nb] = _Path(nb, p.chain + ((h, r, tl, back),))
                            topic[nb] = topic[p.entity]
                            ent_text[nb] = []
                        ent_text[nb].append(f"{kg.relation_names[r]} {kg.entity_label(nb)}")
            # 4. entity pruning
            ents = list(ent_paths)
            enames = [kg.entity_label(e) for e in ents]
            etexts = [" ".join(dict.fromkeys(ent_text[e])) for e in ents]
            ctx = "Relations followed: " + "; ".join(
                kg.relation_names[r] + (BACKWARD if b else "") for r, b in kept_rels)
            esc = self.pruner.scores(q, enames, etexts, t, "entities", context=ctx)
            beam = [ent_paths[ents[i]] for i in top_w(esc, W)]
            assert len(beam) <= W, "beam exceeded its width"
            beam_sizes.append(len(beam))
            for p in beam:
                retrieved.setdefault(p.entity, None)
            paths_txt = self._paths_text(beam, topic)
            t.add("beam", "entities", depth=d, candidates=len(ents), kept=[kg.entity_label(p.entity) for p in beam])
            # 5. reasoning: enough to answer?
            if not beam:
                break
            res = self._ask(t, "reason", parse_yes_no, question=q, paths=paths_txt)
            if (res.ok and res.value) or d == self.depth:
                answers = self._ask(t, "answer", parse_answers, question=q, paths=paths_txt).value or []
                break
        if answers is None:  # the beam emptied before D: answer from what was gathered
            answers = self._ask(t, "answer", parse_answers, question=q,
                                paths=self._paths_text(beam, topic) or "(no paths found)").value or []
        n_calls = sum(1 for s in t.steps[calls0:] if s.kind == "llm")
        return t.finish(
            example, answers, retrieved=[kg.entity_label(e) for e in retrieved],
            search_space=len(seen_triples), beam_sizes=beam_sizes, llm_calls=n_calls,
            depth_reached=depth_reached,
        )

    def _paths_text(self, beam, topic) -> str:
        return "\n".join(render_chain(self.kg, topic[p.entity], p.chain) for p in beam)
