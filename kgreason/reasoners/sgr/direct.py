"""§3.4 Direct reasoning enhancement (shared/papers/sgr.txt §3.4.1–3.4.2, Eq. 15–22): the schema,
NL→Cypher on a graph database, answer validation and Refine.

1. **Schema** ``S_q = {(v_i, r_i, v_j)}`` (Eq. 15; the prompt the end of §3.3 describes: the model
   "is prompted to act as a knowledge graph expert and is provided with several knowledge graph
   triples"): :meth:`DirectReasoning.generate_schema`. Ablation ``schema=false`` ("Without
   Schema") makes no such call.
2. **Cypher** ``c_q = g_φ(q, S_q)`` (Eq. 16), run read-only on the DB (``A_q = Exec(c_q, G)``,
   Eq. 17): :meth:`~DirectReasoning.write_cypher`, :meth:`~DirectReasoning.execute_and_validate`.
3. **Validation** ``V(a, S_q, G)`` (Eq. 19–20), read with the strongest ``S_q`` the question has
   (:meth:`~DirectReasoning.validation`): rule ``schema`` (Eq. 15's constraints propagated through
   the KG), else ``structure`` (Eq. 2's ``S_q``: reached from ``V_q`` within the hop budget through
   ``R_q``'s relations, when ``R_q`` chose the candidates), else ``khop`` (no ``S_q`` to check:
   membership in the k-hop subgraph, which filters the rows but validates nothing).
4. **Refine** (Eq. 22) while ``A+_q`` is empty, at most ``max_refine_rounds`` times.
5. **Choice** ``argmax P_θ(a | q, A+_q, S_q)`` (Eq. 18/21): :meth:`~DirectReasoning.rank_valid_answers`.

Without the database (ablation ``cypher=false``, Fig. 3 "Without neo4j") ``A_q`` is the entities of
``E*_q`` (:meth:`~DirectReasoning.embedding_candidates`), Eq. 18 chooses among them, and Eq. 19
checks the choice on the KG; a choice that fails is direct reasoning failing (§3.5 then runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from kgreason.kg.cypher import CypherError, GraphDB, graph_schema_text
from kgreason.kg.cypher_guard import CypherRejected
from kgreason.llm.parsing import ParseResult, parse_cypher, parse_schema
from kgreason.reasoners.base import Trace, canonical_entities, render
from kgreason.reasoners.sgr.common import SGRKit
from kgreason.reasoners.sgr.subgraph import QuestionGraph


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


@dataclass
class DirectResult:
    """What §3.4 produced for one question."""

    ranking: list[str] = field(default_factory=list)  # Eq. 18/21 order, best first
    validated: bool = False      # A+_q non-empty under Eq. 19 (without the DB: the Eq. 18 choice satisfies S_q)
    rule: str = "khop"           # schema | structure | khop: which S_q Eq. 19 read
    p_theta_source: str | None = None
    refine_rounds: int = 0
    db_entities: list[int] = field(default_factory=list)  # every entity a query returned
    schema_ok: bool = False      # a usable Eq. 15 schema

    @property
    def answer(self) -> str | None:
        return self.ranking[0] if self.ranking else None


class DirectReasoning(SGRKit):
    """§3.4: schema, Cypher, validation, Refine, and the Eq. 18/21 choice."""

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

    def direct_reasoning(self, t: Trace, q: QuestionGraph) -> DirectResult:
        """§3.4 for one question: the schema (Eq. 15), the validation rule (Eq. 19), then either
        Cypher with Refine and the Eq. 21 choice over ``A+_q`` (Eq. 16–22), or, without the DB,
        the Eq. 18 choice over ``E*_q``'s entities checked by Eq. 19. ``validated`` is what
        §3.5's trigger and the final rule read (funnel stage ``eq19_validated``)."""
        ctx = self.prompt_context(q)
        schema_val = self.generate_schema(t, ctx, q.estar) if self.use_schema else None
        allowed, rule = self.validation(t, q, schema_val)
        out = DirectResult(rule=rule, schema_ok=schema_val is not None)
        if self.use_cypher:
            ctx["schema"] = self.schema_text(schema_val, db_types=True) if self.use_schema else "(no schema)"
            valid, out.refine_rounds, out.db_entities = self.query_and_refine(t, ctx, allowed, rule)
            if valid:
                out.ranking, out.p_theta_source, _ = self.rank_valid_answers(t, ctx, valid)
            out.validated = bool(valid) and rule != "khop"
        else:  # "Without neo4j": A_q from E*_q, no query; Eq. 19 checks the choice on the KG
            ctx["schema"] = self.schema_text(schema_val, db_types=False)
            cands = self.embedding_candidates(t, q.estar, q.topics)
            if cands:
                out.ranking, out.p_theta_source, _ = self.rank_valid_answers(t, ctx, cands)
                chosen = {c for c in cands if self._label(c) == out.ranking[0]}
                out.validated = rule != "khop" and bool(chosen & allowed)
                t.add("validate", "eq18_choice", rule=rule, choice=out.ranking[0], valid=out.validated)
        if out.validated:
            t.stage("eq19_validated")
        return out

    def prompt_context(self, q: QuestionGraph) -> dict:
        """What every §3.4 prompt shares: question, topic names, ``C_q``, the k-hop relations, the
        evidence triples of ``E*_q`` and the exact graph schema of the DB (all types, sorted: the
        same block for every question; those of the k-hop subgraph when the graph has more than
        ``max_graph_schema_types``)."""
        near = self.nearby_relations(q.sub)
        shown = None if len(self.rel_types) <= self.max_graph_schema_types else near
        return {"question": q.example.question, "topics": ", ".join(self._label(i) for i in q.topics),
                "constraints": q.constraints, "relations": "\n".join(near) or "(none)",
                "evidence": "\n".join(self.kg.verbalise(tr) for tr in q.estar[: self.evidence_k]) or "(none)",
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

    # ------------------------------------------------------------------ §3.4.1 schema (Eq. 15)
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

    # ------------------------------------------------------------------ §3.4.2 validation (Eq. 19-20)
    def validation(self, t: Trace, q: QuestionGraph, schema_val: dict | None) -> tuple[set[int], str]:
        """Eq. 19's ``V(a, S_q, G) = I[a ⊨ S_q in G]`` read with the strongest ``S_q`` there is:
        ``schema`` (Eq. 15's, :meth:`valid_answer_set`); else ``structure`` (Eq. 2's ``S_q =
        {V_q, R_q, C_q}``, the same symbol in the paper: reached from ``V_q`` through ``R_q``'s
        relations within the hop budget, :meth:`structure_bindings`; only when ``R_q`` chose the
        candidates); else ``khop`` (no ``S_q``: the k-hop subgraph's entities, which keep a
        query's rows for the choice but validate nothing). Topic entities are never answers.
        Returns ``(entities V admits, rule)``."""
        if schema_val is not None:
            return self.valid_answer_set(schema_val, q.topics, set(), t), "schema"
        if q.rq_guided:
            allowed = self.structure_bindings(q.topics, q.rq, q.hops) - set(q.topics)
            t.add("schema", "V_structure", rule="structure", R_q=[n for _, ns, _ in q.rq_map for n in ns],
                  n_valid=len(allowed))
            return allowed, "structure"
        return q.subgraph_entities() - set(q.topics), "khop"

    def structure_bindings(self, topics: Sequence[int], rq: Sequence[int], hops: int) -> set[int]:
        """The entities reached from ``V_q`` in at most ``hops`` steps along KG edges (either
        direction: an R_q phrase carries none) whose relation is in ``R_q``: Eq. 19 with Eq. 2's
        ``S_q`` (``C_q`` is text and is not checked)."""
        kg = self.kg
        rel = np.asarray(sorted({int(r) for r in rq}), dtype=np.int64)
        seen = {int(e) for e in topics}
        frontier = set(seen)
        for _ in range(int(hops)):
            nxt: set[int] = set()
            for e in frontier:
                out = kg.out_triples(e)
                nxt.update(kg.tails[out[np.isin(kg.rels[out], rel)]].tolist())
                inn = kg.in_triples(e)
                nxt.update(kg.heads[inn[np.isin(kg.rels[inn], rel)]].tolist())
            frontier = nxt - seen
            seen |= nxt
            if not frontier:
                break
        return {int(e) for e in seen}

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

    def valid_answer_set(self, schema_val: dict | None, topics: Sequence[int], subgraph_ents: set[int],
                         t: Trace | None = None) -> set[int]:
        """§3.4.2, Eq. 19 with Eq. 15's schema: the entities ``a`` with ``V(a, S_q, G) = 1``: those
        bound to the schema's answer variable (:meth:`schema_bindings`, read as
        ``schema_direction`` says), or without a schema the k-hop subgraph's entities; topic
        entities are never answers."""
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

    # ------------------------------------------------------------------ Cypher (Eq. 16-17, 22)
    def query_and_refine(self, t: Trace, ctx: dict, allowed: set[int],
                         rule: str = "schema") -> tuple[list[int], int, list[int]]:
        """§3.4: write ``c_q = g(q, S_q)`` (Eq. 16), execute and validate it (Eq. 17, 19–20);
        while nothing is admitted, Refine (Eq. 22) up to ``max_refine_rounds`` times; a database
        error goes back with the valid relationship types. Returns ``(the admitted entities,
        refine rounds used, every entity the DB returned)`` (funnel stage ``cypher_parsed``)."""
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
            t.stage("cypher_parsed")
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
        earlier query and what went wrong with it ("" when unparseable; funnel stage
        ``refine_used``)."""
        att = "\n\n".join(f"Query:\n{q or '(none)'}\nProblem: {msg}" for q, msg in attempts)
        res = self._ask(t, "refine", render(self.prompts["refine"], attempts=att, **ctx), parse_cypher)
        t.add("refine", f"round_{round_}", previous=[m for _, m in attempts])
        t.stage("refine_used")
        return res.value if res.ok else ""

    def execute_and_validate(self, t: Trace, query: str, round_: int, allowed: set[int],
                             rule: str = "schema") -> tuple[list[int], str, list[int]]:
        """Eq. 17 ``A_q = Exec(c_q, G)`` through the read-only guard, then Eq. 19–20 with the
        entities ``allowed`` under ``rule`` (:meth:`validation`). Returns ``(A+_q, what went wrong
        for the refine prompt, A_q)`` (funnel stage ``rows_returned``)."""
        rows, msg = self._run_cypher(t, "direct" if round_ == 0 else f"refine_{round_}", query)
        if rows:
            t.stage("rows_returned")
        # A_q is a set (Eq. 17-18): canonical order, not the database's row order, so the P_θ ties
        # and the choice_cap cut are the same on every KG backend
        cands = canonical_entities(self.kg, dict.fromkeys(self._rows_to_entities(rows or [])))
        valid = self.validate(cands, allowed)
        t.add("validate", f"round_{round_}", rule=rule, candidates=[self._label(c) for c in cands[:50]],
              valid=[self._label(c) for c in valid[:50]])
        if not valid and rows is not None and cands:
            why = {"schema": "satisfies the schema constraints in the graph",
                   "structure": "is reached from the topic entities through the question's relations",
                   "khop": "is an entity of the topic entities' k-hop subgraph"}[rule]
            msg = f"{len(cands)} answers ({', '.join(self._label(c) for c in cands[:5])}) but none {why}"
        elif not valid and rows is not None and rows:
            msg = "the rows contain no entity names of the graph (return the answer names)"
        return valid, msg, cands

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

    def embedding_candidates(self, t: Trace, estar: np.ndarray, topics: Sequence[int]) -> list[int]:
        """Ablation "Without neo4j" (Fig. 3): no structured retrieval, so ``A_q`` = the entities of
        ``E*_q`` (embedding top-k), best triple first, not filtered by Eq. 19 (the choice among
        them is checked instead, :meth:`direct_reasoning`); Eq. 18 then chooses among them."""
        cands = []
        for h, _, tl in estar.tolist():
            for e in (tl, h):
                if e not in topics:
                    cands.append(int(e))
        cands = list(dict.fromkeys(cands))
        t.add("candidates", "embedding_topk", candidates=[self._label(c) for c in cands[:50]])
        return cands

    # ------------------------------------------------------------------ Eq. 18/21 choice
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
        first, the rest keep their (canonical) order. An unparseable reply keeps the order
        (``chat_choice_unparsed``)."""
        shown = names[: self.choice_cap]
        prompt = render(self.prompts["choose"], question=ctx["question"], schema=ctx["schema"],
                        evidence=ctx["evidence"], candidates="\n".join(f"{i + 1}. {n}" for i, n in enumerate(shown)))
        res = self._ask(t, "choose", prompt, parse_choice(shown))
        if not res.ok:
            return names, "chat_choice_unparsed"
        best = shown[res.value]
        return [best] + [n for n in names if n != best], "chat_choice"
