"""The SGR reasoner: §3's pipeline over the components of shared/papers/sgr.txt (how the parts
combine, with the sentences that decide it: docs/sgr.md).

:meth:`SGR.answer` is the pipeline, one call per component:

1. §3.1 structured subgraph generation (:mod:`~kgreason.reasoners.sgr.subgraph`): ``S_q`` (Eq. 2),
   ``V_q``, ``R_q``, ``C_q``, the candidates and ``E*_q`` (Eq. 4–6);
2. §3.2–3.3 stepwise reasoning and its integration (:mod:`~kgreason.reasoners.sgr.stepwise`):
   Eq. 7–13 and Eq. 14's answer over the stepwise paths;
3. §3.4 direct reasoning (:mod:`~kgreason.reasoners.sgr.direct`): schema (Eq. 15), Cypher
   (Eq. 16–17), validation (Eq. 19–20), Refine (Eq. 22), the Eq. 18/21 choice;
4. §3.5 collaborative reasoning (:mod:`~kgreason.reasoners.sgr.collaborative`), when direct
   reasoning validated nothing (``collaborate: fallback``): Eq. 23–30 and Eq. 31's answer;
5. the final answer (:meth:`SGR.decide`), read from the paper: Eq. 21 "If A+_q is non-empty, the
   final answer is selected from the validated candidate set"; else, §3.5 having run ("When direct
   reasoning fails to produce a correct answer, the framework applies collaborative reasoning
   enhancement"), its Eq. 31 ("The final answer is selected by aggregating candidate answers from
   all reasoning paths"); else Eq. 14 over §3.3's paths ("The final answer is obtained by
   aggregating candidate answers from different reasoning paths"); else the unvalidated direct
   choice. Pooling both path families into one vote is the ablation ``decision: pooled``.

A question whose ``V_q`` links nothing, or whose k-hop subgraph holds no triple, gets the IO answer
(``on_empty: answer``; ``abstain``: none). Every question records its funnel stages
(:attr:`SGR.funnel`) in ``extra["funnel"]``.
"""

from __future__ import annotations

from kgreason.embed import Embedder
from kgreason.kg.cypher import GraphDB
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, load_prompt, load_schema
from kgreason.reasoners.io import answer_without_retrieval, check_on_empty
from kgreason.reasoners.sgr.collaborative import CollaborativeReasoning
from kgreason.reasoners.sgr.common import PathVote, max_tokens_table, vote
from kgreason.reasoners.sgr.direct import DirectReasoning, DirectResult
from kgreason.reasoners.sgr.stepwise import StepwiseReasoning
from kgreason.reasoners.sgr.subgraph import QuestionGraph, SubgraphConstruction
from kgreason.types import Example, Prediction

#: the prompts of every SGR call, loaded in one place (kgreason/reasoners/prompts/sgr/<name>.txt)
PROMPTS = ("structure", "schema", "cypher", "refine", "hypothesis", "answer", "choose", "step")


def _check_settings(vote: str, collaborate: str, lam: float, schema_direction: str = "strict",
                    topics: str = "question", decision: str = "cascade", rq_match: str = "embedding") -> None:
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
    if decision not in ("cascade", "pooled"):
        raise ValueError(f"SGR: decision (the final answer's rule) must be cascade | pooled, got {decision!r}")
    if rq_match not in ("embedding", "exact"):
        raise ValueError(f"SGR: rq_match (how R_q phrases map to KG relations) must be embedding | exact, got {rq_match!r}")


