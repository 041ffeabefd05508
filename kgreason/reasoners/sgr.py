"""SGR: the question's structured query → R_q-guided subgraph → stepwise paths → NL→Cypher →
validate/refine → collaborative paths → one aggregation over every path (shared/papers/sgr.txt §3;
how the parts combine, with the sentences that decide it: docs/sgr.md).

One example runs these steps (each recorded in the trace; :meth:`SGR.answer` calls one method
per step, named in brackets):

1. **S_q from the question** [``structure_query``, ``map_relations``] (§3.1.1 Eq. 2, §3.1.2 step
   1): one call, before any KG read, gives entities, relations and constraints; ``V_q`` = the
   entities linked by name (``link_mentions``), ``R_q`` = the relations mapped to KG relation types,
   ``C_q`` = the constraints as text for the later prompts. ``V_q`` linking nothing takes the
   ``on_empty`` path (no fallback to the dataset's topics: ablation ``topics=dataset``).
2. **Candidates and E*_q** [``candidate_subgraph``: ``candidates``, ``subgraph``] (§3.1.2 steps
   2–3, Eq. 4–6): the k-hop triples around ``V_q`` whose relation is in ``R_q`` (all relations
   when none is), each scored ``s(e_i, q) = cos(φ(e_i), φ(q))`` with all-MiniLM-L6-v2; ``E*_q``
   keeps every triple with ``s ≥ τ`` (``tau``), or the ``top_k`` best (Eq. 6) when ``tau`` is
   null. ``max_candidate_triples`` (null: none) caps the candidates scored, counted in ``extra``.
2b. **Stepwise paths** [``stepwise``: ``stepwise_path``, ``path_p_theta``] (§3.2–3.3, Eq. 7–13):
   M paths; each step picks a triple and writes a state from q, ``C_q``, the numbered ``E*_q`` and
   the earlier states; ``C(p, G_q)`` = share of the path's triples inside ``E*_q``;
   ``α_i = λ P_θ + (1 − λ) C``.
3. **Schema** [``generate_schema``] (§3.4.1, Eq. 15, prompt as described at the end of §3.3):
   the LLM, prompted as a KG expert with sample triples of ``E*_q``, writes
   ``S_q = {(v_i, r_i, v_j)}`` as JSON chains; unknown relations are dropped. Ablation
   ``schema=false`` (Table 2 / Fig. 2 "Without Schema", "removing schema-based prompts") makes
   no schema call: no ``S_q`` reaches the Cypher/Refine prompts (``c_q = g(q)``) and none
   validates in step 5.
4. **Direct reasoning** [``direct_reasoning``: ``write_cypher``, ``execute_and_validate``;
   ``embedding_candidates`` for the ablation] (§3.4.1, Eq. 16–17): the LLM, shown the exact
   graph schema (node label, one relationship type per KG relation, properties;
   :func:`~kgreason.kg.cypher.graph_schema_text`), writes Cypher ``c_q = g(q, S_q)``; it passes
   the read-only guard and runs on the Cypher DB (``A_q = Exec(c_q, G)``). Ablation
   ``cypher=false`` (Fig. 3) removes structured retrieval: ``A_q`` = the entities of ``E*_q``
   (embedding top-k over the k-hop triples), not validated (Eq. 19 walks the graph), and Eq. 18
   chooses among them; the DB is never touched.
5. **Validation** [``valid_answer_set``, ``validate``] (§3.4.2, Eq. 19–20): ``V(a, S_q, G) = 1``
   iff ``a`` is bound to the schema's answer variable when the schema's constraints are
   propagated through the KG from its constant entities (for a chain: ``a`` is reachable from
   the topic through the relation chain). A constraint is read along its edge direction (the
   default, ``schema_direction=strict``); the ablation ``sgr_schema_either_way_fallback``
   (``schema_direction=auto``) reads it either way only when that strict reading binds nothing
   (a model-written S_q with a wrong-way arrow). Without a schema (the ablation, or an
   unusable reply), ``V`` = membership in the k-hop subgraph; each ``validate`` trace step
   names its ``rule`` (``schema`` | ``khop``).
6. **Refine** [``refine_cypher``] (Eq. 22): while ``A+_q`` is empty, up to ``max_refine_rounds``
   times, the LLM gets the graph schema and the previous queries with their guard rejection /
   the database's own error (with the valid relationship types near the topics) / empty or
   invalid result, and writes a new query. The answer is ``argmax P_θ(a | q, A+_q, S_q)``
   (Eq. 18/21) [``rank_valid_answers``, ``choose``]: ``P_θ`` from prompt log-probs where the
   backend has them, else the model is asked to choose (chat-only endpoints); the trace and
   ``extra.p_theta_source`` say which (``logprobs`` | ``chat_choice``).
7. **Collaborative reasoning** [``collaborative``: ``reasoning_path``, ``path_p_theta``,
   :func:`vote`] (§3.5, Eq. 23–31), when direct reasoning found nothing valid (or always, with
   ``collaborate=always``): ``M = num_paths`` sampled paths; each alternates a hypothesis
   ``h_t`` (with claimed triples) and retrieval ``E_t = Retrieve(h_t, G)`` for
   ``collab_iterations`` steps. ``C(p_i, G) = (1/T) Σ_t I(E^i_t ⊆ G)`` where ``E^i_t`` is the
   set of triples the hypothesis relies on (Eq. 30); ``β_i = λ P_θ(a_i | q, p_i) + (1 − λ) C``
   (Eq. 29) and ``â = argmax_a Σ_i β_i I(a_i = a)`` (Eq. 31; ``vote=majority`` drops the
   weights).
8. **Integration** [``integrate``] (§3.3, Eq. 14): ``â = argmax_a Σ_i w_i I(a_i = a)`` over the
   stepwise paths (α_i), the direct answer (``λ P_θ + (1 − λ)``, C = 1 after Eq. 19) and the §3.5
   paths (β_i); when ``A+_q`` is non-empty the answer is taken from it (Eq. 21).

Eq. 29's ``P_θ(a_i | q, p_i)`` comes from ``llm.score`` (log-probabilities, softmax-normalised
over the distinct answers) where the backend supports it, else from the sampling frequency of
``a_i`` over the M paths; the trace records which (``p_theta_source``: ``logprobs`` |
``frequency``). ``extra.retrieved`` (the retrieval rate) holds the entities retrieved from the KG
(k-hop subgraph and database rows), never the answers.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

import numpy as np

from kgreason.embed import Embedder
from kgreason.kg.cypher import CypherError, GraphDB, graph_schema_text
from kgreason.kg.cypher_guard import CypherRejected
from kgreason.kg.linking import link_example, link_mentions
from kgreason.llm.base import ScoringUnsupported
from kgreason.llm.parsing import ParseResult, parse_cypher, parse_hypothesis, parse_json, parse_schema
from kgreason.reasoners.io import answer_without_retrieval, check_on_empty
from kgreason.reasoners.base import (BaseReasoner, ReaskPolicy, Trace, canonical_entities, canonical_triples, load_prompt,
                                     render)
from kgreason.types import ChatRequest, Example, Message, Prediction

def parse_choice(candidates: Sequence[str]):
    """Parser for the Eq. 18/21 choice reply: a candidate's number (1-based) or its exact name."""
    def parse(text: str) -> ParseResult:
        txt = text.strip().strip("`*. ").strip()
        m = re.match(r"^\D{0,20}?(\d+)\b", txt)
        if m and 1 <= int(m.group(1)) <= len(candidates) and len(txt) <= 40:
            return ParseResult(True, int(m.group(1)) - 1)
        low = [c.lower() for c in candidates]
        if txt.lower() in low:
            return ParseResult(True, low.index(txt.lower()))
        return ParseResult(False, None, f"reply with one number between 1 and {len(candidates)}")
    return parse


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


