"""Think-on-Graph beam search over the KG (ToG, Sun et al. 2024, ICLR; the baseline ReKnoS
(reknos.txt §3, §5, Fig. 5) compares LLM calls with). Our own code, written after reading the
authors' release (IDEA-FinAI/ToG, formerly GasolSun36/ToG, at commit
``7ccbb92e17579f934bb778386230de47eca0ab67``: ``ToG/main_freebase.py``, ``ToG/freebase_func.py``,
``ToG/utils.py`` and ``ToG/prompt_list.py``); none of its code or prompt text is copied.

For depth ``d = 1..D`` with a beam of at most ``W`` entity paths (starting at every linked topic
entity, as ToG starts from all topic entities of the question):

1. **relation exploration**, per beam entity: the relations attached to it in both directions
   (``rel`` = entity is head, ``rel (backward)`` = entity is tail), sorted by name
   (:meth:`ToG.explore_relations`);
2. **relation pruning**, ONE call PER BEAM ENTITY (ToG's ``relation_search_prune``): the prompt
   asks for ``W`` relations, and EVERY relation the reply lists with a score above 0 is kept (the
   release's ``clean_relations`` keeps all it finds; ``cap_relations`` keeps at most ``W``);
   an unparseable reply drops the entity, as ToG does. The bm25 / embedding backends keep the
   top ``W``, as the release does (:meth:`ToG.prune_relations`);
3. **entity exploration**, per kept (entity, relation): its neighbours in MID order; under LLM
   pruning, when a relation has ``sample_at`` (20) or more of them, a seeded sample of
   ``num_retain_entity`` (5) is taken (ToG: ``random.sample(candidates, num_retain_entity)`` when
   ``len >= 20``, inside ``if args.prune_tools == "llm"``: bm25 and embedding pruning never
   sample). The sample is drawn from the MID-sorted list with a seed made of ``seed``, the
   entity's MID and the relation, so it does not depend on the KG's storage order: the in-memory
   store and a SPARQL endpoint draw the same neighbours (:meth:`ToG.explore_entities`);
4. **entity scoring**, ONE call PER (entity, relation) with two or more neighbours (ToG's
   ``entity_score``; one neighbour takes the relation's score without a call); an entity's score
   is its score times its relation's score; an unparseable reply scores them uniformly (ToG:
   "all entities are created equal"). bm25 / embedding pruning score every neighbour and keep
   the top W of the relation (the release's ``entity_score``), all-zero scores among those W made
   uniform (:meth:`ToG.score_entities`);
5. **entity pruning**: the ``W`` best (entity, path) candidates over all relations, zero
   scores dropped (ToG's ``entity_prune``); each kept candidate's triplet joins the triplets
   gathered so far (the release's ``cluster_chain_of_entities``), and the new beam holds each of
   their entities once (the release's next frontier is a dict keyed by entity, so an entity two
   relations reach is explored once) (:meth:`ToG.prune_entities`);
6. **reasoning** (the release's ``reasoning``): the question with EVERY triplet gathered at every
   depth so far; a reply opening with ``{Yes}`` IS the answer (read from that reply, no further
   call), ``{No}`` → next depth (:meth:`ToG.reason`).

Ends (``extra["end"]``), as ``main_freebase.py``:

* ``no_topic``: no topic entity linked → the release's six-example chain-of-thought prompt
  without knowledge (``generate_without_explored_paths`` with ``cot_prompt``; ours
  ``prompts/tog/answer_without_knowledge.txt``);
* ``yes``: the ``{Yes}`` reply's answer;
* ``half_stop``: a depth found no candidate, or every candidate scored 0 → the answer prompt with
  every triplet gathered so far (``half_stop`` → ``generate_answer``), an empty list when the
  beam emptied at depth 1 (as the release);
* ``depth_limit``: ``{No}`` at depth ``D`` → the same chain-of-thought prompt without knowledge
  (the release's ``if not flag_printed`` branch; ``at_depth_limit: triplets`` answers from the
  triplets instead).

A search that kept no triplet at all (no topic, or the beam emptied at depth 1) is
``extra["retrieval_empty"] = True``; ``on_empty: abstain`` (ablation) makes no call and gives no
answer there.

Exploration calls (steps 2 and 4) run at ``temperature_exploration`` (ToG's default 0.4), the
reasoning and answer calls at ``temperature_reasoning`` (0). So the calls per question grow with
the width: per depth ``|beam|`` pruning calls + one scoring call per kept (entity, relation) +
1 reasoning call (ReKnoS Fig. 5's comparison), with ``|beam| ≤ W``.

Prompts (``prompts/tog/``) have the structure of ToG's ``prompt_list.py`` in our own words, with
worked examples from an invented package registry no evaluated KG uses: ``prune_relations``
(step 2; one example, replies ``n. {relation (Score: s)}``), ``score_entities`` (step 4; one
example, replies ``Score: s1, s2, ...`` in list order), ``reason`` (step 6; five ``{Yes}`` /
``{No}`` examples over ``head | relation | tail`` triplets, a ``{Yes}`` ending "the answer is
{X}") and ``answer`` (five examples ending on an ``Answer:`` line); the answer without knowledge
``answer_without_knowledge`` (the release's ``cot_prompt``: six ``First, ... Second, ...``
examples of general knowledge, ending on an ``Answer:`` line); docs/reasoners.md.

Pruning backends (``prune``): ``llm`` (the calls above), ``bm25`` (rank_bm25 over candidate text
vs question) or ``embedding`` (all-MiniLM-L6-v2 cosine): the same per-entity and
per-(entity, relation) steps, no LLM call; all-zero scores become uniform (ToG). Score ties keep
candidate order (relations by name, neighbours by MID), so every backend is deterministic.

Per-example extra: ``beam_sizes`` (distinct entities of each depth's frontier, always ≤ W), ``retrieved`` (every entity that
entered the beam → answer_coverage), ``search_space`` (distinct triples encountered),
``llm_calls``, ``depth_reached``, ``calls_per_depth``, ``end``, ``retrieval_empty``, ``funnel``.

Funnel (``ToG.funnel``, ``extra["funnel"]``, ``funnel/*`` in metrics.json; docs/reasoners.md),
in stage order, with ``d = 1..D``:

* ``topics_linked``: at least one topic entity linked (else the release's answer without knowledge);
* ``relations_kept_depth<d>``: relation pruning at depth d kept at least one relation of some
  beam entity;
* ``entities_kept_depth<d>``: entity pruning at depth d kept at least one candidate (else
  ``half_stop``);
* ``yes_depth<d>``: the reasoning reply at depth d opened with ``{Yes}`` (the search stopped there);
* ``answered_by`` (categorical), the prompt the answer came from: ``yes`` (the ``{Yes}`` reply),
  ``triplets`` (the answer prompt over the gathered triplets: ``half_stop``, or the
  ``tog_depth_limit_triplets`` ablation), ``no_triplet`` (that prompt with an empty triplet list:
  the beam emptied at depth 1), ``without_knowledge`` (the release's
  ``generate_without_explored_paths``: no topic entity, or ``{No}`` at depth D), ``abstained``
  (``on_empty: abstain``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from kgreason.kg.linking import link_example
from kgreason.embed import Embedder
from kgreason.llm.parsing import ParseResult, parse_answers, parse_candidate_scores
from kgreason.ranking import ranked
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, ask, load_prompt, render
from kgreason.types import ChatRequest, Example, Prediction

_TOKEN = re.compile(r"[a-z0-9]+")
#: the ranking sites of the bm25 / embedding pruning (kgreason/ranking.py)
RELATION_SITE, ENTITY_SITE = "tog.relations", "tog.entities"
BACKWARD = " (backward)"


_BRACED = re.compile(r"\{([^{}]*)\}")
ON_EMPTY = ("answer", "abstain")
AT_DEPTH_LIMIT = ("without_knowledge", "triplets")


def parse_evaluate_reply(text: str) -> ParseResult:
    """The reasoning reply, read as the release reads it (``extract_answer`` + ``if_true``): the
    first ``{...}`` decides, ``{Yes}`` stops the search. On ``{Yes}`` the answers are the later
    ``{...}`` groups of the same reply (the examples end "the answer is {X}"), else its
    ``Answer:`` line or last line. ``value`` = ``(yes, answers)``; a reply with no ``{...}`` is
    not parsed (the release reads it as No)."""
    groups = _BRACED.findall(text)
    if not groups:
        return ParseResult(False, (False, []), "no {Yes} or {No}")
    yes = groups[0].lower().replace(" ", "") == "yes"
    if not yes:
        return ParseResult(True, (False, []))
    answers = [g.strip() for g in groups[1:] if g.strip() and g.strip().lower() not in ("yes", "no")]
    if not answers:
        rest = text[text.index("}") + 1:].strip(" .\n")
        answers = (parse_answers(rest).value or []) if rest else []
    return ParseResult(True, (True, list(dict.fromkeys(answers))))


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.replace("_", " ").replace(".", " ").lower())


class Pruner:
    """Scores candidate texts against a question: ``llm`` | ``bm25`` | ``embedding``.

    ``template``: the LLM backend's prompt, one for every step, or one per step keyed by the
    ``what`` of :meth:`scores` (ToG: ``relations`` and ``entities``, each with its worked example)."""

    def __init__(self, backend: str, llm=None, template: str | Mapping[str, str] = "", embedder=None,
                 max_tokens: int = 256, temperature: float = 0.0) -> None:
        if backend not in ("llm", "bm25", "embedding"):
            raise ValueError(f"prune={backend!r}: expected llm | bm25 | embedding")
        self.backend, self.llm, self.template = backend, llm, template
        self.embedder = embedder if embedder is not None else Embedder()
        self.max_tokens, self.temperature = max_tokens, temperature
        self.reask = ReaskPolicy()

    @property
    def embed_forms(self) -> tuple[str, ...]:
        """The KG embedding stores the ``embedding`` backend reads its candidate texts from
        (kgreason/storage/embedstore.py; opened before the first example): only the question is embedded."""
        return ("tog_relation", "tog_entity") if self.backend == "embedding" else ()

    def scores(self, question: str, names: list[str], texts: list[str], t: Trace, what: str,
               context: str = "", keep: int = 0) -> np.ndarray | None:
        """``(len(names),)`` float64 scores (higher = keep); None when the LLM's reply did not
        parse (the caller applies ToG's fallback for the step)."""
        if not names:
            return np.zeros(0)
        if self.backend == "bm25":
            from rank_bm25 import BM25Okapi

            bm = BM25Okapi([tokens(x) or ["_"] for x in texts])
            return np.asarray(bm.get_scores(tokens(question)), dtype=np.float64)
        if self.backend == "embedding":
            q = self.embedder.encode([question])
            m = self.embedder.encode([x.replace(".", " ").replace("_", " ") for x in texts])
            # cosine clipped at 0: scores multiply along a path (entity × relation), and two
            # negative cosines must not make a positive score
            return np.clip((m @ q[0]).astype(np.float64), 0.0, None)
        listing = "\n".join(f"{i + 1}. {n}" for i, n in enumerate(names))
        template = self.template[what] if isinstance(self.template, Mapping) else self.template
        req = ChatRequest.of(render(template, question=question, candidates=listing, what=what,
                                    context=context, keep=keep or len(names)),
                             max_tokens=self.max_tokens, temperature=self.temperature)
        res = ask(self.llm, t, f"prune_{what}", req, lambda text: parse_candidate_scores(text, names),
                  policy=self.reask)
        return np.asarray(res.value, dtype=np.float64) if res.ok else None


def top_w(scores: np.ndarray, w: int) -> np.ndarray:
    """Indices of the ``w`` best scores, best first; ties keep the lower index."""
    return np.argsort(-scores, kind="stable")[:w]


def uniform_if_zero(scores: np.ndarray) -> np.ndarray:
    """ToG's rule for lexical / embedding scores: all zero → uniform ``1/n``."""
    return np.full(len(scores), 1.0 / len(scores)) if len(scores) and not np.any(scores) else scores


@dataclass(frozen=True)
class _Path:
    entity: int
    topic: int  # the topic entity the path starts from
    chain: tuple[tuple[int, int, int, bool], ...] = ()  # (head, rel, tail, backward) as traversed
    score: float = 1.0


@dataclass
class _Search:
    """The beam search's state for one question."""

    beam: list[_Path]
    retrieved: dict[int, None]  # every entity that entered the beam, in order
    seen_triples: set[int] = field(default_factory=set)
    beam_sizes: list[int] = field(default_factory=list)
    # every depth's kept triplets (head, relation, tail), in depth then beam order: the release's
    # cluster_chain_of_entities, which its reasoning and answer prompts list in full
    gathered: dict[tuple[int, int, int], None] = field(default_factory=dict)

    @classmethod
    def start(cls, topics) -> "_Search":
        beam = [_Path(int(e), int(e)) for e in dict.fromkeys(topics)]
        return cls(beam, {p.entity: None for p in beam})


def render_chain(kg, p: _Path) -> str:
    out = kg.entity_label(p.topic)
    for h, r, tl, back in p.chain:
        rel = kg.relation_names[r]
        out += f" <-[{rel}]- {kg.entity_label(h)}" if back else f" -[{rel}]-> {kg.entity_label(tl)}"
    return out


class ToG(BaseReasoner):
    """Args:
        width: beam width W (relations kept per entity, entities kept per depth; ToG default 3).
        depth: maximum depth D (ToG default 3).
        prune: pruning backend ``llm`` | ``bm25`` | ``embedding``.
        sample_at: a relation with at least this many neighbours is sampled (ToG: 20).
        num_retain_entity: neighbours kept by that sample (ToG's ``--num_retain_entity``, 5).
        seed: seed of the sample (with the entity's MID and the relation name).
        temperature_exploration: temperature of the pruning / scoring calls (ToG: 0.4).
        temperature_reasoning: temperature of the reasoning and answer calls (ToG: 0).
        max_reasks: re-asks on an unparseable pruning / reasoning / answer reply (kit policy;
            0 = none, as ToG).
        on_empty: ``answer`` (the release: no topic entity → its chain-of-thought prompt without
            knowledge; a beam emptied at depth 1 → its answer prompt with an empty triplet list) |
            ``abstain`` (no call, no answer: ablation ``on_empty_abstain``).
        at_depth_limit: ``without_knowledge`` (the release: depth D reached with ``{No}`` →
            its chain-of-thought answer without knowledge) | ``triplets`` (answer prompt with the
            gathered triplets: ablation ``tog_depth_limit_triplets``).
        cap_relations: False (the release keeps every relation the pruning reply lists) | True
            (at most W per entity, as the prompt asks: ablation ``tog_relation_cap_w``).
    """

    tasks = ("kgqa",)  # preflight: the dataset tasks this reasoner answers

    def __init__(self, *, kg, retriever=None, llm, width: int = 3, depth: int = 3,
                 prune: str = "llm", sample_at: int = 20, num_retain_entity: int = 5, seed: int = 0,
                 temperature_exploration: float = 0.4, temperature_reasoning: float = 0.0,
                 max_tokens: int = 256, prompts_dir: str = "tog", embedder=None, graphdb=None,
                 max_reasks: int = 0, on_empty: str = "answer", at_depth_limit: str = "without_knowledge",
                 cap_relations: bool = False) -> None:
        if on_empty not in ON_EMPTY:
            raise ValueError(f"ToG: on_empty must be one of {' | '.join(ON_EMPTY)}, got {on_empty!r}")
        if at_depth_limit not in AT_DEPTH_LIMIT:
            raise ValueError(f"ToG: at_depth_limit must be one of {' | '.join(AT_DEPTH_LIMIT)}, got {at_depth_limit!r}")
        if width < 1 or depth < 1:
            raise ValueError(f"ToG: width and depth must be ≥ 1, got width={width}, depth={depth}")
        if num_retain_entity < 1 or sample_at < 1:
            raise ValueError(f"ToG: sample_at and num_retain_entity must be ≥ 1, got {sample_at}, {num_retain_entity}")
        self.kg, self.llm = kg, llm
        self.width, self.depth = int(width), int(depth)
        self.sample_at, self.num_retain, self.seed = int(sample_at), int(num_retain_entity), int(seed)
        self.temperature, self.max_tokens = temperature_reasoning, max_tokens
        self.prompts_dir = prompts_dir
        self.prompts = {s: load_prompt(prompts_dir, s) for s in
                        ("prune_relations", "score_entities", "reason", "answer", "answer_without_knowledge")}
        self.on_empty, self.at_depth_limit, self.cap_relations = on_empty, at_depth_limit, bool(cap_relations)
        templates = {"relations": self.prompts["prune_relations"], "entities": self.prompts["score_entities"]}
        self.pruner = Pruner(prune, llm, templates, embedder, max_tokens, temperature_exploration)
        self.reask = self.pruner.reask = ReaskPolicy(max_reasks)
        self.funnel = ("topics_linked",
                       *(f"{stage}_depth{d}" for d in range(1, self.depth + 1)
                         for stage in ("relations_kept", "entities_kept", "yes")),
                       "answered_by")

    def _ask(self, t: Trace, step: str, parser, **values):
        req = ChatRequest.of(render(self.prompts[step], **values), temperature=self.temperature,
                             max_tokens=self.max_tokens)
        return self.ask(t, step, req, parser)

    def answer(self, example: Example) -> Prediction:
        """Link the topic entities, then per depth: relation exploration and pruning per entity,
        entity exploration and scoring per (entity, relation), entity pruning, reasoning
        (module docstring steps 1–6); then the release's way out (module docstring, "Ends")."""
        kg, t = self.kg, Trace()
        link = link_example(kg, example)
        t.add("link", "topic_entities", linked=link.linked, failed=link.failed)
        s = _Search.start(link.ids)
        t.stage("topics_linked", bool(s.beam))
        q = example.question
        depth_reached, per_depth = 0, []
        answers: list[str] = []
        end = "no_topic" if not s.beam else "depth_limit"
        for d in range(1, self.depth + 1):
            if not s.beam:
                break
            depth_reached, calls0 = d, self._n_calls(t)
            kept = [(p, r, b, sc) for p in s.beam for (r, b, sc) in self.prune_relations(t, q, d, p)]
            t.stage(f"relations_kept_depth{d}", bool(kept))
            cands = [c for p, r, b, sc in kept for c in self.score_entities(t, q, p, r, b, sc, s)]
            self.prune_entities(t, d, s, cands)
            t.stage(f"entities_kept_depth{d}", bool(s.beam))
            if not s.beam:  # release: no candidate, or every score 0 -> half_stop
                per_depth.append(self._n_calls(t) - calls0)
                end = "half_stop"
                break
            stop, found = self.reason(t, q, d, s)
            t.stage(f"yes_depth{d}", bool(stop))
            per_depth.append(self._n_calls(t) - calls0)
            if stop:  # release: the {Yes} reply is the answer, no further call
                end, answers = "yes", found
                break
        empty = not s.gathered  # nothing linked, or no triplet kept at any depth
        if end == "yes":
            by = "yes"
        elif empty and self.on_empty == "abstain":
            answers, by = [], "abstained"
        elif end == "no_topic":  # release: len(topic_entity) == 0 -> generate_without_explored_paths
            answers, by = self.answer_without_knowledge(t, q), "without_knowledge"
        elif end == "half_stop" or self.at_depth_limit == "triplets":
            # release: half_stop -> generate_answer with cluster_chain_of_entities, an empty
            # triplet list when the beam emptied at depth 1
            answers = self._ask(t, "answer", parse_answers, question=q, paths=self._triplets_text(s)).value or []
            by = "no_triplet" if empty else "triplets"
        else:  # depth D reached with {No}: release's generate_without_explored_paths
            answers, by = self.answer_without_knowledge(t, q), "without_knowledge"
        t.stage("answered_by", by)
        t.note("end", how=end, triplets=len(s.gathered))
        return t.finish(
            example, answers, retrieved=[kg.entity_label(e) for e in s.retrieved],
            search_space=len(s.seen_triples), beam_sizes=s.beam_sizes, llm_calls=self._n_calls(t),
            depth_reached=depth_reached, calls_per_depth=per_depth, end=end, retrieval_empty=empty,
        )

    def answer_without_knowledge(self, t: Trace, q: str) -> list[str]:
        """The release's ``generate_without_explored_paths``: its own six-example
        chain-of-thought prompt (``cot_prompt``; ours ``prompts/tog/answer_without_knowledge.txt``,
        six examples of that form in our words) with the question alone, at the reasoning
        temperature and ToG's ``max_tokens``."""
        req = ChatRequest.of(render(self.prompts["answer_without_knowledge"], question=q),
                             temperature=self.temperature, max_tokens=self.max_tokens)
        return self.ask(t, "answer_without_knowledge", req, parse_answers,
                        prompt_id=f"{self.prompts_dir}/answer_without_knowledge").value or []

    @staticmethod
    def _n_calls(t: Trace) -> int:
        return sum(1 for st in t.steps if st.kind == "llm")

    def explore_relations(self, entity: int) -> list[tuple[int, bool]]:
        """Step 1, relation exploration for one entity: ``(relation, backward)`` pairs, in
        (relation name, forward first) order, not the KG's storage order (ToG sorts them too),
        so the in-memory store and a SPARQL endpoint prompt alike."""
        kg = self.kg
        cands = {(int(kg.rels[tid]), False): None for tid in kg.out_triples(entity)}
        cands.update({(int(kg.rels[tid]), True): None for tid in kg.in_triples(entity)})
        return sorted(cands, key=lambda rb: (kg.relation_names[rb[0]], rb[1]))

    def prune_relations(self, t: Trace, q: str, d: int, p: _Path) -> list[tuple[int, bool, float]]:
        """Step 2, relation pruning for ONE beam entity: its ``W`` best relations with their
        scores. LLM backend: zero scores dropped, an unparseable reply keeps nothing (ToG)."""
        kg = self.kg
        rel_list = self.explore_relations(p.entity)
        names = [kg.relation_names[r] + (BACKWARD if b else "") for r, b in rel_list]
        # lexical / embedding backends see the property words ("directed by"): the shared
        # "film film" prefix otherwise dominates MiniLM's similarity to the question
        texts = [kg.relation_names[r].rsplit(".", 1)[-1].replace("_", " ") for r, _ in rel_list]
        ctx = f"Topic entity: {kg.entity_label(p.entity)}"
        if self.pruner.backend == "llm":
            sc = self.pruner.scores(q, names, texts, t, "relations", context=ctx, keep=self.width)
            if sc is None:
                sc = np.zeros(len(names))
            # the release keeps every relation the reply lists (clean_relations), however many
            # the prompt asked for; cap_relations=true keeps at most W (ablation tog_relation_cap_w)
            idx = top_w(sc, self.width if self.cap_relations else len(sc))
            idx = idx[sc[idx] > 0]
        else:  # bm25 / sentence-embedding pruning: the release takes the top W (kgreason/ranking.py:
            # recorded, and served to a replay)
            idx, kept = ranked(RELATION_SITE, names, lambda: self.pruner.scores(q, names, texts, t, "relations",
                                                                                context=ctx, keep=self.width),
                               k=self.width)
            sc = np.zeros(len(names))
            sc[idx] = uniform_if_zero(np.asarray(kept, dtype=np.float64))
        t.add("prune", "relations", depth=d, entity=kg.entity_label(p.entity), candidates=len(names),
              kept=[names[i] for i in idx], scores=[float(sc[i]) for i in idx])
        return [(rel_list[i][0], rel_list[i][1], float(sc[i])) for i in idx]

    def explore_entities(self, entity: int, rel: int, back: bool) -> list[int]:
        """Step 3, entity exploration for one (entity, relation): the triple ids reaching its
        neighbours, in neighbour name (MID) order. Under LLM pruning only, ``sample_at`` or more
        → a seeded sample of ``num_retain_entity`` of them, kept in MID order (the release:
        ``if args.prune_tools == "llm": if len(entity_candidates_id) >= 20: random.sample(...)``);
        bm25 and embedding pruning see every neighbour and keep the top W of them
        (:meth:`score_entities`)."""
        kg = self.kg
        tids = kg.in_triples(entity) if back else kg.out_triples(entity)
        nb_of = kg.heads if back else kg.tails
        tids = [int(x) for x in tids if kg.rels[x] == rel and int(nb_of[x]) != entity]
        tids = sorted(tids, key=lambda x: kg.entity_names[int(nb_of[x])])
        if self.pruner.backend == "llm" and len(tids) >= self.sample_at:
            key = f"{self.seed}|{kg.entity_names[entity]}|{kg.relation_names[rel]}|{int(back)}"
            pick = random.Random(key).sample(range(len(tids)), min(self.num_retain, len(tids)))
            tids = [tids[i] for i in sorted(pick)]
        return tids

    def score_entities(self, t: Trace, q: str, p: _Path, rel: int, back: bool, rel_score: float,
                       s: _Search) -> list[_Path]:
        """Step 4, entity scoring for ONE (entity, relation): one call when it has two or more
        neighbours (one takes the relation's score); score = entity score × relation score.
        bm25 / embedding pruning (the release's ``entity_score``: ``compute_bm25_similarity`` /
        ``retrieve_top_docs`` with ``args.width``) keep only the top W neighbours of the relation,
        all-zero scores among them made uniform ``1/W``; ties keep MID order."""
        kg = self.kg
        tids = self.explore_entities(p.entity, rel, back)
        s.seen_triples.update(tids)
        if not tids:
            return []
        nbs = [int(kg.heads[x]) if back else int(kg.tails[x]) for x in tids]
        if len(nbs) == 1:
            sc = np.ones(1)
        else:
            rname = kg.relation_names[rel] + (BACKWARD if back else "")
            names = [kg.entity_label(e) for e in nbs]
            texts = [f"{kg.relation_names[rel]} {n}" for n in names]
            if self.pruner.backend == "llm":
                sc = self.pruner.scores(q, names, texts, t, "entities", context=f"Relation: {rname}")
                sc = np.full(len(nbs), 1.0 / len(nbs)) if sc is None else sc
            else:  # the release keeps the top W per relation (kgreason/ranking.py: recorded, served)
                idx, kept = ranked(ENTITY_SITE, names, lambda: self.pruner.scores(q, names, texts, t, "entities",
                                                                                  context=f"Relation: {rname}"),
                                   k=self.width, ident=[f"{kg.entity_names[e]}|{x}" for e, x in zip(nbs, texts)])
                by = dict(zip(idx.tolist(), np.asarray(kept, dtype=np.float64).tolist()))
                keep = sorted(by)  # the W best, kept in MID order
                nbs, tids = [nbs[i] for i in keep], [tids[i] for i in keep]
                sc = uniform_if_zero(np.asarray([by[i] for i in keep], dtype=np.float64))
        return [_Path(nb, p.topic, p.chain + ((int(kg.heads[x]), rel, int(kg.tails[x]), back),),
                      float(sc[i]) * rel_score) for i, (nb, x) in enumerate(zip(nbs, tids))]

    def prune_entities(self, t: Trace, d: int, s: _Search, cands: list[_Path]) -> str:
        """Step 5, entity pruning: the ``W`` best candidates over all (entity, relation) pairs,
        zero scores dropped, each giving its triplet; the new beam holds each of their entities
        ONCE (its best-scored path), as the release's next frontier is a dict keyed by entity
        (``main_freebase.py``: ``topic_entity = {entity: ... for entity in entities_id}``): an
        entity two kept candidates reach is explored once at the next depth. Returns the beam's
        paths as text."""
        kg, W = self.kg, self.width
        scores = np.asarray([c.score for c in cands], dtype=np.float64)
        kept = [cands[i] for i in top_w(scores, W) if scores[i] != 0]
        frontier: dict[int, _Path] = {}  # the release's topic_entity dict: one slot per entity
        for p in kept:
            frontier.setdefault(p.entity, p)  # its best-scored path (kept is best first)
            s.retrieved.setdefault(p.entity, None)
            h, r, tl, _ = p.chain[-1]
            s.gathered.setdefault((h, r, tl), None)  # every kept candidate's triplet, as the release
        s.beam = list(frontier.values())
        assert len(s.beam) <= W, "beam exceeded its width"
        s.beam_sizes.append(len(s.beam))
        # triples: the (head, relation, tail) that brought each kept candidate in, as the KG stores
        # it (the drawing of `kgreason ask` / `show` reads the beam per depth from them)
        t.add("beam", "entities", depth=d, candidates=len(cands),
              kept=[kg.entity_label(p.entity) for p in kept], scores=[p.score for p in kept],
              frontier=[kg.entity_label(p.entity) for p in s.beam],
              triples=[[kg.entity_label(h), kg.relation_names[r], kg.entity_label(tl)]
                       for h, r, tl, _ in (p.chain[-1] for p in kept)])
        return self._paths_text(s.beam)

    def reason(self, t: Trace, q: str, d: int, s: _Search) -> tuple[bool, list[str]]:
        """Step 6, reasoning (the release's ``reasoning``): the question with every triplet
        gathered so far; ``(stop, answers)``. The reply opening with ``{Yes}`` is the answer: its
        answers are read from that same reply (:func:`parse_evaluate_reply`), no further call."""
        res = self._ask(t, "reason", parse_evaluate_reply, question=q, paths=self._triplets_text(s))
        if res.ok and res.value[0]:
            return True, list(res.value[1])
        return False, []

    def _triplets_text(self, s: _Search) -> str:
        return "\n".join(self.kg.verbalise(tr) for tr in s.gathered)

    def _paths_text(self, beam: list[_Path]) -> str:
        return "\n".join(render_chain(self.kg, p) for p in beam)