class SGR(SubgraphConstruction, StepwiseReasoning, DirectReasoning, CollaborativeReasoning, BaseReasoner):
    """The SGR reasoner. Settings map to paper knobs; see conf/reasoner/sgr.yaml (each default the
    paper does not give is labelled there and in docs/sgr.md).

    Args:
        schema: make the Eq. 15 schema and use it (False = ablation "Without Schema", Table 2 /
            Fig. 2: no schema call, none in the Cypher/Refine prompts; Eq. 19 reads Eq. 2's
            ``S_q``; ``V_q``, ``R_q``, ``C_q`` still come from the Eq. 2 call).
        cypher: query the Cypher DB (False = ablation "Without neo4j", Fig. 3: ``A_q`` = the
            entities of ``E*_q``, Eq. 18 chooses, Eq. 19 checks the choice on the KG; the DB is
            never opened; §3.5 runs when the check fails).
        topics: source of ``V_q``: ``question`` (the Eq. 2 entities, the paper) | ``dataset``
            (ablation ``sgr_dataset_topics``: the dataset's linked topic entities).
        decision: the final answer's rule: ``cascade`` (the paper's reading: Eq. 21, else Eq. 31
            when §3.5 ran, else Eq. 14, else the unvalidated direct choice) | ``pooled`` (ablation
            ``sgr_pooled_vote``: one vote over both path families, each family's weights
            normalised to sum 1 so the two C's are on one scale).
        lam: λ of Eq. 13 and Eq. 29 (model confidence vs graph consistency).
        num_paths: M, stepwise paths (Eq. 12) and collaborative paths (Eq. 27).
        collab_iterations: T, hypothesis/retrieval rounds per path (Eq. 23–26).
        tau: relevance threshold τ of Eq. 5 (null → ``top_k`` of Eq. 6).
        top_k: triples kept in ``E*_q`` (Eq. 6).
        max_refine_rounds: bound on Refine (Eq. 22); 0 disables it.
        vote: ``confidence`` (Eq. 14, Eq. 31) | ``majority`` (every path weight 1).
        collaborate: ``fallback`` (only when direct reasoning validates nothing, §3.5) |
            ``always`` | ``never``.
        hops, max_hops: k of the k-hop retrieval (null → max_hops).
        gold_hops: null ``hops`` reads the example's gold hop count (an oracle; off by default).
        max_candidate_triples: cost cap on candidates scored per question (nearest hops first);
            None (default) = all, as Eq. 5–6 select from every candidate; a cut is counted in
            ``extra`` (``candidates_total``, ``candidates_scored``, ``candidates_truncated``).
        stepwise: run the §3.2–3.3 stepwise paths (False = ablation ``sgr_no_stepwise``).
        stepwise_steps: T, the most steps of one stepwise path (Eq. 7).
        schema_sample: triples of ``E*_q`` shown to the schema prompt.
        evidence_k: triples added per collaborative retrieval step.
        temperature, seed: sampling of the stepwise and collaborative paths (path i uses ``seed + i``).
        max_reasks: parse re-asks per LLM call.
        max_schema_types: the Eq. 2 prompt lists every KG relation up to this many; above it, the
            ``structure_relations`` nearest the question.
        max_graph_schema_types: the Cypher and Refine prompts state the DB's exact graph schema,
            every relationship type sorted by name, up to this many; above it, the types of the
            k-hop subgraph. The full block is the same for every question, so a prefix cache
            computes it once (issue 70); 500 types are about 8,500 Qwen tokens.
        structure_relations: relations the Eq. 2 prompt lists when the KG has more than
            ``max_schema_types``, nearest the question first.
        rq_match: ``embedding`` (a phrase maps by name, then to the relations nearest it by cosine
            at or above ``rq_threshold``) | ``exact`` (ablation ``sgr_rq_exact``: by name only).
        rq_threshold, rq_per_phrase: the cosine a phrase's nearest relation must reach, and how
            many of its nearest relations above it it maps to.
        choice_cap: candidates shown to the Eq. 18/21 choice prompt.
        schema_direction: how Eq. 19's ``a ⊨ S_q in G`` reads a constraint ``(h, r, t)``.
            ``strict`` (default, the paper's Eq. 19): only the edge ``h -r-> t``. ``either``:
            ``h -r-> t`` or ``t -r-> h``. ``auto`` (ablation ``sgr_schema_either_way_fallback``,
            chosen on the validation questions): strict, and the undirected reading only when the
            strict one binds no entity to the answer variable.
        row_limit, query_timeout_ms: applied to every LLM query.
        graphdb: the run's graph database (``conf/graphdb/``): a
            :class:`~kgreason.kg.cypher.LazyGraphDB` or an open :class:`GraphDB`; required when
            ``cypher`` is true. The run owns it and closes it; SGR only queries it.
        embedder: the run's :class:`~kgreason.embed.Embedder` (None: a private one, loaded on
            first use).
        on_empty: ``answer`` (the IO prompt when ``V_q`` links nothing or the k-hop subgraph is
            empty) | ``abstain``.
    """

    tasks = ("kgqa",)  # preflight: the dataset tasks this reasoner answers
    # per-question counts of the candidate cost cap (Eq. 4-6), added to the run's metrics
    metrics = ("candidates_truncated_rate", "candidates_unscored")
    embed_forms = ("triple",)  # Eq. 4 / Eq. 24 read the KG's triple embedding store (kgreason/storage/embedstore.py)
    #: the funnel: the stages a question passes, in pipeline order (``decided_by`` holds which
    #: family gave the final answer: direct | collaborative | stepwise | pooled | direct_unvalidated
    #: | io | none); docs/sgr.md, "Funnel"
    funnel = ("s_q_parsed", "v_q_linked", "r_q_mapped", "e_star_nonempty", "stepwise_parsed", "cypher_parsed",
              "rows_returned", "eq19_validated", "refine_used", "collaborative_run", "decided_by")

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
        topics: str = "question",
        decision: str = "cascade",
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
        stepwise: bool = True,
        stepwise_steps: int = 3,
        schema_sample: int = 15,
        evidence_k: int = 10,
        temperature: float = 0.7,
        seed: int = 0,
        max_reasks: int = 1,
        max_tokens: int | dict = 512,
        max_schema_types: int = 200,
        max_graph_schema_types: int = 500,
        structure_relations: int = 30,
        rq_match: str = "embedding",
        rq_threshold: float = 0.7,
        rq_per_phrase: int = 1,
        choice_cap: int = 50,
        row_limit: int = 100, query_timeout_ms: int = 10_000,
        schema_direction: str = "strict", graphdb: GraphDB | None = None, embedder=None,
        on_empty: str = "answer",  # nothing linked / retrieved: the IO prompt (sgr.txt is silent)
    ) -> None:
        _check_settings(vote, collaborate, lam, schema_direction, topics, decision, rq_match)
        self.on_empty = check_on_empty("SGR", on_empty)
        self.kg, self.retriever, self.llm, self.schema_direction = kg, retriever, llm, schema_direction
        self.max_tokens = max_tokens_table(max_tokens, PROMPTS)
        self.use_schema, self.use_cypher, self.decision = bool(schema), bool(cypher), decision
        self.lam, self.num_paths, self.collab_iterations = float(lam), int(num_paths), int(collab_iterations)
        self.tau, self.top_k = tau, int(top_k)
        self.max_refine_rounds, self.vote_mode, self.collaborate = int(max_refine_rounds), vote, collaborate
        self.hops, self.max_hops, self.gold_hops = hops, int(max_hops), bool(gold_hops)
        self.max_candidate_triples = None if max_candidate_triples is None else int(max_candidate_triples)
        self.schema_sample, self.evidence_k = int(schema_sample), int(evidence_k)
        self.topics, self.use_stepwise, self.stepwise_steps = topics, bool(stepwise), int(stepwise_steps)
        if self.stepwise_steps < 1:
            raise ValueError(f"SGR: stepwise_steps (T of Eq. 7) must be at least 1, got {stepwise_steps}")
        self.structure_relations, self.rq_per_phrase = int(structure_relations), int(rq_per_phrase)
        if self.structure_relations < 1 or self.rq_per_phrase < 1:
            raise ValueError(f"SGR: structure_relations and rq_per_phrase must be at least 1, got "
                             f"{structure_relations} and {rq_per_phrase}")
        self.rq_match, self.rq_threshold = rq_match, float(rq_threshold)
        self.temperature, self.seed, self.max_reasks = float(temperature), int(seed), int(max_reasks)
        self.reask = ReaskPolicy(self.max_reasks)
        self.row_limit, self.query_timeout_ms = int(row_limit), int(query_timeout_ms)
        self.embedder = embedder if embedder is not None else Embedder()
        self.max_schema_types, self.choice_cap = int(max_schema_types), int(choice_cap)
        self.max_graph_schema_types = int(max_graph_schema_types)
        self.db, self.rel_types = self._open_graphdb(graphdb)
        self.prompts = {s: load_prompt("sgr", s) for s in PROMPTS}
        # each JSON reply's form (S_q, a step, a hypothesis, the schema, the Eq. 18 choice), sent only with
        # llm.structured_output=true; cypher, refine and answer replies are free text
        self.schemas = {s: load_schema("sgr", s) for s in PROMPTS}

    # ------------------------------------------------------------------ §3: the pipeline
    def answer(self, example: Example) -> Prediction:
        """§3's pipeline for one question (module docstring, steps 1–5)."""
        t = Trace()
        s_q = self.structure_query(t, example.question)               # §3.1.1 Eq. 2, before any KG read
        q = self.construct(t, example, s_q)                           # §3.1.2: V_q, R_q, C_q, E*_q (Eq. 3-6)
        if not q.has_subgraph:
            return self.answer_without_subgraph(t, q)
        stepwise = self.stepwise(t, q)                                # §3.2-3.3: Eq. 7-14
        direct = self.direct_reasoning(t, q)                          # §3.4: Eq. 15-22
        collab = self.collaborative(t, q) if self.collaborates(direct) else None   # §3.5: Eq. 23-31
        answers, decided_by = self.decide(t, direct, stepwise, collab)
        return self.finish(t, q, answers, decided_by, direct, stepwise, collab)

    def collaborates(self, direct: DirectResult) -> bool:
        """Whether §3.5 runs: ``fallback`` (the paper, "When direct reasoning fails to produce a
        correct answer"; correctness is unknown at test time, so "fails" is read as "validated
        nothing"), ``always`` or ``never``."""
        return self.collaborate == "always" or (self.collaborate == "fallback" and not direct.validated)

    def decide(self, t: Trace, direct: DirectResult, stepwise: PathVote | None,
               collab: PathVote | None) -> tuple[list[str], str]:
        """The final answer. ``cascade`` (the paper's reading, docs/sgr.md "The final answer"):
        the validated direct answer (Eq. 21: "If A+_q is non-empty, the final answer is selected
        from the validated candidate set"); else, §3.5 having run because direct reasoning failed,
        Eq. 31's ranking ("The final answer is selected by aggregating candidate answers from all
        reasoning paths"); else Eq. 14's over §3.3's paths; else the unvalidated direct choice.
        ``pooled`` (ablation ``sgr_pooled_vote``): after a validated direct answer, one vote over
        both families, each family's weights divided by their sum (both C's then weigh on one
        scale: every family brings one unit of vote). Returns ``(answers, decided_by)``; the
        ``decide`` trace step holds every family's ranking (funnel stage ``decided_by``)."""
        pooled = None
        if direct.validated:
            answers, by = direct.ranking, "direct"
        elif self.decision == "pooled" and (pooled := self.pooled_vote(stepwise, collab)):
            answers, by = [a for a, _ in pooled], "pooled"
        elif self.decision == "cascade" and collab is not None and collab.ranking:
            answers, by = [a for a, _ in collab.ranking], "collaborative"
        elif self.decision == "cascade" and stepwise is not None and stepwise.ranking:
            answers, by = [a for a, _ in stepwise.ranking], "stepwise"
        elif direct.ranking:
            answers, by = direct.ranking, "direct_unvalidated"
        else:
            answers, by = [], "none"
        t.add("decide", self.decision, decided_by=by, direct=direct.ranking[:20], direct_validated=direct.validated,
              eq14=stepwise.ranking[:20] if stepwise else None, eq31=collab.ranking[:20] if collab else None,
              **({"pooled": pooled[:20]} if pooled else {}))
        t.stage("decided_by", by)
        return answers, by

    def pooled_vote(self, stepwise: PathVote | None, collab: PathVote | None) -> list[tuple[str, float]]:
        """Ablation ``sgr_pooled_vote``: ``score(a) = Σ_family Σ_i (w_i / Σ_j w_j) I(a_i = a)`` over
        the stepwise (α, Eq. 13) and collaborative (β, Eq. 29) paths that answered; with
        ``vote=majority`` every ``w_i`` is 1 before the division."""
        answers, weights = [], []
        for fam in (stepwise, collab):
            if fam is None:
                continue
            w = [(1.0 if self.vote_mode == "majority" else float(x)) if a else 0.0 for a, x in zip(fam.answers, fam.weights)]
            tot = sum(w)
            if tot > 0:
                answers += fam.answers
                weights += [x / tot for x in w]
        return vote(answers, weights)

    def finish(self, t: Trace, q: QuestionGraph, answers: list[str], decided_by: str, direct: DirectResult,
               stepwise: PathVote | None, collab: PathVote | None) -> Prediction:
        """The prediction with what every question records in ``extra`` (docs/sgr.md)."""
        # retrieval rate: entities retrieved from the KG (k-hop subgraph, database rows), never answers
        retrieved = sorted({self._label(e) for e in q.subgraph_entities() | set(direct.db_entities)})
        return t.finish(q.example, answers, retrieved=retrieved, search_space=int(q.counts["candidates_scored"]),
                        **q.counts, vq_source=q.vq_source, r_q=[n for _, ns, _ in q.rq_map for n in ns],
                        refine_rounds=direct.refine_rounds,
                        p_theta_source=collab.p_theta_source if collab else direct.p_theta_source,
                        stepwise_paths=len(stepwise.answers) if stepwise else 0,
                        stepwise_p_theta_source=stepwise.p_theta_source if stepwise else None,
                        schema_ok=direct.schema_ok, validation_rule=direct.rule,
                        vote_mode=self.vote_mode if (stepwise or collab) else None, decision=self.decision,
                        direct_answer=direct.answer, direct_validated=direct.validated,
                        eq14_answer=stepwise.answer if stepwise else None, eq31_answer=collab.answer if collab else None,
                        decided_by=decided_by, retrieval_empty=False)

    def answer_without_subgraph(self, t: Trace, q: QuestionGraph) -> Prediction:
        """``V_q`` linked nothing, or its k-hop subgraph holds no triple: the IO
        prompt (``on_empty: answer``; sgr.txt is silent) or no answer (``abstain``). The dataset's
        topic entities are not used (that is ablation ``sgr_dataset_topics``)."""
        answers = answer_without_retrieval(self.llm, t, q.example.question, self.on_empty)
        by = "io" if self.on_empty == "answer" else "none"
        t.stage("decided_by", by)
        empty = {"eq14_answer": None, "eq31_answer": None, "direct_answer": None, "direct_validated": False,
                 "decided_by": by, "vq_source": q.vq_source, "retrieved": [], "retrieval_empty": True}
        if not q.topics:
            return t.finish(q.example, answers, link_failed=True, s_q_ok=q.s_q is not None, **empty)
        return t.finish(q.example, answers, search_space=int(q.counts.get("candidates_scored", 0)), **empty)

    def link_gate_note(self) -> str:
        """What the preflight link gate (kgreason/preflight.py ``check_fit``) measures for SGR and
        what an unlinked question receives, for its message."""
        gets = ("the IO answer (reasoner.on_empty=answer)" if self.on_empty == "answer"
                else "no answer (reasoner.on_empty=abstain)")
        if self.topics == "dataset":
            return (f"SGR's V_q is these topic entities (reasoner.topics=dataset), and a question none of whose "
                    f"topics links gets {gets}")
        return ("this rate is the dataset's topic entities, which SGR does not use: it links the entities its own "
                f"Eq. 2 call names (its link rate is funnel/v_q_linked after the run), and a question whose V_q "
                f"links nothing gets {gets}")

    def close(self) -> None:
        """Nothing to release: the graph database belongs to the run that built it."""
