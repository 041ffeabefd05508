"""PDSQI-9 LLM-as-a-judge (logoskg.txt §6 "Clinical reasoning quality", App. A.4, Table 5, Fig. 4).

The judge reads the patient record (``example.question``) and a diagnostic output (the
prediction's ranked diagnoses) and scores nine attributes from 1 to 5 with the anchored rubric in
``judges/rubrics/pdsqi9.txt`` (written in our own words after Croxford et al., 2025). Reply
format is strict JSON ``{"cited": 4, ..., "stigmatizing": 5}``; a reply that is not such an
object (all nine keys, integers 1–5) triggers a bounded re-ask (:func:`with_reask`).

Consistency controls:

* ``samples > 1``: the same judgement is sampled n times (``temperature``, ``sample_index`` i);
  scores are the per-attribute mean and ``std`` the per-attribute population std.
* ``compare(example, a, b)`` scores two outputs side by side; with ``position_swap`` it asks
  again with the order reversed, averages, and reports how often the preference agreed.

Per-round scores: when ``prediction.rounds`` maps round names to diagnosis lists
(logoskg_dx writes ``baseline``/``round1``/``round2``), each round is judged too and returned in
``JudgeScore.per_round`` (→ ``judge/<round>/<attr>`` in metrics.json). Identical outputs are
judged once per example.
"""

from __future__ import annotations

import statistics
from importlib.resources import files
from typing import Mapping, Sequence

from kgreason.judges.base import ComparisonScore, JudgeScore
from kgreason.llm.parsing import ParseResult, parse_json, with_reask
from kgreason.types import ChatRequest, Example, Prediction

PDSQI_ATTRIBUTES: tuple[str, ...] = (
    "cited", "accurate", "thorough", "useful", "organized", "comprehensible", "succinct",
    "synthesized", "stigmatizing",
)


def load_rubric(name: str = "pdsqi9") -> str:
    return files("kgreason.judges").joinpath("rubrics", f"{name}.txt").read_text()


def _score_obj(obj, attributes: Sequence[str]) -> tuple[dict[str, int] | None, str]:
    if not isinstance(obj, Mapping):
        return None, "expected a JSON object"
    norm = {str(k).strip().lower(): v for k, v in obj.items()}
    out: dict[str, int] = {}
    for a in attributes:
        if a not in norm:
            return None, f"missing key {a!r}"
        v = norm[a]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != int(v):
            return None, f"{a!r} must be an integer 1-5, got {v!r}"
        if not 1 <= int(v) <= 5:
            return None, f"{a!r} must be in 1..5, got {v!r}"
        out[a] = int(v)
    return out, ""


def parse_pdsqi(text: str, attributes: Sequence[str] = PDSQI_ATTRIBUTES) -> ParseResult:
    """Strict: one JSON object holding every attribute as an integer 1–5.

    >>> parse_pdsqi('{"cited": 5, "accurate": 4}', ["cited", "accurate"]).value
    {'cited': 5, 'accurate': 4}
    >>> parse_pdsqi('{"cited": 7}', ["cited"]).ok
    False
    """
    js = parse_json(text)
    if not js.ok:
        return ParseResult(False, None, js.error)
    val, err = _score_obj(js.value, attributes)
    return ParseResult(val is not None, val, err)


def parse_pair(text: str, attributes: Sequence[str] = PDSQI_ATTRIBUTES) -> ParseResult:
    """Strict: ``{"A": {attr: 1..5}, "B": {attr: 1..5}}``."""
    js = parse_json(text)
    if not js.ok or not isinstance(js.value, Mapping):
        return ParseResult(False, None, "expected a JSON object with keys A and B")
    v = {str(k).strip().upper(): x for k, x in js.value.items()}
    if "A" not in v or "B" not in v:
        return ParseResult(False, None, "expected keys A and B")
    a, ea = _score_obj(v["A"], attributes)
    b, eb = _score_obj(v["B"], attributes)
    if a is None or b is None:
        return ParseResult(False, None, ea or eb)
    return ParseResult(True, {"A": a, "B": b})


def render_output(answers: Sequence[str]) -> str:
    """The diagnostic output shown to the judge: a numbered list, most likely first."""
    if not answers:
        return "(no diagnoses given)"
    return "\n".join(f"{i}. {a}" for i, a in enumerate(answers, 1))


