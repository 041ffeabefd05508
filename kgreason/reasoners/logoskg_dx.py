"""LogosKG two-round KG-LLM diagnosis study (logoskg.txt §6, App. A.2, A.5, A.7).

One method per paper step; :meth:`LogosKGDx.answer` calls them in this order:

==========================  =========================================================================
method                      paper step
==========================  =========================================================================
``baseline_diagnoses``      §6 / A.5: the LLM reads the note and lists diagnoses (the "baseline",
                            Fig. 6: ten diagnoses), strict JSON list with a bounded re-ask
``extract_note_entities``   A.5: clinical entities of the note linked to KG ids (``example.findings``
                            when the dataset gives them, else one LLM extraction call), linked with
                            :func:`kgreason.kg.linking.link_mentions`
``retrieve_khop``           §3.1 / §3.3: one k-hop retrieval from the note entities; its BFS shells are
                            hop distances (optionally timed per hop, ``time_hops``)
``rank_candidates``         the disease-type entities within k, in KG order (``rank: none``, the
                            paper's Round 2, which ranks nothing); ``similarity`` (max cosine to the note
                            entities, A.7's SapBERT refinement, here MiniLM) or ``path_support`` orders
                            them for the refinements and the ``dx_round2_top50`` ablation
``refine_support``          A.7 (Table 6): the KG-supported set Round 1 checks against, pruned by a
                            similarity threshold τ or to the top N
``round1_filter``           §6 Round 1 (KG filtering): keep the baseline diagnoses that link to an
                            entity at distance ≤ k (``exact_hops``: == k) from the note entities
``round2_select``           §6 Round 2 (KG enhancement), A.5: the LLM is shown *every* candidate
                            (715 in the paper's case), in as many prompts as ``round2_chars`` needs,
                            and selects; selections are merged; final = Round 1 ∪ Round 2
==========================  =========================================================================

Distance 0 counts in ``≤ k`` mode: a diagnosis the note names itself is supported. Distances
come from the injected LogosKG retriever's BFS layers (``retriever.retrieve(seeds,
k).entities_by_hop``), so the retriever must use ``within`` or ``exact`` semantics; ``walk``
layers are not distances and are rejected. Diagnosis hops are undirected (a finding and a
disease are linked whichever way the edge is stored), so ``direction: both`` is required unless
``require_both_directions=false`` (e.g. a KG that already stores both orientations). With a
refinement on, ranking is always by similarity (Round 2 then uses the same ranking).

Output: ``Prediction.answers`` is the final list (Round 2 with ``rounds: 2``, else Round 1);
``Prediction.rounds`` holds ``baseline``, ``round1`` and (``rounds: 2``) ``round2``, which the run
scores with the one diagnosis P/R/F1 (App. A.2 Eq. 11-12; ``metric/dx_<round>_f1``) and the
PDSQI judge judges. The reasoner never reads the gold diagnoses. ``Prediction.extra`` has the
Round 2 selections, candidate counts, per-hop counts and times, and the ranked candidate names
(``retrieved``, for answer coverage = the Round-1 oracle bound).
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from kgreason.kg.linking import EmbeddingLinker, link_mentions
from kgreason.kg.store import normalise_name
from kgreason.metrics.clinical import normalise_diagnosis
from kgreason.embed import Embedder
from kgreason.ranking import ranked
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, entity_ranks, load_prompt, load_schema, render
from kgreason.reasoners.dx_common import (check_hop_retriever, chunk_by_chars, diagnosis_mask, parse_name_list,
                                          within_k)
from kgreason.types import ChatRequest, Example, Prediction, Subgraph

__all__ = ["LogosKGDx", "NoteEntities", "KHop", "parse_name_list", "match_candidate"]

#: the ranking site of the candidates by similarity (kgreason/ranking.py)
SITE = "logoskg_dx.candidates"

# how a Round 2 pick is read against the listed candidates (match_candidate)
ROUND2_MATCH = ("exact", "words")


@dataclass(frozen=True)
class NoteEntities:
    """The note's clinical entities (A.5) and their KG links."""

    mentions: list[str]
    seeds: np.ndarray  # (s,) int32 linked KG ids
    names: list[str]  # their KG labels (what the similarity ranking compares against)


@dataclass(frozen=True)
class KHop:
    """One k-hop retrieval from the note entities (§3.3)."""

    sub: Subgraph | None  # None when no note entity linked
    supported: np.ndarray  # (n,) int32 ids within k (== k), seeds included in ≤ k mode
    diseases: np.ndarray  # (m,) int32 the diagnosis-type ids among them
    diseases_per_hop: list[int]
    retrieve_s: float
    hop_times_s: list[float]


