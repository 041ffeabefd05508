"""ReKnoS: reasoning over knowledge graphs with super-relations (reknos.txt, arXiv 2503.22166).

A super-relation is a group of relations of one field (:mod:`kgreason.reasoners.superrel`);
``"film.film"`` covers ``film.film.directed_by``, ``film.film.genre``, ... and
``"film.film (backward)"`` the same relations traversed tail → head. One search step scores
super-relations, not relations, so the number of LLM calls does not grow with the width.

For ``l = 1..L`` (Fig. 3, §3.3–3.4):

1. **candidate selection**: the super-relations attached to the current entity set ``E_{l-1}``
   in both directions (forward: entity is head; backward: entity is tail);
2. **scoring**: ONE LLM call scores all candidates in [0, 1] (3-shot prompt, §4.2);
3. **path selection**: keep the top ``N`` candidates, normalise their scores, extend every kept
   super-relation path with every kept candidate it connects to; a path's score is the sum of the
   normalised step scores along it (Eq. 8); keep the top ``N`` paths (N = width, the search
   beam), so a wider N explores more paths at every step (:meth:`ReKnoS.expand`);
4. **entity extraction** (Eq. 9): ``E_l`` = the entities reached from ``E_{l-1}`` through a
   concrete relation of the selected super-relation in its direction, i.e. only entities on a
   valid relation chain realising the path (Theorem 4.1);
5. **answer decision**: ONE LLM call — answer now (yes) or continue (no) — on the top ``K``
   kept paths.

The top-``K`` cut of Eq. 8 is the final path selection (:meth:`ReKnoS.final_paths`): the decision
and the answer prompts see the ``K`` best of the ``N`` kept paths; the search itself keeps ``N``.
After a "yes", or after step ``L``, one final call answers from the paths. So a question costs
at most ``2L + 1`` calls (L scoring + L decision + 1 answer; §4.4 "2L*+1"), asserted below.
Calls never re-ask (the kit's re-ask policy stays at ``max_reasks = 0`` here, so the 2L+1
bound holds): an unparseable score reply falls back to uniform scores (recorded as a parse
failure), an unparseable decision means "continue".

Where we follow the paper vs. the authors' ToG-derived code conventions:

* paper: one scoring call per step, top-N super-relations and top-N paths per step, top-K paths
  at the final selection, path score = sum of step scores (Eq. 8), entity extraction by valid relation chains (Eq. 9), ≤ 2L+1 calls;
* code conventions (ToG): scores are normalised per step by dividing each kept score by the sum
  of the kept scores (uniform 1/N when they sum to 0); the score reply is ToG's
  ``name (Score: s)`` / ``name: s`` list; candidates are shown with a few member relations;
  backward super-relations are written ``"<name> (backward)"``;
* ours: entity sets per path are capped at ``max_entities`` (by entity name) to bound prompt size, and
  ``max_facts`` example triples per path go into the decision/answer prompts.

Nothing linked, or no super-relation step extends a path (no candidate at step 1, or none
realised): the paper states no path for this (reknos.txt lists an empty candidate set only as a
failure signature), so the question is answered with the IO prompt alone
(:func:`~kgreason.reasoners.io.answer_without_retrieval`), ``extra["retrieval_empty"]`` True;
``on_empty: abstain`` (ablation ``on_empty_abstain``): no call, no answer.

Per-example extra: ``retrieved`` (every entity extracted along the top-``K`` selected paths of
any step, the paths the decision sees → ``answer_coverage`` = the paper's retrieval rate: the
summary's "selecting top K paths for entity extraction"), ``retrieved_n_paths`` (the same over
all ``N`` kept paths → ``answer_coverage_n_paths``, what the search reached; equal when K ≥ N),
``search_space`` (distinct fact triples encountered, Fig. 6), ``paths_per_step`` (kept paths
after each step, ≤ N), ``llm_calls``, ``steps``, ``call_budget``, ``funnel``; ``paths`` are the final top-``K``.

Funnel (``ReKnoS.funnel``, ``extra["funnel"]``, ``funnel/*`` in metrics.json; docs/reasoners.md),
in stage order, with ``l = 1..L``:

* ``topics_linked``: at least one topic entity linked;
* ``scored_step<l>``: step l's ONE scoring call was made (candidate super-relations existed) and
  its reply parsed; an unparseable reply falls back to uniform scores, so a question can go on
  (and reach the next stages) without this one;
* ``extracted_step<l>``: entity extraction (Eq. 9) realised at least one kept super-relation
  path at step l;
* ``answer_step<l>``: step l's decision said "answer now" (the search stopped there);
* ``answered_by`` (categorical): ``paths`` (the answer call over the top-K paths), ``no_paths``
  (nothing linked or no step extended a path: the IO prompt) or ``abstained`` (``on_empty: abstain``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kgreason.kg.linking import link_example
from kgreason.kg.source import prefetch
from kgreason.llm.parsing import ParseResult, parse_answers, parse_candidate_scores, parse_yes_no
from kgreason.reasoners.base import BaseReasoner, Trace, load_prompt, render
from kgreason.reasoners.io import answer_without_retrieval, check_on_empty
from kgreason.reasoners.superrel import SuperRelations, build_superrelations
from kgreason.reasoners.tog import BACKWARD
from kgreason.types import ChatRequest, Example, Prediction


@dataclass(frozen=True)
class SRPath:
    """A super-relation path and the entities that realise it.

    Attributes:
        steps: ``((group, backward), ...)`` one per step.
        score: sum of normalised step scores (Eq. 8).
        layers: ``[l]`` = ``(n_l,)`` int32 entities extracted at step ``l`` (layer 0 = topic).
        facts: ``[l-1]`` = ``(f_l,)`` int64 triple ids realising step ``l``.
    """

    steps: tuple[tuple[int, bool], ...]
    score: float
    layers: tuple[np.ndarray, ...]
    facts: tuple[np.ndarray, ...] = ()

    @property
    def entities(self) -> np.ndarray:
        return self.layers[-1]


class ReKnoS(BaseReasoner):
    """Args:
        width: N, super-relations and paths kept per step (reknos.txt Table 4).
        depth: L, maximum reasoning steps (Table 4).
        top_k_paths: K, paths of the final selection (Eq. 8) the decision and answer see.
        superrel_source: ``hierarchy`` | ``cluster`` | ``random`` (§3.2; random = ablation).
        superrel_map: optional relation→group file for ``hierarchy`` on flat schemas.
        n_clusters: clusters for ``cluster``.
        seed: seed of the clustering / random grouping.
        use_backward: also consider backward super-relations (False = forward-only ablation).
        few_shot: 3-shot scoring prompt (§4.2) or zero-shot.
        max_entities: cap on each path's entity set (the first by entity name).
        max_facts: example triples per path shown in the decision / answer prompts.
    """

    tasks = ("kgqa",)  # preflight: the dataset tasks this reasoner answers

    def __init__(self, *, kg, retriever=None, llm, width: int = 3, depth: int = 3,
                 top_k_paths: int = 3, superrel_source: str = "hierarchy",
                 superrel_map: str | None = None, n_clusters: int = 8, seed: int = 0,
                 use_backward: bool = True, few_shot: bool = True, max_entities: int = 100,
                 max_facts: int = 15, temperature: float = 0.0, max_tokens: int = 256,
                 prompts_dir: str = "reknos", embedder=None,
                 graphdb=None, on_empty: str = "answer") -> None:
        self.on_empty = check_on_empty("ReKnoS", on_empty)
        if min(width, depth, top_k_paths) < 1:
            raise ValueError(f"ReKnoS: width, depth, top_k_paths must be ≥ 1; got {width}, {depth}, {top_k_paths}")
        self.kg, self.llm = kg, llm
        self.width, self.depth, self.top_k_paths = int(width), int(depth), int(top_k_paths)
        self.use_backward, self.few_shot = bool(use_backward), bool(few_shot)
        self.max_entities, self.max_facts = int(max_entities), int(max_facts)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.superrel_source = superrel_source
        self.sr: SuperRelations = build_superrelations(
            kg, superrel_source, map_file=superrel_map, n_clusters=n_clusters, seed=seed, embedder=embedder)
        self.prompts = {s: load_prompt(prompts_dir, s) for s in ("score", "decide", "answer", "fewshot")}
        # the 3-shot examples take the form of the KG's naming: "domain.type" super-relations, or
        # flat relation names ("designer (backward)"), in a made-up domain either way (the
        # dataset's own names reach the model in the candidate list only); with the domain.type
        # examples a real model wrote "film.film (backward)" for MetaQA's candidates
        if self.few_shot and not any("." in n for n in self.sr.names):
            self.prompts["fewshot"] = load_prompt(prompts_dir, "fewshot_flat")
        # relation → group as an array lookup over triples: (m,) int32 (see _tgroup)
        self._tgroup_cache = self.sr.group_of[kg.rels]
        self.funnel = ("topics_linked",
                       *(f"{stage}_step{step}" for step in range(1, self.depth + 1)
                         for stage in ("scored", "extracted", "answer")),
                       "answered_by")

    @property
    def _tgroup(self) -> np.ndarray:
        """Group of every triple; recomputed when a SPARQL KG has fetched more facts."""
        if len(self._tgroup_cache) != self.kg.n_triples:
            self._tgroup_cache = self.sr.group_of[self.kg.rels]
        return self._tgroup_cache

    def report(self) -> dict:
        """Run-level report (written by the run as ``reasoner.json``): the super-relation
        grouping of this run's KG, with its group-size histogram."""
        return {"superrelations": self.sr.histogram(self.kg)}

    # ------------------------------------------------------------------ helpers
    @property
    def call_budget(self) -> int:
        return 2 * self.depth + 1

    def name(self, cand: tuple[int, bool]) -> str:
        g, back = cand
        return self.sr.names[g] + (BACKWARD if back else "")

    def candidates(self, entities: np.ndarray) -> list[tuple[int, bool]]:
        """Super-relations attached to ``entities``: forward (entity = head) first, then backward
        (entity = tail); each in super-relation name order (not group-id order, which follows the
        KG's relation order: the in-memory store and a SPARQL endpoint list relations differently)."""
        prefetch(self.kg, entities)  # a SPARQL KG fetches the facts it is about to scan
        mask = np.zeros(self.kg.n_entities, dtype=bool)
        mask[entities] = True

        def named(groups: np.ndarray) -> list[int]:
            return sorted((int(g) for g in np.unique(groups)), key=lambda g: self.sr.names[g])

        out = [(g, False) for g in named(self._tgroup[mask[self.kg.heads]])]
        if self.use_backward:
            out += [(g, True) for g in named(self._tgroup[mask[self.kg.tails]])]
        return out

    def extract(self, entities: np.ndarray, cand: tuple[int, bool]) -> tuple[np.ndarray, np.ndarray]:
        """Eq. 9: ``(entities (n,) int32, triple ids (f,) int64)`` reached from ``entities``
        through a relation of ``cand``'s group in its direction."""
        g, back = cand
        kg = self.kg
        prefetch(kg, entities)
        mask = np.zeros(kg.n_entities, dtype=bool)
        mask[entities] = True
        src, dst = (kg.tails, kg.heads) if back else (kg.heads, kg.tails)
        tids = np.flatnonzero(mask[src] & (self._tgroup == g))
        # entities by name and facts by (relation, source, target) name: the cap and the example
        # facts of the prompts do not depend on the KG's storage order (in memory vs SPARQL)
        names = kg.entity_names
        tids = tids[np.asarray(sorted(range(len(tids)), key=lambda k: (
            kg.relation_names[int(kg.rels[tids[k]])], names[int(src[tids[k]])], names[int(dst[tids[k]])])),
            dtype=np.int64)] if len(tids) else tids
        ents = self._by_name(np.unique(dst[tids]).astype(np.int32))
        if len(ents) > self.max_entities:
            ents = ents[: self.max_entities]
            tids = tids[np.isin(dst[tids], ents)]
        return ents, tids

    def _by_name(self, ents: np.ndarray) -> np.ndarray:
        """``ents`` ordered by entity name."""
        if len(ents) < 2:
            return ents
        return ents[np.argsort(np.asarray([self.kg.entity_names[int(e)] for e in ents]), kind="stable")]

    def _call(self, t: Trace, step: str, text: str, parser, n_calls: list[int]) -> ParseResult:
        n_calls[0] += 1
        assert n_calls[0] <= self.call_budget, f"ReKnoS exceeded its call budget 2L+1={self.call_budget}"
        req = ChatRequest.of(text, temperature=self.temperature, max_tokens=self.max_tokens)
        return self.ask(t, step, req, parser)

    def paths_text(self, paths: list[SRPath]) -> str:
        kg = self.kg
        blocks = []
        for i, p in enumerate(paths, 1):
            chain = " -> ".join(self.name(c) for c in p.steps) or "(topic entities)"
            lines = [f"Path {i} (score {p.score:.2f}): {chain}"]
            facts = [int(x) for f in p.facts for x in f[: self.max_facts]][-self.max_facts :]
            lines += [f"  {kg.verbalise(kg.triples[x])}" for x in facts]
            ents = [kg.entity_label(int(e)) for e in p.entities[:20]]
            more = f" (+{len(p.entities) - 20} more)" if len(p.entities) > 20 else ""
            lines.append(f"  Entities reached: {', '.join(ents)}{more}")
            blocks.append("\n".join(lines))
        return "\n".join(blocks) if blocks else "(no paths found)"

    # ------------------------------------------------------------------ search
    def score_step(self, t: Trace, q: str, step: int, paths: list[SRPath], n_calls: list[int]):
        """Steps 1-2 (candidate selection, ONE scoring call): ``(candidates, names, scores)``
        for the super-relations attached to the entities of every kept path, or None."""
        kg = self.kg
        current = np.unique(np.concatenate([p.entities for p in paths]))
        cands = self.candidates(current)
        if not cands:
            t.note("no_candidates", step=step)
            return None
        names = [self.name(c) for c in cands]
        listing = "\n".join(f"{i}. {n}: {self.sr.describe(kg, c[0])}" for i, (n, c) in enumerate(zip(names, cands), 1))
        ents_txt = ", ".join(kg.entity_label(int(e)) for e in self._by_name(current)[:20])
        prompt = render(self.prompts["score"], question=q, entities=ents_txt, candidates=listing,
                        examples=self.prompts["fewshot"] if self.few_shot else "")
        res = self._call(t, "score", prompt, lambda x: parse_candidate_scores(x, names), n_calls)
        t.stage(f"scored_step{step}", bool(res.ok))  # else uniform scores: the step goes on unscored
        scores = np.asarray(res.value if res.ok else [1.0] * len(cands), dtype=np.float64)
        return cands, names, scores

    def expand(self, t: Trace, step: int, paths: list[SRPath], scored, seen: set[int]) -> list[SRPath]:
        """Step 3 (path selection) and step 4 (entity extraction, Eq. 9): keep the top-N scored
        candidates, extend every kept path with every kept candidate it realises, and keep the
        top-N paths by summed normalised score (Eq. 8's score). The top-K cut is NOT applied
        here: it is the final path selection (:meth:`final_paths`)."""
        cands, names, scores = scored
        keep = np.argsort(-scores, kind="stable")[: self.width]
        total = scores[keep].sum()
        norm = scores[keep] / total if total > 0 else np.full(len(keep), 1.0 / len(keep))
        new: list[SRPath] = []
        for p in paths:
            for j, ci in enumerate(keep):
                ents, tids = self.extract(p.entities, cands[ci])
                seen.update(tids.tolist())
                if len(ents):
                    new.append(SRPath(p.steps + (cands[ci],), p.score + float(norm[j]),
                                      p.layers + (ents,), p.facts + (tids,)))
        new.sort(key=lambda p: -p.score)  # stable: ties keep generation order
        t.add("select", "paths", step=step, candidates=names, scores=scores.tolist(),
              kept=[names[i] for i in keep], normalised=norm.tolist(), n_generated=len(new),
              paths=[{"path": [self.name(c) for c in p.steps], "score": p.score,
                      "n_entities": int(len(p.entities))} for p in new[: self.width]])
        return new[: self.width]

    def final_paths(self, paths: list[SRPath]) -> list[SRPath]:
        """Eq. 8, final path selection: the top-K of the kept paths by summed score."""
        return sorted(paths, key=lambda p: -p.score)[: self.top_k_paths]

    def answer(self, example: Example) -> Prediction:
        """Link the topic entities; per step: score, expand (top-N paths), decide on the top-K
        paths; answer from the top-K paths (module docstring steps 1-5)."""
        kg, t, q = self.kg, Trace(), example.question
        link = link_example(kg, example)
        t.add("link", "topic_entities", linked=link.linked, failed=link.failed)
        topic = np.unique(np.asarray(link.ids, dtype=np.int32))
        t.stage("topics_linked", bool(len(topic)))
        paths = [SRPath((), 0.0, (topic,))] if len(topic) else []
        n_calls, seen, per_step = [0], set(), []
        reached, reached_n = [], []  # entity layers of the top-K selected / all N kept paths
        for step in range(1, self.depth + 1):
            scored = self.score_step(t, q, step, paths, n_calls) if paths else None
            new = self.expand(t, step, paths, scored, seen) if scored else []
            if scored and not new:
                t.note("no_entities", step=step)
            if paths:
                t.stage(f"extracted_step{step}", bool(new))
            if not new:
                break
            paths = new
            per_step.append(len(paths))
            top = self.final_paths(paths)
            reached.extend(ly for p in top for ly in p.layers[1:])
            reached_n.extend(ly for p in paths for ly in p.layers[1:])
            dec = self._call(t, "decide", render(self.prompts["decide"], question=q, paths=self.paths_text(top)),
                             parse_yes_no, n_calls)
            t.stage(f"answer_step{step}", bool(dec.ok and dec.value))
            if dec.ok and dec.value:
                break
        top = self.final_paths(paths)
        empty = not per_step  # nothing linked, or no step extended a path: no knowledge to show
        if empty:
            answers = answer_without_retrieval(self.llm, t, q, self.on_empty)
            n_calls[0] += sum(1 for st in t.steps if st.kind == "llm" and st.name == "answer_without_retrieval")
            top = []
            t.stage("answered_by", "abstained" if self.on_empty == "abstain" else "no_paths")
        else:
            answers = self._call(t, "answer", render(self.prompts["answer"], question=q, paths=self.paths_text(top)),
                                 parse_answers, n_calls).value or []
            t.stage("answered_by", "paths")
        def labels(layers) -> list[str]:
            ents = np.unique(np.concatenate(layers)) if layers else np.zeros(0, np.int32)
            return [kg.entity_label(int(e)) for e in ents]

        return t.finish(
            example, answers, retrieved=labels(reached), retrieved_n_paths=labels(reached_n),
            search_space=len(seen), llm_calls=n_calls[0], steps=len(per_step), call_budget=self.call_budget,
            paths_per_step=per_step, retrieval_empty=empty,
            paths=[{"path": [self.name(c) for c in p.steps], "score": round(p.score, 6),
                    "layers": [[kg.entity_names[int(e)] for e in ly] for ly in p.layers]} for p in top],
        )