class PDSQIJudge:
    """PDSQI-9 judge.

    Args:
        llm: the run's (cached) LLM, injected by ``run.py``.
        max_reasks: re-asks after an unparseable reply.
        samples: judgements sampled per output (std reported when > 1).
        temperature: sampling temperature when ``samples > 1`` (0 otherwise).
        position_swap: in :meth:`compare`, also ask with the two outputs swapped.
        judge_rounds: also judge each round of ``prediction.rounds``.
        aggregate: ``mean`` (as the "Average" row of Table 5) or ``sum`` (the 9–45 scale).
        max_tokens: judge reply budget.
        seed: base seed of sampled judgements.
    """

    def __init__(self, *, llm, max_reasks: int = 1, samples: int = 1, temperature: float = 0.7,
                 position_swap: bool = False, judge_rounds: bool = True, aggregate: str = "mean",
                 max_tokens: int = 300, seed: int = 0, rubric: str = "pdsqi9") -> None:
        if samples < 1:
            raise ValueError(f"PDSQIJudge: samples must be >= 1, got {samples}")
        if aggregate not in ("mean", "sum"):
            raise ValueError(f"PDSQIJudge: aggregate must be mean | sum, got {aggregate!r}")
        self.llm, self.max_reasks, self.samples = llm, int(max_reasks), int(samples)
        self.temperature, self.position_swap, self.judge_rounds = float(temperature), position_swap, judge_rounds
        self.aggregate, self.max_tokens, self.seed = aggregate, max_tokens, seed
        self.rubric = load_rubric(rubric)
        self.attributes = PDSQI_ATTRIBUTES

    # ------------------------------------------------------------------ prompts
    def _keys(self) -> str:
        return "{" + ", ".join(f'"{a}": <1-5>' for a in self.attributes) + "}"

    def _prompt(self, record: str, output: str) -> str:
        return (f"{self.rubric}\nPatient record:\n{record}\n\nDiagnostic output to evaluate:\n{output}\n\n"
                f"Reply with only a JSON object with integer scores: {self._keys()}")

    def _pair_prompt(self, record: str, out_a: str, out_b: str) -> str:
        return (f"{self.rubric}\nPatient record:\n{record}\n\nOutput A:\n{out_a}\n\nOutput B:\n{out_b}\n\n"
                f"Score both outputs. Reply with only a JSON object "
                f'{{"A": {self._keys()}, "B": {self._keys()}}}')

    def _request(self, prompt: str, i: int) -> ChatRequest:
        sampled = self.samples > 1
        return ChatRequest.of(prompt, temperature=self.temperature if sampled else 0.0,
                              max_tokens=self.max_tokens, seed=self.seed + i if sampled else None,
                              sample_index=i)

    def _total(self, scores: Mapping[str, float]) -> float:
        vals = [float(scores[a]) for a in self.attributes if a in scores]
        if not vals:
            return float("nan")
        return sum(vals) if self.aggregate == "sum" else sum(vals) / len(vals)

    # ------------------------------------------------------------------ absolute scoring
    def score_output(self, record: str, answers: Sequence[str]):
        """``(mean scores, std, raw replies, parse failures)`` over ``samples`` judgements."""
        prompt = self._prompt(record, render_output(answers))
        got: list[dict[str, int]] = []
        raw: list[str] = []
        failures = 0
        for i in range(self.samples):
            res, comps = with_reask(self.llm, self._request(prompt, i),
                                    lambda s: parse_pdsqi(s, self.attributes), self.max_reasks)
            raw += [c.text for c in comps]
            failures += sum(1 for c in comps[:-1]) + (0 if res.ok else 1)
            if res.ok:
                got.append(res.value)
        if not got:
            raise ValueError(f"PDSQI judge: no parseable reply after {self.max_reasks} re-ask(s); last: {raw[-1][:200]!r}")
        scores = {a: statistics.fmean(g[a] for g in got) for a in self.attributes}
        std = {a: statistics.pstdev([g[a] for g in got]) for a in self.attributes} if len(got) > 1 else {}
        return scores, std, raw, failures

    def judge(self, example: Example, prediction: Prediction) -> JudgeScore:
        memo: dict[tuple[str, ...], tuple] = {}

        def once(answers: Sequence[str]):
            key = tuple(answers)
            if key not in memo:
                memo[key] = self.score_output(example.question, key)
            return memo[key]

        scores, std, raw, fails = once(prediction.answers)
        raws, failures = list(raw), fails
        per_round: dict[str, dict[str, float]] = {}
        per_round_total: dict[str, float] = {}
        rounds = prediction.rounds if self.judge_rounds else None
        if isinstance(rounds, Mapping):
            for name, answers in rounds.items():
                fresh = tuple(answers) not in memo
                s, _, r, f = once(list(answers))
                if fresh:
                    raws += r
                    failures += f
                per_round[str(name)] = dict(s)
                per_round_total[str(name)] = self._total(s)
        return JudgeScore(scores=dict(scores), total=self._total(scores), std=std, per_round=per_round,
                          per_round_total=per_round_total, raw=tuple(raws), parse_failures=failures)

    # ------------------------------------------------------------------ pairwise comparison
    def compare(self, example: Example, a, b) -> ComparisonScore:
        """Score outputs ``a`` and ``b`` (Predictions or diagnosis lists) side by side."""
        la = list(a.answers) if isinstance(a, Prediction) else list(a)
        lb = list(b.answers) if isinstance(b, Prediction) else list(b)
        ra, rb = render_output(la), render_output(lb)
        parser = lambda s: parse_pair(s, self.attributes)  # noqa: E731
        res1, c1 = with_reask(self.llm, self._request(self._pair_prompt(example.question, ra, rb), 0), parser, self.max_reasks)
        raw = [c.text for c in c1]
        if not res1.ok:
            raise ValueError(f"PDSQI compare: unparseable reply: {raw[-1][:200]!r}")
        sa, sb = dict(res1.value["A"]), dict(res1.value["B"])
        agreement = None
        if self.position_swap:
            res2, c2 = with_reask(self.llm, self._request(self._pair_prompt(example.question, rb, ra), 0), parser, self.max_reasks)
            raw += [c.text for c in c2]
            if not res2.ok:
                raise ValueError(f"PDSQI compare (swapped): unparseable reply: {raw[-1][:200]!r}")
            sa2, sb2 = res2.value["B"], res2.value["A"]  # un-swap
            sign = lambda x, y: (x > y) - (x < y)  # noqa: E731
            agree = [sign(sa[k], sb[k]) == sign(sa2[k], sb2[k]) for k in self.attributes]
            agreement = sum(agree) / len(agree)
            sa = {k: (sa[k] + sa2[k]) / 2 for k in self.attributes}
            sb = {k: (sb[k] + sb2[k]) / 2 for k in self.attributes}
        pref = {k: ("a" if sa[k] > sb[k] else "b" if sb[k] > sa[k] else "tie") for k in self.attributes}
        return ComparisonScore(a=sa, b=sb, preference=pref, swap_agreement=agreement, raw=tuple(raw))