def parse_step(text: str) -> ParseResult:
    """Parser for one §3.2 step (Eq. 7–8): ``{"triple": <number> | [h, r, t], "state": str,
    "answer": str}``; ``triple`` is None when the reply names none."""
    js = parse_json(text)
    if not js.ok or not isinstance(js.value, dict):
        return ParseResult(False, None, 'expected JSON {"triple": <number or [head, relation, tail]>, "state": "...", "answer": "..."}')
    v = js.value
    tr, triple = v.get("triple"), None
    if isinstance(tr, int) and not isinstance(tr, bool):
        triple = tr
    elif isinstance(tr, str) and tr.strip().isdigit():
        triple = int(tr.strip())
    elif isinstance(tr, (list, tuple)) and len(tr) == 3 and all(isinstance(x, str) for x in tr):
        triple = tuple(x.strip() for x in tr)
    state = str(v.get("state") or "").strip()
    ans = v.get("answer")
    ans = str(ans).strip() if isinstance(ans, (str, int, float)) and not isinstance(ans, bool) else ""
    if triple is None and not state and not ans:
        return ParseResult(False, None, 'expected JSON {"triple": <number or [head, relation, tail]>, "state": "...", "answer": "..."}')
    return ParseResult(True, {"triple": triple, "state": state, "answer": ans})