def match_candidate(pick: str, shown: Sequence[str], mode: str = "exact") -> str | None:
    """The listed candidate a Round 2 pick names, or None.

    ``exact`` (default; LogosKG §6 / A.5 have the model *select* listed candidates): the pick
    counts only when it equals a listed name once both are normalised as the diagnosis metric
    normalises (:func:`~kgreason.metrics.clinical.normalise_diagnosis`: case, ASCII punctuation,
    spacing, one leading article), so ``gerd.`` is ``GERD`` and ``COPD`` names no candidate.
    ``words`` (ablation ``dx_round2_fuzzy_pick``, chosen on the validation questions): also the
    only listed name that holds all of the pick's words as whole words (``COPD`` → ``Acute COPD
    exacerbation / infection``; a small model shortens names); several such names (``angina``
    among Stable and Unstable angina) still give None."""
    if mode not in ROUND2_MATCH:
        raise ValueError(f"LogosKGDx: round2_match must be one of {' | '.join(ROUND2_MATCH)}, got {mode!r}")
    key = normalise_diagnosis(pick)
    if key:
        for n in shown:
            if normalise_diagnosis(n) == key:
                return n
    if mode == "exact":
        return None
    key = normalise_name(pick)
    for n in shown:
        if normalise_name(n) == key:
            return n
    words = set(re.findall(r"\w+", key))
    if not words:
        return None
    hits = [n for n in shown if words <= set(re.findall(r"\w+", normalise_name(n)))]
    return hits[0] if len(hits) == 1 else None


