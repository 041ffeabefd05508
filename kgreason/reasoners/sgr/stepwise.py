"""§3.2 Stepwise reasoning enhancement and §3.3 collaborative reasoning integration
(shared/papers/sgr.txt, Eq. 7–14).

M stepwise paths over ``G_q`` (Eq. 12): at step t the model sees q, ``C_q``, the numbered ``E*_q``
and its earlier states ``z_<t`` and picks a triple ``e_t`` and writes ``z_t = f_θ(q, z_<t, e_t)``
(Eq. 7–8); ``C(p, G_q) = (1/T) Σ_t I(e_t ∈ E*_q)`` (Eq. 10); ``α_i = λ P_θ(a_i | q, p_i) + (1 − λ)
C(p_i, G_q)`` (Eq. 13); the family's answer is Eq. 14, ``â = argmax_a Σ_i α_i I(a_i = a)``
(:meth:`StepwiseReasoning.stepwise`, a :class:`~kgreason.reasoners.sgr.common.PathVote`). Which
family's answer is final is the reasoner's rule (:meth:`~kgreason.reasoners.sgr.reasoner.SGR.decide`).
"""

from __future__ import annotations

import numpy as np

from kgreason.llm.parsing import ParseResult, parse_json
from kgreason.reasoners.base import Trace, render
from kgreason.reasoners.sgr.common import PathVote, SGRKit, vote
from kgreason.reasoners.sgr.subgraph import QuestionGraph
from kgreason.types import Example


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


class StepwiseReasoning(SGRKit):
    """§3.2–3.3: the stepwise paths, their ``α_i`` and Eq. 14."""

    def stepwise(self, t: Trace, q: QuestionGraph) -> PathVote | None:
        """§3.3, Eq. 12–14: ``M = num_paths`` stepwise paths over ``G_q`` (:meth:`stepwise_path`),
        each weighted ``α_i = λ P_θ(a_i | q, p_i) + (1 − λ) C(p_i, G_q)`` (Eq. 13) with ``P_θ``
        from :meth:`path_p_theta` (log-probs, else the answer's frequency over the M paths), and
        Eq. 14's vote over them. None when the paths do not run (``stepwise=false``, ablation
        ``sgr_no_stepwise``, or an empty ``E*_q``). The trace's ``stepwise`` / ``paths`` step has
        every term; funnel stage ``stepwise_parsed`` when a path reached an answer."""
        if not self.use_stepwise or not len(q.estar):
            return None
        example = q.example
        lines = "\n".join(f"{j + 1}. {self.kg.verbalise(tr)}" for j, tr in enumerate(q.estar))
        answers, consistency, texts = [], [], []
        for i in range(self.num_paths):
            a, c, txt = self.stepwise_path(t, example, i, q.estar, lines, q.constraints)
            answers.append(a)
            consistency.append(c)
            texts.append(txt)
        p_vals, source = self.path_p_theta(example, answers, texts)
        alpha = [self.lam * p + (1.0 - self.lam) * c for p, c in zip(p_vals, consistency)]  # Eq. 13
        ranking = vote(answers, alpha, self.vote_mode)  # Eq. 14
        t.add("stepwise", "paths", answers=answers, p_theta=p_vals, consistency=consistency, alpha=alpha,
              lam=self.lam, p_theta_source=source, ranking=ranking[:20])
        if any(answers):
            t.stage("stepwise_parsed")
        return PathVote(answers, alpha, ranking, source)

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
        """``e_t`` of one step as text, and ``I(e_t ∈ E*_q)`` (Eq. 10). A written triple's relation
        is matched by name only (:meth:`relations_by_name`): a triple is in ``E*_q`` when it names
        one, not when its relation merely resembles one."""
        if triple is None:
            return "(no triple)", False
        if isinstance(triple, int):
            if 1 <= triple <= len(estar):
                return self.kg.verbalise(estar[triple - 1]), True
            return f"(no triple {triple})", False
        h, r, tl = triple
        hi, ti = self.kg.find_entity(h), self.kg.find_entity(tl)
        rids, _ = self.relations_by_name(r)
        ok = hi >= 0 and ti >= 0 and any((hi, rid, ti) in estar_set for rid in rids)
        return f"{h} | {r} | {tl}", bool(ok)