def relation_key(name: str) -> str:
    """The normalised relation name R_q is matched on: lower-case, every run of characters other
    than a-z and 0-9 becomes ``_`` (``Directed by`` → ``directed_by``; the DB type
    ``film__film__directed_by`` → ``film_film_directed_by``)."""
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def vote(answers: Sequence[str], weights: Sequence[float], mode: str = "confidence") -> list[tuple[str, float]]:
    """Eq. 31: ``score(a) = Σ_i β_i I(a_i = a)`` (``majority``: every β_i = 1). Empty answers do
    not vote. Returns ``[(answer, score)]`` best first; ties keep first-appearance order."""
    tot: dict[str, float] = {}
    for a, w in zip(answers, weights):
        if not a:
            continue
        tot[a] = tot.get(a, 0.0) + (1.0 if mode == "majority" else float(w))
    order = {a: i for i, a in reversed(list(enumerate(answers)))}
    return sorted(tot.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def _check_settings(vote: str, collaborate: str, lam: float, schema_direction: str = "strict",
                    topics: str = "question") -> None:
    if topics not in ("question", "dataset"):
        raise ValueError(f"SGR: topics (the source of V_q) must be question | dataset, got {topics!r}")
    if vote not in ("confidence", "majority"):
        raise ValueError(f"vote must be 'confidence' or 'majority', got {vote!r}")
    if collaborate not in ("fallback", "always", "never"):
        raise ValueError(f"collaborate must be fallback|always|never, got {collaborate!r}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam (λ, Eq. 29) must be in [0, 1], got {lam}")
    if schema_direction not in ("strict", "either", "auto"):
        raise ValueError(f"SGR: schema_direction must be strict | either | auto, got {schema_direction!r}")


class SGR(BaseReasoner):
    """The SGR reasoner. Settings map to paper knobs; see conf/reasoner/sgr.yaml.

    Args:
        schema: make the question's ``S_q`` (Eq. 2) and the schema ``S_q`` (Eq. 15) and use them
            (False = ablation "Without Schema", Table 2 / Fig. 2: neither call; ``V_q`` from the
            dataset, plain k-hop candidates; answers are checked by k-hop membership only).
        cypher: query the Cypher DB (False = ablation "without neo4j", Fig. 3: embedding top-k
            over the k-hop triples, unvalidated; the DB is never opened).
        lam: λ of Eq. 13 and Eq. 29 (model confidence vs graph consistency).
        num_paths: M, stepwise paths (Eq. 12) and collaborative paths (Eq. 27).
        collab_iterations: T, hypothesis/retrieval rounds per path (Eq. 23–26).
        tau: relevance threshold τ of Eq. 5 (null → ``top_k`` of Eq. 6).
        top_k: triples kept in ``E*_q`` (Eq. 6) and the cap under ``tau``.
        max_refine_rounds: bound on Refine (Eq. 22); 0 disables it.
        vote: ``confidence`` (Eq. 14, Eq. 31) | ``majority`` (every path weight 1).
        collaborate: ``fallback`` (only when direct reasoning finds no valid answer, §3.5) |
            ``always`` | ``never``.
        hops, max_hops: k of the k-hop retrieval (null → max_hops).
        gold_hops: null ``hops`` reads the example's gold hop count (an oracle; off by default).
        max_candidate_triples: cost cap on candidates scored per question (nearest hops first);
            None (default) = all, as Eq. 5–6 select from every candidate; a cut is counted in
            ``extra`` (``candidates_total``, ``candidates_scored``, ``candidates_truncated``).
        topics: source of ``V_q``: ``question`` (the Eq. 2 entities, the paper) | ``dataset``
            (ablation ``sgr_dataset_topics``: the dataset's linked topic entities).
        stepwise: run the §3.2–3.3 stepwise paths (False = ablation ``sgr_no_stepwise``).
        stepwise_steps: T, the most steps of one stepwise path (Eq. 7).
        schema_sample: triples of ``E*_q`` shown to the schema prompt.
        evidence_k: triples added per collaborative retrieval step.
        temperature, seed: sampling of the collaborative paths (path i uses ``seed + i``).
        max_reasks: parse re-asks per LLM call.
        max_schema_types: the Cypher prompt lists every relationship type up to this many, else
            those of the k-hop subgraph.
        choice_cap: candidates shown to the Eq. 18/21 choice prompt.
        schema_direction: how Eq. 19's ``a ⊨ S_q in G`` reads a constraint ``(h, r, t)``.
            ``strict`` (default, the paper's Eq. 19): only the edge ``h -r-> t``. ``either``:
            ``h -r-> t`` or ``t -r-> h`` (§3.3 describes S_q as entities "linked by" relations).
            ``auto`` (ablation ``sgr_schema_either_way_fallback``, chosen on the validation
            questions): strict, and the undirected reading only when the strict one binds no
            entity to the answer variable (a schema written against the edge direction).
        row_limit, query_timeout_ms: applied to every LLM query.
        graphdb: the run's graph database (``conf/graphdb/``): a
            :class:`~kgreason.kg.cypher.LazyGraphDB` or an open :class:`GraphDB`; required when
            ``cypher`` is true. The run owns it and closes it; SGR only queries it.
        embedder: the run's :class:`~kgreason.embed.Embedder` (None: a private one, loaded on
            first use).
    """

    tasks = ("kgqa",)  # preflight: the dataset tasks this reasoner answers
    # per-question counts of the candidate cost cap (Eq. 4-6), added to the run's metrics
    metrics = ("candidates_truncated_rate", "candidates_unscored")
    embed_forms = ("triple",)  # Eq. 4 / Eq. 24 read the KG's triple embedding store (kgreason/storage/embedstore.py)

    # no per-question state lives on the reasoner, and GraphDB.run_read serialises the database's
    # reads, so concurrent examples may share it (tests/reasoners/test_sgr.py)
    thread_safe = True

    def __init__(
        self,
        *,
        kg,
        retriever,
        llm,
        schema: bool = True,
        cypher: bool = True,
        lam: float = 0.5,
        num_paths: int = 3,
        collab_iterations: int = 2,
        tau: float | None = None,
        top_k: int = 30,
        max_refine_rounds: int = 2,
        vote: str = "confidence",
        collaborate: str = "fallback",
        hops: int | None = None,
        max_hops: int = 3, gold_hops: bool = False,
        max_candidate_triples: int | None = None,
        topics: str = "question",
        stepwise: bool = True,
        stepwise_steps: int = 3,
        schema_sample: int = 15,
        evidence_k: int = 10,
        temperature: float = 0.7,
        seed: int = 0,
        max_reasks: int = 1,
        max_tokens: int = 512,
        max_schema_types: int = 200,
        choice_cap: int = 50,
        row_limit: int = 100, query_timeout_ms: int = 10_000,
        schema_direction: str = "strict", graphdb: GraphDB | None = None, embedder=None,
        on_empty: str = "answer",  # nothing linked / retrieved: the IO prompt (sgr.txt is silent)
    ) -> None:
        _check_settings(vote, collaborate, lam, schema_direction, topics)
        self.on_empty = check_on_empty("SGR", on_empty)
        self.kg, self.retriever, self.llm, self.schema_direction = kg, retriever, llm, schema_direction
        self.max_tokens = int(max_tokens)
        self.use_schema, self.use_cypher = bool(schema), bool(cypher)
        self.lam, self.num_paths, self.collab_iterations = float(lam), int(num_paths), int(collab_iterations)
        self.tau, self.top_k = tau, int(top_k)
        self.max_refine_rounds, self.vote_mode, self.collaborate = int(max_refine_rounds), vote, collaborate
        self.hops, self.max_hops, self.gold_hops = hops, int(max_hops), bool(gold_hops)
        self.max_candidate_triples = None if max_candidate_triples is None else int(max_candidate_triples)
        self.schema_sample, self.evidence_k = int(schema_sample), int(evidence_k)
        self.topics, self.use_stepwise, self.stepwise_steps = topics, bool(stepwise), int(stepwise_steps)
        if self.stepwise_steps < 1:
            raise ValueError(f"SGR: stepwise_steps (T of Eq. 7) must be at least 1, got {stepwise_steps}")
        self._rel_index: dict[str, list[int]] | None = None
        self.temperature, self.seed, self.max_reasks = float(temperature), int(seed), int(max_reasks)
        self.reask = ReaskPolicy(self.max_reasks)
        self.row_limit, self.query_timeout_ms = int(row_limit), int(query_timeout_ms)
        self.embedder = embedder if embedder is not None else Embedder()
        self.max_schema_types, self.choice_cap = int(max_schema_types), int(choice_cap)
        self.db, self.rel_types = self._open_graphdb(graphdb)
        self.prompts = {s: load_prompt("sgr", s) for s in ("structure", "schema", "cypher", "refine", "hypothesis",
                                                           "answer", "choose", "step")}

    def _open_graphdb(self, graphdb: GraphDB | None) -> tuple[GraphDB | None, dict[str, str]]:
        """The graph database and ``{KG relation: relationship type}`` of its export, opened (and
        the KG exported) up front, so an unavailable engine fails the run at build; ``(None, {})``
        without Cypher (``cypher=false``)."""
        if not self.use_cypher:
            return None, {}
        if graphdb is None:
            from kgreason.kg.source import require_in_memory

            require_in_memory(self.kg, "SGR's Cypher database export (reasoner.cypher=true; cypher=false runs on SPARQL)")
            raise ValueError("SGR with cypher=true needs a graph database: set graphdb=kuzu|falkordb|neo4j "
                             "(got graphdb=none), or reasoner.cypher=false")
        db = graphdb.open()
        return db, db.relation_types()

    # ------------------------------------------------------------------ helpers
    def _ask(self, t: Trace, purpose: str, prompt: str, parser, *, temperature: float = 0.0,
             sample_index: int = 0, seed: int | None = None) -> ParseResult:
        req = ChatRequest.of(prompt, temperature=temperature, sample_index=sample_index, seed=seed,
                             max_tokens=self.max_tokens)
        return self.ask(t, purpose, req, parser)

    def _label(self, i: int) -> str:
        return self.kg.entity_label(int(i))

    def _verbalise(self, triples: np.ndarray) -> list[str]:
        return [self.kg.verbalise(tr) for tr in triples]

    # ------------------------------------------------------------------ §3.1 S_q and G_q
    def structure_query(self, t: Trace, question: str) -> dict | None:
        """§3.1.1, Eq. 2, and §3.1.2 step 1 ("the language model identifies the central entities
        and relations in the input question"): one call, before any KG read, turns ``q`` into
        ``S_q = {V_q, R_q, C_q}`` as entity mentions, relation names/phrases and constraint
        phrases. The prompt lists the KG's relation names when there are at most
        ``max_schema_types`` of them. None when the reply cannot be read."""
        names = list(self.kg.relation_names)
        rels = "\n".join(names) if len(names) <= self.max_schema_types else \
            f"({len(names)} relations, too many to list: write short relation phrases)"
        res = self._ask(t, "structure", render(self.prompts["structure"], relations=rels, question=question),
                        parse_structure)
        return res.value if res.ok else None

    def map_relations(self, phrases: Sequence[str]) -> tuple[list[int], list[tuple[str, list[str]]]]:
        """``R_q ⊆ R`` (Eq. 2): each relation the model wrote is matched to the KG's relation
        types: an exact name first; else its :func:`relation_key` equal to the key of a KG
        relation's full name or of its last dotted segment (``produced by`` →
        ``film.film.produced_by``; a segment shared by several relations maps to all of them).
        Returns ``(relation ids, [(phrase, matched KG names)])``; a phrase matching nothing maps to
        ``[]``."""
        kg = self.kg
        if self._rel_index is None:
            idx: dict[str, list[int]] = {}
            for rid, name in enumerate(kg.relation_names):
                for key in {relation_key(name), relation_key(name.rsplit(".", 1)[-1])}:
                    if key:
                        idx.setdefault(key, []).append(rid)
            self._rel_index = idx
        ids: list[int] = []
        mapped: list[tuple[str, list[str]]] = []
        for ph in phrases:
            got = [kg.relation_id(ph)] if kg.has_relation(ph) else list(self._rel_index.get(relation_key(ph), []))
            mapped.append((ph, [kg.relation_names[i] for i in got]))
            ids += got
        return list(dict.fromkeys(ids)), mapped

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
        sims = self.embedder.similarity([question], self._verbalise(allt))[0]  # Eq. 4
        order = np.argsort(-sims, kind="stable")
        if self.tau is not None:
            order = order[sims[order] >= float(self.tau)]  # Eq. 5: every triple with s >= tau
        else:
            order = order[: self.top_k]  # Eq. 6
        return allt[order], sims[order], len(allt)

    # ------------------------------------------------------------------ Eq. 19–20 validation
    def schema_bindings(self, schema: Sequence[tuple[str, str, str]], topics: Sequence[int],
                        directed: bool = True) -> dict[str, set[int]]:
        """Propagate the schema constraints through the KG: every variable's possible entities.

        Constants are linked with ``KG.find_entity``; a topic entity named in the schema anchors it.
        Constraints are applied in order, forwards (head known → tails via r) and backwards
        (tail known → heads), intersecting with what a variable already holds, for ``L`` passes.
        ``directed=False`` lets a constraint ``(h, r, t)`` match the edge ``t -r-> h`` as well.
        """
        kg = self.kg
        bind: dict[str, set[int]] = {}

        def val(v: str) -> set[int] | None:
            if v.startswith("?"):
                return bind.get(v)
            i = kg.find_entity(v)
            return {i} if i >= 0 else set()

        def step(ents: set[int], rid: int, forward: bool) -> set[int]:
            out: set[int] = set()
            for e in ents:
                if forward or not directed:
                    out.update(int(kg.tails[x]) for x in kg.out_triples(e) if kg.rels[x] == rid)
                if not forward or not directed:
                    out.update(int(kg.heads[x]) for x in kg.in_triples(e) if kg.rels[x] == rid)
            return out

        for _ in range(max(1, len(schema))):
            changed = False
            for h, r, tl in schema:
                try:
                    rid = kg.relation_id(r)
                except KeyError:
                    continue
                hv, tv = val(h), val(tl)
                if hv is not None and tl.startswith("?"):
                    nxt = step(hv, rid, forward=True)
                    new = nxt if tv is None else (tv & nxt)
                    if new != tv:
                        bind[tl], changed = new, True
                if tv is not None and h.startswith("?"):
                    prv = step(val(tl) or set(), rid, forward=False)
                    new = prv if hv is None else (hv & prv)
                    if new != hv:
                        bind[h], changed = new, True
            if not changed:
                break
        return bind

    def _answer_var(self, schema_val: dict) -> str | None:
        if schema_val.get("answer") and schema_val["answer"].startswith("?"):
            return schema_val["answer"]
        for h, _, tl in reversed(schema_val["schema"]):
            for v in (tl, h):
                if v.startswith("?"):
                    return v
        return None

    # ------------------------------------------------------------------ Cypher
    def _run_cypher(self, t: Trace, name: str, query: str, params: dict | None = None) -> tuple[list[dict] | None, str]:
        """Guarded read; returns (rows or None, status message) and records a ``cypher`` step."""
        try:
            rows = self.db.run_read(query, params or {}, limit=self.row_limit, timeout_ms=self.query_timeout_ms)
        except CypherRejected as e:
            t.add("cypher", name, query=query, status="rejected", reason=e.reason)
            return None, f"rejected by the read-only guard: {e.reason}"
        except CypherError as e:
            t.add("cypher", name, query=query, status="error", reason=str(e)[:500])
            return None, f"database error: {str(e)[:300]}"
        t.add("cypher", name, query=query, status="ok" if rows else "empty", n_rows=len(rows))
        return rows, "ok" if rows else "the query returned no rows"

    def _rows_to_entities(self, rows: list[dict]) -> list[int]:
        out = []
        for r in rows:
            vals = [r["answer"]] if "answer" in r else list(r.values())
            for v in vals:
                if isinstance(v, dict) or (hasattr(v, "get") and not isinstance(v, str)):  # kuzu / neo4j node
                    v = v.get("name")
                elif hasattr(v, "properties"):  # FalkorDB node
                    v = v.properties.get("name")
                if isinstance(v, str):
                    i = self.kg.find_entity(v)
                    if i >= 0:
                        out.append(i)
                        break
        return list(dict.fromkeys(out))

    # ------------------------------------------------------------------ P_θ
    def _p_theta(self, prompt: str, candidates: list[str]) -> list[float] | None:
        """Softmax-normalised ``llm.score`` over ``candidates``; None when unsupported."""
        try:
            lp = self.llm.score((Message("user", prompt),), candidates)
        except (ScoringUnsupported, NotImplementedError, AttributeError):
            return None
        lp = np.asarray(lp, dtype=np.float64)
        p = np.exp(lp - lp.max())
        return (p / p.sum()).tolist()

    # ------------------------------------------------------------------ main
    def answer(self, example: Example) -> Prediction:
        """The SGR pipeline, one method per paper step (module docstring steps 1–8)."""
        t = Trace()
        # §3.1.2 step 1 / Eq. 2, before any KG read. "Without Schema" (§4.3: "removing
        # schema-guided subgraph generation") makes no S_q: V_q from the dataset, no R_q, no C_q
        sq = self.structure_query(t, example.question) if self.use_schema else None
        if self.use_schema and self.topics == "question":
            link, vq_source = link_mentions(self.kg, sq["entities"] if sq else []), "question"
        else:
            link, vq_source = link_example(self.kg, example), "dataset"
        t.add("link", "topic_entities", linked=link.linked, failed=link.failed, source=vq_source)
        if not link.ids:
            answers = answer_without_retrieval(self.llm, t, example.question, self.on_empty)
            return t.finish(example, answers, retrieved=[], link_failed=True, retrieval_empty=True,
                            vq_source=vq_source, s_q_ok=sq is not None if self.use_schema else None)
        topics = link.ids
        rq, rq_map = self.map_relations(sq["relations"]) if sq else ([], [])
        constraints = "; ".join(sq["constraints"]) if sq and sq["constraints"] else "(none)"
        t.add("structure", "S_q", V_q=[self._label(i) for i in topics], R_q=rq_map, C_q=constraints)
        sub = t.retrieval("khop", self.retriever.retrieve(topics, self.hop_budget(example)), self.kg)
        if not any(len(h) for h in sub.triples_by_hop):
            answers = answer_without_retrieval(self.llm, t, example.question, self.on_empty)
            return t.finish(example, answers, retrieved=[], search_space=0, retrieval_empty=True, vq_source=vq_source)
        estar, counts = self.candidate_subgraph(t, example.question, sub, rq)
        ctx = self.prompt_context(example.question, topics, sub, estar)
        ctx["constraints"] = constraints
        # §3.2-3.3: stepwise paths over G_q, each with alpha_i (Eq. 13)
        steps = self.stepwise(t, example, estar, constraints) if self.use_stepwise and len(estar) else []
        schema_val = self.generate_schema(t, ctx, estar) if self.use_schema else None
        subgraph_ents = set(sub.entities().tolist())
        db_ents: list[int] = []
        if self.use_cypher:
            allowed = self.valid_answer_set(schema_val, topics, subgraph_ents, t)
            ctx["schema"] = self.schema_text(schema_val, db_types=True) if self.use_schema else "(no schema)"
            valid, refine_rounds, db_ents = self.direct_reasoning(t, ctx, allowed,
                                                                  "schema" if schema_val else "khop")
        else:  # "without neo4j": no structured retrieval at all, so nothing to validate against
            ctx["schema"] = self.schema_text(schema_val, db_types=False)
            valid, refine_rounds = self.embedding_candidates(t, estar, topics), 0
        direct, p_source, p_top = self.rank_valid_answers(t, ctx, valid) if valid else ([], None, None)
        paths = [(a, w, "stepwise") for a, w in steps]
        if direct:  # the direct answer (Eq. 18/21) is one path: C = 1 (it satisfies S_q in G, Eq. 19)
            paths.append((direct[0], self.lam * p_top + (1.0 - self.lam), "direct"))
        path = "direct"
        if (not valid and self.collaborate == "fallback") or self.collaborate == "always":
            path = "collaborative"
            collab, p_source = self.collaborative(t, example, estar)
            paths += [(a, w, "collaborative") for a, w in collab]
        # Eq. 14 over every path; with A+_q non-empty the answer comes from A+_q (Eq. 21)
        answers = self.integrate(t, paths, direct, restrict=bool(direct) and self.use_cypher)
        # retrieval rate: entities retrieved from the KG (k-hop subgraph, database rows), never answers
        retrieved = sorted({self._label(e) for e in subgraph_ents | set(db_ents)})
        step_src = next((s.data["p_theta_source"] for s in t.steps if s.kind == "stepwise" and s.name == "paths"), None)
        return t.finish(example, answers, retrieved=retrieved, search_space=int(counts["candidates_scored"]),
                        **counts, vq_source=vq_source, r_q=[n for _, ns in rq_map for n in ns],
                        refine_rounds=refine_rounds, path=path, p_theta_source=p_source,
                        stepwise_paths=len(steps), stepwise_p_theta_source=step_src,
                        schema_ok=schema_val is not None, vote_mode=self.vote_mode if paths else None,
                        retrieval_empty=False)

    # ------------------------------------------------------------------ §3.2–3.3 stepwise
    def stepwise(self, t: Trace, example: Example, estar: np.ndarray, constraints: str) -> list[tuple[str, float]]:
        """§3.3, Eq. 12–13: ``M = num_paths`` stepwise paths over ``G_q``
        (:meth:`stepwise_path`), each weighted ``α_i = λ P_θ(a_i | q, p_i) + (1 − λ) C(p_i, G_q)``
        with ``P_θ`` from :meth:`path_p_theta` (log-probs, else the answer's frequency over the M
        paths). Returns ``[(a_i, α_i)]``; the trace's ``stepwise`` / ``paths`` step has every
        term."""
        lines = "\n".join(f"{j + 1}. {self.kg.verbalise(tr)}" for j, tr in enumerate(estar))
        answers, consistency, texts = [], [], []
        for i in range(self.num_paths):
            a, c, txt = self.stepwise_path(t, example, i, estar, lines, constraints)
            answers.append(a)
            consistency.append(c)
            texts.append(txt)
        p_vals, source = self.path_p_theta(example, answers, texts)
        alpha = [self.lam * p + (1.0 - self.lam) * c for p, c in zip(p_vals, consistency)]  # Eq. 13
        t.add("stepwise", "paths", answers=answers, p_theta=p_vals, consistency=consistency, alpha=alpha,
              lam=self.lam, p_theta_source=source)
        return list(zip(answers, alpha))

    def stepwise_path(self, t: Trace, example: Example, i: int, estar: np.ndarray, lines: str,
                      constraints: str) -> tuple[str, float, str]:
        """§3.2, Eq. 7–11 for path ``p_i``: at step ``t`` the model sees q, ``C_q``, the numbered
        ``E*_q`` and its earlier states ``z_<t``, picks a triple ``e_t`` (a number, or a triple
        it writes) and writes ``z_t = f_θ(q, z_<t, e_t)`` (Eq. 8), sampled with seed ``seed + i``;
        the path ends with an answer or after ``stepwise_steps`` (T) steps, and an unreadable
        reply ends it. ``C(p, G_q) = (1/T) Σ_t I(e_t ∈ E*_q)`` (Eq. 10): only triples of ``E*_q``
        count (a written triple counts when it is one of them; one the KG has outside ``E*_q``
        does not). Returns ``(a_i, C, the path as text)``."""
        estar_set = {tuple(int(x) for x in tr) for tr in estar.tolist()}
        states: list[str] = []
        inside: list[bool] = []
        used: list[str] = []
        answer = ""
        for step in range(self.stepwise_steps):
            last = "This is the last step: give your answer." if step == self.stepwise_steps - 1 else ""
            prompt = render(self.prompts["step"], question=example.question, constraints=constraints, triples=lines,
                            states="\n".join(f"{j + 1}. {z}" for j, z in enumerate(states)) or "(none)", last=last)
            res = self._ask(t, f"step_p{i}_t{step}", prompt, parse_step, temperature=self.temperature,
                            sample_index=i * 100 + step, seed=self.seed + i)
            if not res.ok:
                break
            text, ok = self._step_triple(res.value["triple"], estar, estar_set)
            inside.append(ok)
            used.append(text)
            states.append(res.value["state"] or text)
            if res.value["answer"]:
                answer = res.value["answer"]
                break
        ai = self.kg.find_entity(answer) if answer else -1
        answer = self._label(ai) if ai >= 0 else answer
        c = sum(inside) / len(inside) if inside else 0.0  # Eq. 10
        t.add("path", f"stepwise_p{i}", answer=answer, consistency=c, in_estar=inside, triples=used)
        return answer, c, "\n".join(f"{e} => {z}" for e, z in zip(used, states))

    def _step_triple(self, triple, estar: np.ndarray, estar_set: set) -> tuple[str, bool]:
        """``e_t`` of one step as text, and ``I(e_t ∈ E*_q)`` (Eq. 10)."""
        if triple is None:
            return "(no triple)", False
        if isinstance(triple, int):
            if 1 <= triple <= len(estar):
                return self.kg.verbalise(estar[triple - 1]), True
            return f"(no triple {triple})", False
        h, r, tl = triple
        hi, ti = self.kg.find_entity(h), self.kg.find_entity(tl)
        rids, _ = self.map_relations([r])
        ok = hi >= 0 and ti >= 0 and any((hi, rid, ti) in estar_set for rid in rids)
        return f"{h} | {r} | {tl}", bool(ok)

    def integrate(self, t: Trace, paths: list[tuple[str, float, str]], direct: list[str], restrict: bool) -> list[str]:
        """§3.3, Eq. 14: ``â = argmax_a Σ_i α_i I(a_i = a)`` over every candidate path (the
        stepwise paths with α_i, the direct answer, the §3.5 paths with β_i; ``vote=majority``:
        every weight 1). With ``restrict`` (a non-empty validated ``A+_q``) only answers in
        ``A+_q`` are chosen (Eq. 21: "the final answer is selected from the validated candidate
        set"). The rest of the direct ranking follows, so the answer list keeps ``A+_q``."""
        ranking = vote([a for a, _, _ in paths], [w for _, w, _ in paths], self.vote_mode)
        allowed = set(direct)
        ranked = [a for a, _ in ranking if not restrict or a in allowed]
        out = ranked + [a for a in direct if a not in ranked]
        if paths:
            t.add("integrate", self.vote_mode, paths=[{"source": s, "answer": a, "weight": w} for a, w, s in paths],
                  restricted_to_valid=restrict, ranking=ranking[:20])
        return out

    def prompt_context(self, question: str, topics: Sequence[int], sub, estar: np.ndarray) -> dict:
        """What every prompt shares: question, topic names, the k-hop relations, the evidence
        triples of ``E*_q`` and the exact graph schema of the DB (all types, or those near the
        topics when the graph has more than ``max_schema_types``)."""
        near = self.nearby_relations(sub)
        shown = None if len(self.rel_types) <= self.max_schema_types else near
        return {"question": question, "topics": ", ".join(self._label(i) for i in topics), "constraints": "(none)",
                "relations": "\n".join(near) or "(none)",
                "evidence": "\n".join(self.kg.verbalise(tr) for tr in estar[: self.evidence_k]) or "(none)",
                "graph_schema": graph_schema_text(self.rel_types, shown) if self.use_cypher else "",
                "near_types": ", ".join(self.rel_types[r] for r in near if r in self.rel_types)}

    def schema_text(self, schema_val: dict | None, db_types: bool) -> str:
        """``S_q`` as prompt lines. ``db_types``: as Cypher patterns with the DB's relationship
        types and bare variables (a real 1.5B model copied ``?x`` into its query), e.g.
        ``(:Entity {name: 'Daisy Miller'})-[:directed_by]->(x)``; else ``(h, r, t)`` triples."""
        if not schema_val:
            return "(no schema)"
        if not db_types:
            return "\n".join(f"({h}, {r}, {tl})" for h, r, tl in schema_val["schema"])

        def node(v: str) -> str:
            return f"({v[1:]})" if v.startswith("?") else "(:Entity {name: '" + v.replace("'", "\\'") + "'})"
        lines = [f"{node(h)}-[:{self.rel_types.get(r, r)}]->{node(tl)}" for h, r, tl in schema_val["schema"]]
        avar = self._answer_var(schema_val)
        return "\n".join(lines + ([f"answer variable: {avar[1:]}"] if avar else []))

    # ------------------------------------------------------------------ §3.1.2 candidate subgraph
    def candidate_subgraph(self, t: Trace, question: str, sub, rq: Sequence[int]) -> tuple[np.ndarray, dict]:
        """§3.1.2 steps 2–3: the candidates (:meth:`candidates`, guided by ``R_q``) and ``E*_q``
        (:meth:`subgraph`), recorded as the ``subgraph`` step. Returns ``(E*_q, counts)`` where
        counts holds ``candidates_total``, ``candidates_scored``, ``candidates_truncated``
        (total > scored: the ``max_candidate_triples`` cap cut them) and ``rq_fallback``."""
        cands, fallback = self.candidates(sub, rq)
        estar, scores, n_scored = self.subgraph(question, cands)
        counts = {"candidates_total": int(len(cands)), "candidates_scored": int(n_scored),
                  "candidates_truncated": bool(len(cands) > n_scored), "rq_fallback": bool(fallback)}
        t.add("subgraph", "E*_q", **counts, kept=len(estar), tau=self.tau, top_k=self.top_k,
              top=[(self.kg.verbalise(tr), round(float(s), 4)) for tr, s in zip(estar[:10], scores[:10])])
        return estar, counts

    def nearby_relations(self, sub) -> list[str]:
        """Sorted names of the relations in the k-hop subgraph (shown to the schema and Cypher
        prompts so the model uses the KG's own relation types)."""
        if not sub.triples_by_hop or not sum(len(x) for x in sub.triples_by_hop):
            return []
        return sorted({self.kg.relation_names[int(r)] for r in np.concatenate(sub.triples_by_hop)[:, 1]})

    # ------------------------------------------------------------------ §3.4.1 schema
    def generate_schema(self, t: Trace, ctx: dict, estar: np.ndarray) -> dict | None:
        """§3.4.1, Eq. 15 (prompt of the end of §3.3): the LLM, as a KG expert shown sample
        triples of ``E*_q``, writes ``S_q = {(v_i, r_i, v_j)}``. Triples whose relation the KG
        does not have are dropped; None when nothing usable is left."""
        sample = "\n".join(self.kg.verbalise(tr) for tr in estar[: self.schema_sample]) or "(none)"
        res = self._ask(t, "schema", render(self.prompts["schema"], triples=sample, **ctx), parse_schema)
        if not res.ok:
            return None
        known = [tr for tr in res.value["schema"] if self.kg.has_relation(tr[1])]
        dropped = [tr for tr in res.value["schema"] if not self.kg.has_relation(tr[1])]
        schema_val = {"schema": known, "answer": res.value["answer"]} if known else None
        t.add("schema", "S_q", schema=known, dropped_unknown_relations=dropped,
              answer_var=self._answer_var(schema_val) if schema_val else None)
        return schema_val

    # ------------------------------------------------------------------ §3.4.2 validation
    def valid_answer_set(self, schema_val: dict | None, topics: Sequence[int], subgraph_ents: set[int],
                         t: Trace | None = None) -> set[int]:
        """§3.4.2, Eq. 19: the entities ``a`` with ``V(a, S_q, G) = 1``: those bound to the
        schema's answer variable (:meth:`schema_bindings`, read as ``schema_direction`` says), or
        without a schema the k-hop subgraph's entities; topic entities are never answers."""
        if not schema_val:
            return subgraph_ents - set(topics)
        avar = self._answer_var(schema_val)
        if not avar:
            return set()
        mode = self.schema_direction
        allowed = self.schema_bindings(schema_val["schema"], topics, directed=mode != "either").get(avar, set())
        allowed -= set(topics)
        if mode == "auto":
            if not allowed:
                allowed = self.schema_bindings(schema_val["schema"], topics, directed=False).get(avar, set()) - set(topics)
                mode = "either (strict bound nothing)"
            else:
                mode = "strict"
        if t is not None:
            t.add("schema", "V_reading", direction=mode, n_valid=len(allowed))
        return allowed

    @staticmethod
    def validate(cands: list[int], allowed: set[int]) -> list[int]:
        """Eq. 20: ``A+_q = {a ∈ A_q | V(a, S_q, G) = 1}``, in ``A_q``'s order."""
        return [c for c in cands if c in allowed]

    # ------------------------------------------------------------------ §3.4 direct reasoning
    def direct_reasoning(self, t: Trace, ctx: dict, allowed: set[int],
                         rule: str = "schema") -> tuple[list[int], int, list[int]]:
        """§3.4: write ``c_q = g(q, S_q)`` (Eq. 16), execute and validate it (Eq. 17, 19–20);
        while ``A+_q`` is empty, Refine (Eq. 22) up to ``max_refine_rounds`` times; a database
        error goes back with the valid relationship types. Returns ``(A+_q, refine rounds used,
        every entity the DB returned)``."""
        valid: list[int] = []
        seen: list[int] = []
        refine_rounds = 0
        attempts: list[tuple[str, str]] = []
        query = self.write_cypher(t, ctx)
        for round_ in range(self.max_refine_rounds + 1):
            if round_ > 0:
                refine_rounds = round_
                query = self.refine_cypher(t, ctx, attempts, round_)
            if not query:
                attempts.append(("", "no query could be parsed from the reply"))
                continue
            valid, msg, cands = self.execute_and_validate(t, query, round_, allowed, rule)
            seen += cands
            if valid:
                break
            if msg.startswith("database error"):
                msg += f"\nValid relationship types near the topic entities: {ctx['near_types'] or '(none)'}"
            attempts.append((query, msg))
        return valid, refine_rounds, list(dict.fromkeys(seen))

    def write_cypher(self, t: Trace, ctx: dict) -> str:
        """§3.4.1, Eq. 16: ``c_q = g_φ(q, S_q)``, the NL→Cypher call ("" when unparseable)."""
        res = self._ask(t, "cypher", render(self.prompts["cypher"], **ctx), parse_cypher)
        return res.value if res.ok else ""

    def refine_cypher(self, t: Trace, ctx: dict, attempts: list[tuple[str, str]], round_: int) -> str:
        """§3.4.2, Eq. 22: ``A+_q = ∅ ⇒ Refine(q, S_q, G)``: a new query written with every
        earlier query and what went wrong with it ("" when unparseable)."""
        att = "\n\n".join(f"Query:\n{q or '(none)'}\nProblem: {msg}" for q, msg in attempts)
        res = self._ask(t, "refine", render(self.prompts["refine"], attempts=att, **ctx), parse_cypher)
        t.add("refine", f"round_{round_}", previous=[m for _, m in attempts])
        return res.value if res.ok else ""

    def execute_and_validate(self, t: Trace, query: str, round_: int, allowed: set[int],
                             rule: str = "schema") -> tuple[list[int], str, list[int]]:
        """Eq. 17 ``A_q = Exec(c_q, G)`` through the read-only guard, then Eq. 19–20 (``rule``:
        ``schema``, ``allowed`` = the entities satisfying ``S_q``; ``khop``, without an ``S_q``:
        the k-hop subgraph's entities). Returns ``(A+_q, what went wrong for the refine prompt, A_q)``."""
        rows, msg = self._run_cypher(t, "direct" if round_ == 0 else f"refine_{round_}", query)
        # A_q is a set (Eq. 17-18): canonical order, not the database's row order, so the P_θ ties
        # and the choice_cap cut are the same on every KG backend
        cands = canonical_entities(self.kg, dict.fromkeys(self._rows_to_entities(rows or [])))
        valid = self.validate(cands, allowed)
        t.add("validate", f"round_{round_}", rule=rule, candidates=[self._label(c) for c in cands[:50]],
              valid=[self._label(c) for c in valid[:50]])
        if not valid and rows is not None and cands:
            msg = (f"{len(cands)} answers ({', '.join(self._label(c) for c in cands[:5])}) but none "
                   + ("satisfies the schema constraints in the graph" if rule == "schema"
                      else "is an entity of the topic entities' k-hop subgraph"))
        elif not valid and rows is not None and rows:
            msg = "the rows contain no entity names of the graph (return the answer names)"
        return valid, msg, cands

    def embedding_candidates(self, t: Trace, estar: np.ndarray, topics: Sequence[int]) -> list[int]:
        """Ablation "without neo4j" (Fig. 3): no structured retrieval, so ``A_q`` = the entities of
        ``E*_q`` (embedding top-k), best triple first, not validated against the graph (Eq. 19's
        check is itself a graph query); Eq. 18 then chooses among them."""
        cands = []
        for h, _, tl in estar.tolist():
            for e in (tl, h):
                if e not in topics:
                    cands.append(int(e))
        cands = list(dict.fromkeys(cands))
        t.add("candidates", "embedding_topk", candidates=[self._label(c) for c in cands[:50]])
        return cands

    def rank_valid_answers(self, t: Trace, ctx: dict, valid: list[int]) -> tuple[list[str], str | None, float]:
        """Eq. 18/21: ``â = argmax_a P_θ(a | q, A+_q, S_q)``. ``P_θ`` from prompt log-probs
        (``llm.score``, source ``logprobs``) where the backend has them, else the model is asked
        to choose one of the first ``choice_cap`` candidates (:meth:`choose`, ``chat_choice``).
        Returns ``(answer names, best first; P_θ source, None for a single answer; P_θ of the
        first: its log-prob share, 1 for a single answer or the model's choice, 1/n when the choice
        could not be read)``."""
        names = [self._label(c) for c in valid]
        p_source, p_top = None, 1.0
        if len(names) > 1:
            prompt = render(self.prompts["answer"], question=ctx["question"],
                            path=f"schema: {ctx['schema']}\nvalid answers: {', '.join(names[:50])}")
            p = self._p_theta(prompt, names)
            if p is not None:
                p_source, p_top = "logprobs", float(max(p))
                names = [names[i] for i in np.argsort(-np.asarray(p), kind="stable")]
            else:
                names, p_source = self.choose(t, ctx, names)
                p_top = 1.0 if p_source == "chat_choice" else 1.0 / len(names)
        t.add("answer", "direct", answers=names[:20], p_theta_source=p_source, p_theta=p_top)
        return names, p_source, p_top

    def choose(self, t: Trace, ctx: dict, names: list[str]) -> tuple[list[str], str]:
        """Eq. 18/21 on a chat-only endpoint: the model picks one candidate by number; it goes
        first, the rest keep their order. An unparseable reply keeps the order
        (``chat_choice_unparsed``)."""
        shown = names[: self.choice_cap]
        prompt = render(self.prompts["choose"], question=ctx["question"], schema=ctx["schema"],
                        evidence=ctx["evidence"], candidates="\n".join(f"{i + 1}. {n}" for i, n in enumerate(shown)))
        res = self._ask(t, "choose", prompt, parse_choice(shown))
        if not res.ok:
            return names, "chat_choice_unparsed"
        best = shown[res.value]
        return [best] + [n for n in names if n != best], "chat_choice"

    # ------------------------------------------------------------------ §3.5 collaborative
    def _retrieve_evidence(self, t: Trace, hypothesis: dict, pool: list[str]) -> list[str]:
        """Eq. 24: triples around the entities the hypothesis names (a Cypher query), ranked by
        cosine to it. Without the DB ("without neo4j") no structured retrieval runs: the
        ``pool`` of ``E*_q`` triples is ranked by cosine instead."""
        kg = self.kg
        if not self.use_cypher:
            if not pool:
                return []
            sims = self.embedder.similarity([hypothesis["hypothesis"] or hypothesis["answer"]], pool)[0]
            return [pool[i] for i in np.argsort(-sims, kind="stable")[: self.evidence_k]]
        names = [x for c in hypothesis["claims"] for x in (c[0], c[2])] + [hypothesis["answer"]]
        ids = list(dict.fromkeys(i for i in (kg.find_entity(n) for n in names if n) if i >= 0))
        if not ids:
            return []
        rows, _ = self._run_cypher(
            t, "retrieve",
            "MATCH (a:Entity)-[r]->(b:Entity) WHERE a.name IN $names OR b.name IN $names "
            "RETURN a.name AS h, r.relation AS rel, b.name AS tl", {"names": [kg.entity_names[i] for i in ids]})
        texts = [f"{kg.entity_label(kg.find_entity(r['h']))} | {r['rel']} | {kg.entity_label(kg.find_entity(r['tl']))}"
                 for r in rows or []]
        texts = sorted(texts)  # the database's row order is no tie-break (canonical, as every score tie)
        if not texts:
            return []
        sims = self.embedder.similarity([hypothesis["hypothesis"] or hypothesis["answer"]], texts)[0]
        return [texts[i] for i in np.argsort(-sims, kind="stable")[: self.evidence_k]]

    def _claims_in_graph(self, claims: Sequence[tuple[str, str, str]]) -> bool:
        """``I(E_t ⊆ G)`` (Eq. 30): every claimed triple exists in the KG; no claims = not grounded."""
        kg = self.kg
        if not claims:
            return False
        for h, r, tl in claims:
            hi, ti = kg.find_entity(h), kg.find_entity(tl)
            try:
                ri = kg.relation_id(r)
            except KeyError:
                return False
            if hi < 0 or ti < 0:
                return False
            out = kg.out_triples(hi)
            if not np.any((kg.rels[out] == ri) & (kg.tails[out] == ti)):
                return False
        return True

    def collaborative(self, t: Trace, example: Example, estar: np.ndarray) -> tuple[list[tuple[str, float]], str]:
        """§3.5, Eq. 23–31: ``M`` reasoning paths (:meth:`reasoning_path`), their confidence
        ``β_i = λ P_θ(a_i | q, p_i) + (1 − λ) C(p_i, G)`` (Eq. 29) and the weighted vote
        (Eq. 31, recorded as the ``vote`` step). Returns ``([(a_i, β_i)], P_θ source)``: the
        final choice pools these paths with the others (:meth:`integrate`)."""
        pool = [self.kg.verbalise(tr) for tr in estar]
        base_evidence = pool[: self.evidence_k]
        answers, consistency, paths_txt = [], [], []
        for i in range(self.num_paths):
            a, c, txt = self.reasoning_path(t, example, i, base_evidence, pool)
            answers.append(a)
            consistency.append(c)
            paths_txt.append(txt)
        p_vals, source = self.path_p_theta(example, answers, paths_txt)
        beta = [self.lam * p + (1.0 - self.lam) * c for p, c in zip(p_vals, consistency)]  # Eq. 29
        ranking = vote(answers, beta, self.vote_mode)  # Eq. 31
        t.add("vote", self.vote_mode, answers=answers, p_theta=p_vals, consistency=consistency, beta=beta,
              lam=self.lam, p_theta_source=source, ranking=ranking)
        return list(zip(answers, beta)), source

    def reasoning_path(self, t: Trace, example: Example, i: int, base_evidence: list[str],
                       pool: list[str]) -> tuple[str, float, str]:
        """§3.5, Eq. 23–28 and 30: path ``p_i`` alternates ``T`` hypotheses
        ``h_t = f_θ(q, E_<t, h_<t)`` (sampled, seed ``seed + i``) and retrievals
        ``E_t = Retrieve(h_t, G)``. Returns ``(a_i, C(p_i, G), the path as text)`` where ``C`` is
        the share of steps whose claimed triples all lie in the KG."""
        evidence = list(base_evidence)
        hyps: list[dict] = []
        grounded: list[bool] = []
        for step in range(self.collab_iterations):
            prompt = render(self.prompts["hypothesis"], question=example.question,
                            evidence="\n".join(evidence) or "(none)",
                            hypotheses="\n".join(f"{j + 1}. {h['hypothesis']} (answer: {h['answer']})" for j, h in enumerate(hyps)) or "(none)")
            res = self._ask(t, f"hypothesis_p{i}_t{step}", prompt, parse_hypothesis,
                            temperature=self.temperature, sample_index=i * 100 + step, seed=self.seed + i)
            if not res.ok:
                grounded.append(False)
                continue
            h = res.value
            hyps.append(h)
            grounded.append(self._claims_in_graph(h["claims"]))
            new = self._retrieve_evidence(t, h, pool)
            evidence = list(dict.fromkeys(evidence + new))
        a = hyps[-1]["answer"] if hyps else ""
        ai = self.kg.find_entity(a) if a else -1
        a = self._label(ai) if ai >= 0 else a
        c = sum(grounded) / len(grounded) if grounded else 0.0  # Eq. 30
        t.add("path", f"p{i}", answer=a, consistency=c, grounded=grounded, n_hypotheses=len(hyps))
        return a, c, "\n".join(f"{h['hypothesis']} claims={list(map(list, h['claims']))}" for h in hyps)

    def path_p_theta(self, example: Example, answers: list[str], paths_txt: list[str]) -> tuple[list[float], str]:
        """Eq. 29's ``P_θ(a_i | q, p_i)`` per path: ``llm.score`` softmax-normalised over the
        distinct answers when the backend scores, else ``a_i``'s frequency over the M paths.
        Returns ``(values, "logprobs" | "frequency")``."""
        distinct = list(dict.fromkeys(a for a in answers if a))
        scored = None
        if distinct:
            scored = []
            for i, a in enumerate(answers):
                prompt = render(self.prompts["answer"], question=example.question, path=paths_txt[i] or "(none)")
                p = self._p_theta(prompt, distinct)
                if p is None:
                    scored = None
                    break
                scored.append(p[distinct.index(a)] if a else 0.0)
        if scored is not None and distinct:
            return scored, "logprobs"
        freq = Counter(a for a in answers if a)
        return [freq[a] / len(answers) if a else 0.0 for a in answers], "frequency"

    def close(self) -> None:
        """Nothing to release: the graph database belongs to the run that built it."""