class LogosKGDx(BaseReasoner):
    """Two-round KG filtering / enhancement of LLM diagnoses.

    Args:
        hops: k, the hop radius (swept 1..5 in Fig. 3 / 5).
        rounds: 1 = final answers are Round 1; 2 = Round 1 ∪ Round 2 selections.
        exact_hops: use distance == k instead of ≤ k (not a paper setting of this study: the
            paper's "at specific hops" contexts belong to its fine-tuning experiment, App. A.8).
        disease_type: KG entity type of diagnoses (``kg.entities_of_type``).
        max_diagnoses: differential size asked of the baseline.
        max_candidates: cap on the Round 2 candidates shown (after ranking); ``None`` = all of
            them, as the paper (App. A.5). A cap is the ``dx_round2_top50`` ablation.
        max_select: cap on the merged Round 2 selections; ``None`` = no cap (the paper states none).
        round2_match: how a Round 2 pick is read (:func:`match_candidate`): ``exact`` (the paper:
            the model selects listed candidates; a pick counts when it is a listed name after the
            diagnosis metric's normalisation) | ``words`` (ablation ``dx_round2_fuzzy_pick``: also
            the one listed name holding all of the pick's words).
        round2_chars: character budget of the candidate listing in one Round 2 prompt (one
            ``- name`` line per candidate); the candidates fill as many prompts as it takes.
        rank: order of the candidates: ``none`` (KG order; the paper's Round 2 ranks nothing) |
            ``similarity`` (MiniLM cosine of candidate label vs note entities, max over entities)
            | ``path_support`` (number of note entities within k of the candidate).
        refine: ``none`` | ``threshold`` | ``top_n`` (App. A.7, Table 6).
        tau: similarity threshold for ``refine: threshold``.
        top_n: kept candidates for ``refine: top_n``.
        link_embedding: MiniLM nearest-label fallback when exact/normalised linking fails.
        link_threshold: cosine threshold of that fallback.
        use_findings: use ``example.findings`` as the note entities when present (else extract).
        max_reasks: bounded re-asks on unparseable replies.
        max_tokens: generation budget per call.
        require_both_directions: refuse a retriever whose direction is not ``both``.
        time_hops: also time the retrieval at each h = 1..k (k extra retrievals) and record the
            per-hop times (``hop_times_s``: time of hop h = t(h) - t(h-1)) in the trace and extra.
        prompts_dir: ``kgreason/reasoners/prompts/<prompts_dir>/*.txt``.
    """

    tasks = ("diagnosis",)  # preflight: the dataset tasks this reasoner answers

    def __init__(
        self, *, kg, retriever, llm=None, hops: int = 3, rounds: int = 2, exact_hops: bool = False,
        disease_type: str | Sequence[str] = ("disease", "pathology"), max_diagnoses: int = 10,
        max_candidates: int | None = None, max_select: int | None = None, round2_match: str = "exact", round2_chars: int = 24000, rank: str = "none", refine: str = "none", tau: float = 0.8,
        top_n: int = 20, link_embedding: bool = False, link_threshold: float = 0.8,
        use_findings: bool = True, max_reasks: int = 1, max_tokens: int = 512,
        require_both_directions: bool = True, time_hops: bool = False, prompts_dir: str = "logoskg_dx",
        embedder=None, graphdb=None,
    ) -> None:
        if rounds not in (1, 2):
            raise ValueError(f"logoskg_dx: rounds must be 1 or 2, got {rounds}")
        if int(hops) < 1:
            raise ValueError(f"logoskg_dx: hops must be >= 1, got {hops}")
        if rank not in ("similarity", "path_support", "none"):
            raise ValueError(f"logoskg_dx: rank must be similarity | path_support | none, got {rank!r}")
        if refine not in ("none", "threshold", "top_n"):
            raise ValueError(f"logoskg_dx: refine must be none | threshold | top_n, got {refine!r}")
        if round2_match not in ROUND2_MATCH:
            raise ValueError(f"logoskg_dx: round2_match must be {' | '.join(ROUND2_MATCH)}, got {round2_match!r}")
        check_hop_retriever(retriever, "logoskg_dx", require_both_directions)
        self.round2_match = round2_match
        self.kg, self.retriever, self.llm = kg, retriever, llm
        self.hops, self.rounds, self.exact_hops = int(hops), int(rounds), bool(exact_hops)
        self.disease_type = disease_type
        self.max_diagnoses, self.max_candidates, self.max_select = max_diagnoses, max_candidates, max_select
        if int(round2_chars) < 1:
            raise ValueError(f"logoskg_dx: round2_chars must be >= 1, got {round2_chars}")
        self.round2_chars = int(round2_chars)
        self.rank, self.refine, self.tau, self.top_n = rank, refine, float(tau), int(top_n)
        self.link_embedding, self.link_threshold = link_embedding, link_threshold
        self.use_findings, self.max_reasks, self.max_tokens = use_findings, max_reasks, max_tokens
        self.reask = ReaskPolicy(int(max_reasks))
        self.time_hops = bool(time_hops)
        self.prompts = {s: load_prompt(prompts_dir, s) for s in ("baseline", "extract", "select")}
        # the reply form of each (a JSON list of names), sent with llm.structured_output=true only
        self.schemas = {s: load_schema(prompts_dir, s) for s in self.prompts}
        self._disease_mask = diagnosis_mask(kg, disease_type, "logoskg_dx")
        self.embedder = embedder if embedder is not None else Embedder()
        # link_mentions wants nearest(); the linker embeds the KG labels once, on first use
        self.linker = EmbeddingLinker(kg, self.embedder) if link_embedding else None

    # ------------------------------------------------------------------ helpers
    def _ask(self, t: Trace, purpose: str, prompt: str) -> list[str]:
        req = ChatRequest.of(prompt, max_tokens=self.max_tokens, json_schema=self.schemas.get(purpose))
        res = self.ask(t, purpose, req, parse_name_list)
        return list(res.value or []) if res.ok else []

    def _link(self, names: Sequence[str]):
        emb = self.linker
        return link_mentions(self.kg, list(names), embedder=emb, threshold=self.link_threshold)

    def supported(self, layers: Sequence[np.ndarray], seeds: np.ndarray) -> np.ndarray:
        """Sorted int32 ids at distance ≤ k (seeds included) or == k (``exact_hops``)."""
        return within_k(seeds, layers, self.hops, self.exact_hops)

    def retrieval_plan(self, example: Example) -> list[tuple[list[int], int]]:
        """The k-hop queries :meth:`answer` makes, when they are known before any LLM call
        (structured findings, ``use_findings``); batched by the run loop. Extracted entities
        depend on the LLM, so those examples plan nothing; with ``time_hops`` nothing is
        prefetched either, so the recorded per-hop times are the engine's own."""
        if self.time_hops or not (self.use_findings and example.findings):
            return []
        seeds = list(self._link(list(example.findings)).ids)
        if not seeds:
            return []
        plan = [(seeds, self.hops)]
        if self.rank == "path_support" and self.refine == "none":
            plan += [([s], self.hops) for s in seeds]
        return plan

    # ------------------------------------------------------------------ paper steps
    def baseline_diagnoses(self, t: Trace, note: str) -> list[str]:
        """§6 / A.5: the LLM's own differential for the note (≤ ``max_diagnoses``)."""
        prompt = render(self.prompts["baseline"], note=note, max_diagnoses=self.max_diagnoses)
        return self._ask(t, "baseline", prompt)[: self.max_diagnoses]

    def extract_note_entities(self, t: Trace, example: Example) -> NoteEntities:
        """A.5: the note's clinical entities (dataset findings, else one LLM extraction call),
        linked to KG ids."""
        mentions = list(example.findings) if (self.use_findings and example.findings) else []
        if not mentions:
            mentions = self._ask(t, "extract", render(self.prompts["extract"], note=example.question))
        ent = self._link(mentions)
        t.add("link", "note_entities", linked=ent.linked, failed=ent.failed)
        return NoteEntities(mentions, np.asarray(ent.ids, dtype=np.int32),
                            [self.kg.entity_label(i) for i in ent.ids])

    def retrieve_khop(self, t: Trace, seeds: np.ndarray) -> KHop:
        """§3.1 / §3.3: one k-hop retrieval; the BFS shells are the hop distances."""
        if not len(seeds):
            empty = np.zeros(0, np.int32)
            return KHop(None, empty, empty, [], 0.0, [])
        t0 = time.perf_counter()
        sub = self.retriever.retrieve(seeds, self.hops)
        retrieve_s = time.perf_counter() - t0
        hop_times = self._time_each_hop(seeds) if self.time_hops else []
        supported = self.supported(sub.entities_by_hop, seeds)
        diseases = supported[self._disease_mask[supported]]
        per_hop = [int(self._disease_mask[np.asarray(x, dtype=np.int64)].sum()) for x in sub.entities_by_hop]
        t.retrieval("khop", sub, self.kg, retrieve_s=round(retrieve_s, 6), hop_times_s=hop_times,
                    diseases_per_hop=per_hop, n_supported=int(len(supported)),
                    n_disease_candidates=int(len(diseases)))
        return KHop(sub, supported, diseases, per_hop, retrieve_s, hop_times)

    def _time_each_hop(self, seeds: np.ndarray) -> list[float]:
        """Per-hop cost (our addition, no paper step): time of hop h = t(retrieve h hops) - t(retrieve h-1 hops)."""
        out, prev = [], 0.0
        for h in range(1, self.hops + 1):
            t1 = time.perf_counter()
            self.retriever.retrieve(seeds, h)
            cum = time.perf_counter() - t1
            out.append(round(max(cum - prev, 0.0), 6))
            prev = cum
        return out

    def rank_candidates(self, kh: KHop, ent: NoteEntities) -> tuple[np.ndarray, np.ndarray]:
        """A.7 / §6: the disease candidates within k, best first; ``(ranked ids, their scores)``.

        ``similarity``: max cosine between the candidate's label and the note entities (also
        whenever a refinement is on); ``path_support``: number of note entities within k of the
        candidate; ``none``: by the canonical entity key. Ties break by the canonical entity key (id
        string, then label), never by internal id."""
        cands = kh.diseases
        if not len(cands):
            return cands, np.zeros(0, dtype=np.float32)
        if self.rank == "similarity" or self.refine != "none":
            # canonical order first, then the stable sort by score (kgreason/ranking.py: recorded,
            # and served to a replay); the same order as ranking by (-score, canonical key)
            cands = cands[np.argsort(entity_ranks(self.kg, cands), kind="stable")]
            labels = [self.kg.entity_label(int(c)) for c in cands]
            order, scores = ranked(SITE, labels, lambda: (self.embedder.similarity(labels, ent.names).max(axis=1)
                                                          if ent.names else np.zeros(len(labels))),
                                   ident=[str(self.kg.entity_names[int(c)]) for c in cands])
            return cands[order], np.asarray(scores, dtype=np.float32)
        elif self.rank == "path_support":
            support = np.zeros(self.kg.n_entities, dtype=np.float32)
            for s in ent.seeds.tolist():
                sub = self.retriever.retrieve([s], self.hops)
                support[self.supported(sub.entities_by_hop, sub.seeds)] += 1.0
            scores = support[cands]
        else:
            scores = np.zeros(len(cands))
        scores = np.asarray(scores, dtype=np.float32)
        order = np.lexsort((entity_ranks(self.kg, cands), -scores))  # ties: canonical entity key
        return cands[order], scores[order]

    def refine_support(self, kh: KHop, ranked: np.ndarray, scores: np.ndarray) -> set[int]:
        """A.7 (Table 6): the KG-supported ids Round 1 accepts — every entity within k
        (``refine: none``), the ranked diseases with similarity ≥ τ (``threshold``), or the top
        N ranked diseases (``top_n``)."""
        if self.refine == "threshold":
            return set(ranked[scores >= self.tau].tolist())
        if self.refine == "top_n":
            return set(ranked[: self.top_n].tolist())
        return set(kh.supported.tolist())

    def round1_filter(self, t: Trace, baseline: Sequence[str], allowed: set[int]) -> tuple[list[str], set[int]]:
        """§6 Round 1 (KG filtering): the baseline diagnoses that link into ``allowed``;
        returns them and every KG id they link to (Round 2 does not re-add those)."""
        round1, kept_ids, decisions = [], set(), []
        for name in baseline:
            ids = list(self._link([name]).ids)
            hit = any(i in allowed for i in ids)
            decisions.append((name, [self.kg.entity_names[i] for i in ids], hit))
            if hit:
                round1.append(name)
                kept_ids.update(ids)
        t.add("filter", "round1", hops=self.hops, exact_hops=self.exact_hops, refine=self.refine,
              n_allowed=len(allowed), decisions=decisions)
        return round1, kept_ids

    def round2_select(self, t: Trace, note: str, ranked: np.ndarray, round1: list[str],
                      kept_ids: set[int]) -> tuple[list[str], list[str], int]:
        """§6 Round 2 (KG enhancement), A.5 ("715 candidate diseases … ask the LLM to select"):
        every candidate (the first ``max_candidates`` when capped) is shown, split into prompts
        of at most ``round2_chars`` listing characters (:func:`chunk_by_chars`); each prompt's
        picks count only for names that prompt showed and Round 1 did not keep, and the
        prompts' selections are merged in order (cut to ``max_select`` when set). Returns
        ``(selected, shown, number of prompts)``."""
        shown = [self.kg.entity_label(int(c)) for c in ranked[: self.max_candidates]]
        parts = chunk_by_chars(shown, self.round2_chars) if self.rounds == 2 else []
        limit = f" (at most {self.max_select})" if self.max_select else ""
        selected: list[str] = []
        for i, part in enumerate(parts, 1):
            prompt = render(self.prompts["select"], note=note, limit=limit, kept=round1 or "none",
                            part=i, parts=len(parts), candidates="\n".join(f"- {n}" for n in part))
            for p in self._ask(t, "select", prompt):
                n = match_candidate(p, part, self.round2_match)
                if n is not None and n not in selected and self.kg.find_entity(n) not in kept_ids:
                    selected.append(n)
        selected = selected[: self.max_select] if self.max_select else selected
        t.add("select", "round2", n_candidates=len(ranked), n_shown=len(shown), prompts=len(parts),
              round2_chars=self.round2_chars, selected=selected)
        return selected, shown, len(parts)

    # ------------------------------------------------------------------ main
    def answer(self, example: Example) -> Prediction:
        t = Trace()
        note = example.question
        baseline = self.baseline_diagnoses(t, note)
        ent = self.extract_note_entities(t, example)
        kh = self.retrieve_khop(t, ent.seeds)
        ranked, scores = self.rank_candidates(kh, ent)
        round1, kept_ids = self.round1_filter(t, baseline, self.refine_support(kh, ranked, scores))
        selected, shown, n_prompts = self.round2_select(t, note, ranked, round1, kept_ids)
        rounds = {"baseline": tuple(baseline), "round1": tuple(round1)}
        if self.rounds == 2:
            rounds["round2"] = tuple(dict.fromkeys(round1 + selected))
        final = rounds["round2"] if self.rounds == 2 else rounds["round1"]
        pred = t.finish(
            example, final, round2_selected=selected,
            n_note_entities=len(ent.mentions), n_linked_entities=int(len(ent.seeds)),
            n_disease_candidates=int(len(kh.diseases)), n_candidates_shown=len(shown), round2_prompts=n_prompts,
            diseases_per_hop=kh.diseases_per_hop, retrieve_s=round(kh.retrieve_s, 6),
            hop_times_s=kh.hop_times_s, retrieved=[self.kg.entity_label(int(c)) for c in ranked],
            hops_used=self.hops, search_space=int(len(kh.sub.triples)) if kh.sub is not None else 0,
            retrieval_empty=not len(ranked),  # no candidate disease reached (rounds as the paper runs them)
        )
        return dataclasses.replace(pred, rounds=rounds)
