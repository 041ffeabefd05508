"""§3.5 Collaborative reasoning enhancement (shared/papers/sgr.txt, Eq. 23–31).

"When direct reasoning fails to produce a correct answer, the framework applies collaborative
reasoning enhancement": ``M = num_paths`` sampled paths, each alternating a hypothesis
``h_t = f_θ(q, E_<t, h_<t)`` with the triples it relies on (Eq. 23, 25) and a retrieval
``E_t = Retrieve(h_t, G)`` (Eq. 24) for ``collab_iterations`` rounds (Eq. 26–28);
``C(p_i, G) = (1/T) Σ_t I(E^i_t ⊆ G)`` (Eq. 30), ``β_i = λ P_θ(a_i | q, p_i) + (1 − λ) C`` (Eq. 29),
and the family's answer ``â = argmax_a Σ_i β_i I(a_i = a)`` (Eq. 31,
:meth:`CollaborativeReasoning.collaborative`). When it runs is the reasoner's ``collaborate``
setting; which family's answer is final is :meth:`~kgreason.reasoners.sgr.reasoner.SGR.decide`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kgreason.llm.parsing import parse_hypothesis
from kgreason.ranking import ranked
from kgreason.reasoners.base import Trace, render
from kgreason.reasoners.sgr.common import PathVote, SGRKit, vote
from kgreason.reasoners.sgr.subgraph import QuestionGraph
from kgreason.types import Example


class CollaborativeReasoning(SGRKit):
    """§3.5: the collaborative paths, their ``β_i`` and Eq. 31."""

    def collaborative(self, t: Trace, q: QuestionGraph) -> PathVote:
        """§3.5, Eq. 23–31: ``M`` reasoning paths (:meth:`reasoning_path`), their confidence
        ``β_i = λ P_θ(a_i | q, p_i) + (1 − λ) C(p_i, G)`` (Eq. 29) and the weighted vote (Eq. 31,
        recorded as the ``vote`` step; funnel stage ``collaborative_run``)."""
        t.stage("collaborative_run")
        pool = [self.kg.verbalise(tr) for tr in q.estar]
        base_evidence = pool[: self.evidence_k]
        answers, consistency, paths_txt = [], [], []
        for i in range(self.num_paths):
            a, c, txt = self.reasoning_path(t, q.example, i, base_evidence, pool)
            answers.append(a)
            consistency.append(c)
            paths_txt.append(txt)
        p_vals, source = self.path_p_theta(q.example, answers, paths_txt)
        beta = [self.lam * p + (1.0 - self.lam) * c for p, c in zip(p_vals, consistency)]  # Eq. 29
        ranking = vote(answers, beta, self.vote_mode)  # Eq. 31
        t.add("vote", self.vote_mode, answers=answers, p_theta=p_vals, consistency=consistency, beta=beta,
              lam=self.lam, p_theta_source=source, ranking=ranking)
        return PathVote(answers, beta, ranking, source)

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

    def _retrieve_evidence(self, t: Trace, hypothesis: dict, pool: list[str]) -> list[str]:
        """Eq. 24: triples around the entities the hypothesis names (a Cypher query), ranked by
        cosine to it. Without the DB ("without neo4j") no structured retrieval runs: the
        ``pool`` of ``E*_q`` triples is ranked by cosine instead."""
        kg = self.kg
        if not self.use_cypher:
            if not pool:
                return []
            query = hypothesis["hypothesis"] or hypothesis["answer"]
            idx, _ = ranked("sgr.evidence", pool, lambda: self.embedder.similarity([query], pool)[0],
                            k=self.evidence_k, ident=[query, *pool])
            return [pool[i] for i in idx]
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
        query = hypothesis["hypothesis"] or hypothesis["answer"]
        idx, _ = ranked("sgr.evidence", texts, lambda: self.embedder.similarity([query], texts)[0],
                        k=self.evidence_k, ident=[query, *texts])
        return [texts[i] for i in idx]

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
