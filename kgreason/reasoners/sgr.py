"""SGR: schema-guided subgraph generation → NL→Cypher → validate/refine → collaborative
multi-path voting (shared/papers/sgr.txt §3).

One example runs these steps (each recorded in the trace):

1. **Link** the topic entities; **k-hop retrieval** around them gives the candidate triples.
2. **Subgraph generation** (§3.1.2, Eq. 4–6): every candidate triple ``e_i`` is verbalised and
   scored ``s(e_i, q) = cos(φ(e_i), φ(q))`` with all-MiniLM-L6-v2; ``E*_q`` keeps the triples
   with ``s ≥ τ`` (``tau``), or the ``top_k`` best (Eq. 6) when ``tau`` is null.
3. **Schema** (§3.3, Eq. 15; ablation ``schema=false`` = SGR Fig. 2): the LLM, prompted as a KG
   expert with sample triples of ``E*_q``, writes ``S_q = {(v_i, r_i, v_j)}`` as JSON chains;
   unknown relations are dropped.
4. **Direct reasoning** (§3.4.1, Eq. 16–17; ablation ``cypher=false`` = SGR Fig. 3): the LLM
   writes Cypher ``c_q = g(q, S_q)``; it passes the read-only guard and runs on the Cypher DB
   (``A_q = Exec(c_q, G)``). With ``cypher=false`` the DB is never touched: ``A_q`` = the
   entities of ``E*_q`` (embedding top-k over the k-hop triples).
5. **Validation** (§3.4.2, Eq. 19–20): ``V(a, S_q, G) = 1`` iff ``a`` is bound to the schema's
   answer variable when the schema's constraints are propagated through the KG from its constant
   entities (for a chain: ``a`` is reachable from the topic through the relation chain). Without
   a schema, ``V`` = membership in the k-hop subgraph.
6. **Refine** (Eq. 22): while ``A+_q`` is empty, up to ``max_refine_rounds`` times, the LLM gets
   the previous queries with their guard rejection / engine error / empty or invalid result and
   writes a new query. Non-empty ``A+_q`` is ranked by ``P_θ(a | q, A+_q, S_q)`` (Eq. 21).
7. **Collaborative reasoning** (§3.5, Eq. 23–31), when direct reasoning found nothing valid (or
   always, with ``collaborate=always``): ``M = num_paths`` sampled paths; each alternates a
   hypothesis ``h_t`` (with claimed triples) and retrieval ``E_t = Retrieve(h_t, G)`` for
   ``collab_iterations`` steps. ``C(p_i, G) = (1/T) Σ_t I(E^i_t ⊆ G)`` where ``E^i_t`` is the set of
   triples the hypothesis relies on (Eq. 30); ``β_i = λ P_θ(a_i | q, p_i) + (1 − λ) C`` (Eq. 29)
   and ``â = argmax_a Σ_i β_i I(a_i = a)`` (Eq. 31; ``vote=majority`` drops the weights).

``P_θ`` comes from ``llm.score`` (log-probabilities, softmax-normalised over the distinct
answers) where the backend supports it, else from the sampling frequency of ``a_i`` over the M
paths; the trace records which (``p_theta_source``).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from typing import Any, Sequence

import numpy as np

from kgreason.kg.cypher import CypherError, GraphDB, open_graphdb
from kgreason.kg.cypher_guard import CypherRejected
from kgreason.kg.linking import link_example
from kgreason.llm.base import ScoringUnsupported
from kgreason.llm.parsing import ParseResult, parse_json, with_reask
from kgreason.reasoners.base import Trace, load_prompt, render
from kgreason.retrieval.dense import LazyEmbedder
from kgreason.types import ChatRequest, Example, Message, Prediction

_CYPHER_BLOCK = re.compile(r"```(?:cypher|sql)?\s*(.*?)```", re.S | re.I)
_CYPHER_START = re.compile(r"\b(MATCH|OPTIONAL\s+MATCH|WITH|UNWIND|RETURN|CALL)\b", re.I)


def parse_cypher(text: str) -> ParseResult:
    """The query in a fenced block, else the text from the first read clause on."""
    m = _CYPHER_BLOCK.search(text)
    q = m.group(1).strip() if m else ""
    if not q:
        s = _CYPHER_START.search(text)
        q = text[s.start():].strip() if s else ""
    return ParseResult(True, q) if q else ParseResult(False, None, "no Cypher query found")


def parse_schema(text: str) -> ParseResult:
    """``{"schema": [[v_i, r_i, v_j], ...], "answer": "?x"}`` (also accepts a bare list and
    dicts with head/relation/tail keys)."""
    js = parse_json(text)
    if not js.ok:
        return js
    val = js.value
    triples = val.get("schema") if isinstance(val, dict) else val
    if not isinstance(triples, list):
        return ParseResult(False, None, "expected a 'schema' list of [entity, relation, entity]")
    out = []
    for t in triples:
        if isinstance(t, dict):
            t = [t.get("head", t.get("subject")), t.get("relation"), t.get("tail", t.get("object"))]
        if isinstance(t, (list, tuple)) and len(t) == 3 and all(isinstance(x, str) and x.strip() for x in t):
            out.append(tuple(x.strip() for x in t))
    if not out:
        return ParseResult(False, None, "schema has no [entity, relation, entity] triple")
    ans = val.get("answer") if isinstance(val, dict) else None
    return ParseResult(True, {"schema": out, "answer": ans if isinstance(ans, str) else None})


def parse_hypothesis(text: str) -> ParseResult:
    js = parse_json(text)
    if not js.ok or not isinstance(js.value, dict):
        return ParseResult(False, None, "expected a JSON object with hypothesis/claims/answer")
    v = js.value
    claims = [tuple(str(x).strip() for x in c) for c in v.get("claims", []) or []
              if isinstance(c, (list, tuple)) and len(c) == 3]
    ans = v.get("answer")
    if isinstance(ans, list):
        ans = ans[0] if ans else ""
    return ParseResult(True, {"hypothesis": str(v.get("hypothesis", "")), "claims": claims,
                              "answer": str(ans or "").strip()})


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


class SGR(LazyEmbedder):
    """The SGR reasoner. Settings map to paper knobs; see conf/reasoner/sgr.yaml.

    Args:
        schema: generate the schema ``S_q`` (False = ablation "without schema", Fig. 2).
        cypher: query the Cypher DB (False = ablation "without neo4j", Fig. 3: embedding top-k
            over the k-hop triples; the DB is never opened).
        lam: λ of Eq. 29 (model confidence vs graph consistency).
        num_paths: M, collaborative reasoning paths (Eq. 27).
        collab_iterations: T, hypothesis/retrieval rounds per path (Eq. 23–26).
        tau: relevance threshold τ of Eq. 5 (null → ``top_k`` of Eq. 6).
        top_k: triples kept in ``E*_q`` (Eq. 6) and the cap under ``tau``.
        max_refine_rounds: bound on Refine (Eq. 22); 0 disables it.
        vote: ``confidence`` (Eq. 31) | ``majority``.
        collaborate: ``fallback`` (only when direct reasoning finds no valid answer, §3.5) |
            ``always`` | ``never``.
        hops, max_hops: k of the k-hop retrieval (null → the example's gold hops, else max_hops).
        max_candidate_triples: cap on triples embedded per question (nearest hops first).
        schema_sample: triples of ``E*_q`` shown to the schema prompt.
        evidence_k: triples added per collaborative retrieval step.
        temperature, seed: sampling of the collaborative paths (path i uses ``seed + i``).
        max_reasks: parse re-asks per LLM call.
        engine: Cypher engine ``kuzu`` | ``falkordb`` | ``neo4j``.
        engine_options: passed to the engine (``path``, ``uri``, ``user``, ``password_env``...).
        cache_dir: where the kuzu DB lives (null → ``$KGREASON_CACHE_DIR/cypher``).
        row_limit, query_timeout_ms: applied to every LLM query.
        graphdb: an already-open :class:`GraphDB` (tests); skips opening/exporting.
        embedder: a shared :class:`~kgreason.retrieval.dense.Embedder` (default: the packaged
            all-MiniLM-L6-v2, one per process).
    """

    thread_safe = False  # example_workers must stay 1: one graph-database connection per reasoner

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
        max_hops: int = 3,
        max_candidate_triples: int = 600,
        schema_sample: int = 15,
        evidence_k: int = 10,
        temperature: float = 0.7,
        seed: int = 0,
        max_reasks: int = 1,
        max_tokens: int = 512,
        engine: str = "kuzu",
        engine_options: dict | None = None,
        cache_dir: str | None = None,
        row_limit: int = 100,
        query_timeout_ms: int = 10_000,
        graphdb: GraphDB | None = None,
        embedder=None,
    ) -> None:
        if vote not in ("confidence", "majority"):
            raise ValueError(f"vote must be 'confidence' or 'majority', got {vote!r}")
        if collaborate not in ("fallback", "always", "never"):
            raise ValueError(f"collaborate must be fallback|always|never, got {collaborate!r}")
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"lam (λ, Eq. 29) must be in [0, 1], got {lam}")
        self.kg, self.retriever, self.llm = kg, retriever, llm
        self.max_tokens = int(max_tokens)
        self.use_schema, self.use_cypher = bool(schema), bool(cypher)
        self.lam, self.num_paths, self.collab_iterations = float(lam), int(num_paths), int(collab_iterations)
        self.tau, self.top_k = tau, int(top_k)
        self.max_refine_rounds, self.vote_mode, self.collaborate = int(max_refine_rounds), vote, collaborate
        self.hops, self.max_hops = hops, int(max_hops)
        self.max_candidate_triples, self.schema_sample, self.evidence_k = int(max_candidate_triples), int(schema_sample), int(evidence_k)
        self.temperature, self.seed, self.max_reasks = float(temperature), int(seed), int(max_reasks)
        self.row_limit, self.query_timeout_ms = int(row_limit), int(query_timeout_ms)
        self._embedder = embedder
        self.db: GraphDB | None = None
        if self.use_cypher and graphdb is None:
            from kgreason.kg.source import require_in_memory

            require_in_memory(kg, "SGR's Cypher database export (reasoner.cypher=true; cypher=false runs on SPARQL)")
        if self.use_cypher:
            # opened (and the KG exported) up front: an unavailable engine fails the run at build
            self.db = graphdb if graphdb is not None else open_graphdb(
                engine, kg=kg, cache_dir=cache_dir, row_limit=row_limit, timeout_ms=query_timeout_ms,
                **dict(engine_options or {}))
        self.prompts = {s: load_prompt("sgr", s) for s in ("schema", "cypher", "refine", "hypothesis", "answer")}

    # ------------------------------------------------------------------ helpers
    def _ask(self, t: Trace, purpose: str, prompt: str, parser, *, temperature: float = 0.0,
             sample_index: int = 0, seed: int | None = None) -> ParseResult:
        req = ChatRequest.of(prompt, temperature=temperature, sample_index=sample_index, seed=seed,
                             max_tokens=self.max_tokens)
        res, _ = with_reask(self.llm, req, parser, max_reasks=self.max_reasks,
                            on_call=lambda rq, c, r: t.llm(purpose, rq, c, parsed=r.value, parse_ok=r.ok))
        return res

    def _label(self, i: int) -> str:
        return self.kg.entity_label(int(i))

    def _verbalise(self, triples: np.ndarray) -> list[str]:
        return [self.kg.verbalise(tr) for tr in triples]

    # ------------------------------------------------------------------ §3.1.2 subgraph
    def subgraph(self, question: str, sub) -> tuple[np.ndarray, np.ndarray, int]:
        """Eq. 4–6: ``(E*_q (k, 3) int32 triples, their scores (k,), n candidates)``."""
        cands = []
        for tr in sub.triples_by_hop:  # nearest hops first, capped
            cands.append(tr)
        allt = np.concatenate(cands, axis=0) if cands else np.zeros((0, 3), dtype=np.int32)
        if len(allt):
            _, first = np.unique(allt, axis=0, return_index=True)
            allt = allt[np.sort(first)][: self.max_candidate_triples]
        if len(allt) == 0:
            return allt.reshape(0, 3), np.zeros(0, dtype=np.float32), 0
        sims = self.embedder.similarity([question], self._verbalise(allt))[0]  # Eq. 4
        order = np.argsort(-sims, kind="stable")
        if self.tau is not None:
            order = order[sims[order] >= float(self.tau)][: self.top_k]  # Eq. 5
        else:
            order = order[: self.top_k]  # Eq. 6
        return allt[order], sims[order], len(allt)

    # ------------------------------------------------------------------ Eq. 19–20 validation
    def schema_bindings(self, schema: Sequence[tuple[str, str, str]], topics: Sequence[int]) -> dict[str, set[int]]:
        """Propagate the schema constraints through the KG: every variable's possible entities.

        Constants are linked with ``KG.find_entity``; a topic entity named in the schema anchors it.
        Constraints are applied in order, forwards (head known → tails via r) and backwards
        (tail known → heads), intersecting with what a variable already holds, for ``L`` passes.
        """
        kg = self.kg
        bind: dict[str, set[int]] = {}

        def val(v: str) -> set[int] | None:
            if v.startswith("?"):
                return bind.get(v)
            i = kg.find_entity(v)
            return {i} if i >= 0 else set()

        for _ in range(max(1, len(schema))):
            changed = False
            for h, r, tl in schema:
                try:
                    rid = kg.relation_id(r)
                except KeyError:
                    continue
                hv, tv = val(h), val(tl)
                if hv is not None and tl.startswith("?"):
                    nxt = {int(kg.tails[x]) for e in hv for x in kg.out_triples(e) if kg.rels[x] == rid}
                    new = nxt if tv is None else (tv & nxt)
                    if new != tv:
                        bind[tl], changed = new, True
                if tv is not None and h.startswith("?"):
                    prv = {int(kg.heads[x]) for e in (val(tl) or set()) for x in kg.in_triples(e) if kg.rels[x] == rid}
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
        t = Trace()
        kg = self.kg
        link = link_example(kg, example)
        t.add("link", "topic_entities", linked=link.linked, failed=link.failed)
        if not link.ids:
            return t.finish(example, [], retrieved=[], link_failed=True)
        topics = link.ids
        topic_names = [self._label(i) for i in topics]
        k = self.hops or example.hops or self.max_hops
        sub = t.retrieval("khop", self.retriever.retrieve(topics, k), kg)
        # ---- §3.1.2 subgraph generation
        estar, scores, n_cand = self.subgraph(example.question, sub)
        t.add("subgraph", "E*_q", candidates=n_cand, kept=len(estar), tau=self.tau, top_k=self.top_k,
              top=[(kg.verbalise(tr), round(float(s), 4)) for tr, s in zip(estar[:10], scores[:10])])
        rel_near = sorted({kg.relation_names[int(r)] for r in (np.concatenate(sub.triples_by_hop)[:, 1] if sub.triples_by_hop and sum(len(x) for x in sub.triples_by_hop) else [])})
        sample = "\n".join(kg.verbalise(tr) for tr in estar[: self.schema_sample]) or "(none)"
        # ---- §3.3 schema
        schema_val = None
        if self.use_schema:
            prompt = render(self.prompts["schema"], question=example.question, topics=", ".join(topic_names),
                            triples=sample, relations="\n".join(rel_near) or "(none)")
            res = self._ask(t, "schema", prompt, parse_schema)
            if res.ok:
                known = [tr for tr in res.value["schema"] if tr[1] in kg._relation_index]
                dropped = [tr for tr in res.value["schema"] if tr[1] not in kg._relation_index]
                if known:
                    schema_val = {"schema": known, "answer": res.value["answer"]}
                t.add("schema", "S_q", schema=known, dropped_unknown_relations=dropped,
                      answer_var=self._answer_var(schema_val) if schema_val else None)
        subgraph_ents = set(sub.entities().tolist())
        if schema_val:
            bind = self.schema_bindings(schema_val["schema"], topics)
            avar = self._answer_var(schema_val)
            allowed = bind.get(avar, set()) if avar else set()
        else:
            allowed = subgraph_ents
        allowed = allowed - set(topics)

        def validate(cands: list[int]) -> list[int]:  # Eq. 19–20
            return [c for c in cands if c in allowed]

        schema_txt = "\n".join(f"({h}, {r}, {tl})" for h, r, tl in schema_val["schema"]) if schema_val else "(no schema)"
        # ---- §3.4 direct reasoning
        valid: list[int] = []
        refine_rounds = 0
        attempts: list[tuple[str, str]] = []
        if self.use_cypher:
            prompt = render(self.prompts["cypher"], question=example.question, topics=", ".join(topic_names),
                            schema=schema_txt, relations="\n".join(rel_near) or "(none)")
            res = self._ask(t, "cypher", prompt, parse_cypher)
            query = res.value if res.ok else ""
            for round_ in range(self.max_refine_rounds + 1):
                if round_ > 0:  # Eq. 22 Refine
                    refine_rounds = round_
                    att = "\n\n".join(f"Query:\n{q or '(none)'}\nProblem: {msg}" for q, msg in attempts)
                    prompt = render(self.prompts["refine"], question=example.question, topics=", ".join(topic_names),
                                    schema=schema_txt, relations="\n".join(rel_near) or "(none)", attempts=att)
                    res = self._ask(t, "refine", prompt, parse_cypher)
                    query = res.value if res.ok else ""
                    t.add("refine", f"round_{round_}", previous=[m for _, m in attempts])
                if not query:
                    attempts.append(("", "no query could be parsed from the reply"))
                    continue
                rows, msg = self._run_cypher(t, "direct" if round_ == 0 else f"refine_{round_}", query)
                cands = self._rows_to_entities(rows or [])
                valid = validate(cands)
                t.add("validate", f"round_{round_}", candidates=[self._label(c) for c in cands[:50]],
                      valid=[self._label(c) for c in valid[:50]])
                if valid:
                    break
                if rows is not None and cands:
                    msg = (f"{len(cands)} answers ({', '.join(self._label(c) for c in cands[:5])}) but none "
                           "satisfies the schema constraints in the graph")
                elif rows is not None and rows:
                    msg = "the rows contain no entity names of the graph (return the answer names)"
                attempts.append((query, msg))
        else:
            # Fig. 3 ablation: candidates are the entities of E*_q, best triple first
            cands = []
            for h, _, tl in estar.tolist():
                for e in (tl, h):
                    if e not in topics:
                        cands.append(int(e))
            cands = list(dict.fromkeys(cands))
            valid = validate(cands)
            t.add("validate", "embedding_topk", candidates=[self._label(c) for c in cands[:50]],
                  valid=[self._label(c) for c in valid[:50]])
        answers: list[str] = []
        p_source = None
        path = "direct"
        if valid:
            names = [self._label(c) for c in valid]
            if len(names) > 1:  # Eq. 21
                prompt = render(self.prompts["answer"], question=example.question,
                                path=f"schema: {schema_txt}\nvalid answers: {', '.join(names[:50])}")
                p = self._p_theta(prompt, names)
                if p is not None:
                    p_source = "score"
                    order = np.argsort(-np.asarray(p), kind="stable")
                    names = [names[i] for i in order]
                else:
                    p_source = "query_order"
            answers = names
            t.add("answer", "direct", answers=names[:20], p_theta_source=p_source)
        if (not valid and self.collaborate == "fallback") or self.collaborate == "always":
            path = "collaborative"
            voted, p_source = self.collaborative(t, example, estar)
            answers = [a for a, _ in voted]
        retrieved = sorted({self._label(e) for e in subgraph_ents} | set(answers))
        return t.finish(example, answers, retrieved=retrieved, search_space=int(n_cand),
                        refine_rounds=refine_rounds, path=path, p_theta_source=p_source,
                        schema_ok=schema_val is not None)

    # ------------------------------------------------------------------ §3.5 collaborative
    def _retrieve_evidence(self, t: Trace, hypothesis: dict) -> list[str]:
        """Eq. 24: triples around the entities the hypothesis names, ranked by cosine to it."""
        kg = self.kg
        names = [x for c in hypothesis["claims"] for x in (c[0], c[2])] + [hypothesis["answer"]]
        ids = list(dict.fromkeys(i for i in (kg.find_entity(n) for n in names if n) if i >= 0))
        if not ids:
            return []
        if self.use_cypher:
            rows, _ = self._run_cypher(
                t, "retrieve",
                "MATCH (a:Entity)-[r:R]->(b:Entity) WHERE a.name IN $names OR b.name IN $names "
                "RETURN a.name AS h, r.type AS rel, b.name AS tl", {"names": [kg.entity_names[i] for i in ids]})
            texts = [f"{kg.entity_label(kg.find_entity(r['h']))} | {r['rel']} | {kg.entity_label(kg.find_entity(r['tl']))}"
                     for r in rows or []]
        else:
            tids = np.unique(np.concatenate([np.concatenate([kg.out_triples(i), kg.in_triples(i)]) for i in ids]))
            texts = [kg.verbalise((kg.heads[x], kg.rels[x], kg.tails[x])) for x in tids[: self.max_candidate_triples]]
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
        """Eq. 23–31: M paths, β_i = λP + (1−λ)C, weighted vote. Returns (ranking, P_θ source)."""
        base_evidence = [self.kg.verbalise(tr) for tr in estar[: self.evidence_k]]
        answers, consistency, paths_txt = [], [], []
        for i in range(self.num_paths):
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
                new = self._retrieve_evidence(t, h)
                evidence = list(dict.fromkeys(evidence + new))
            a = hyps[-1]["answer"] if hyps else ""
            ai = self.kg.find_entity(a) if a else -1
            a = self._label(ai) if ai >= 0 else a
            c = sum(grounded) / len(grounded) if grounded else 0.0  # Eq. 30
            answers.append(a)
            consistency.append(c)
            paths_txt.append("\n".join(f"{h['hypothesis']} claims={list(map(list, h['claims']))}" for h in hyps))
            t.add("path", f"p{i}", answer=a, consistency=c, grounded=grounded, n_hypotheses=len(hyps))
        distinct = list(dict.fromkeys(a for a in answers if a))
        p_vals: list[float] = []
        source = "frequency"
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
            source, p_vals = "score", scored
        else:
            freq = Counter(a for a in answers if a)
            p_vals = [freq[a] / len(answers) if a else 0.0 for a in answers]
        beta = [self.lam * p + (1.0 - self.lam) * c for p, c in zip(p_vals, consistency)]  # Eq. 29
        ranking = vote(answers, beta, self.vote_mode)  # Eq. 31
        t.add("vote", self.vote_mode, answers=answers, p_theta=p_vals, consistency=consistency, beta=beta,
              lam=self.lam, p_theta_source=source, ranking=ranking)
        return ranking, source

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
