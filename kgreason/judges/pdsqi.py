"""PDSQI-9 LLM-as-a-judge (logoskg.txt §6 "Clinical reasoning quality", App. A.4, Table 5, Fig. 4).

The judge is its own model: ``run.build`` builds ``judge.llm`` (any LLM config, independent of the
run's ``llm``, with the same lazy builder and call cache) and refuses, before the first example, a
judge that is the judged model unless ``judge.allow_self_judging=true`` (LogosKG judges every
model with GPT-5-mini).

The rubric (``judges/rubrics/pdsqi9.txt``, in our own words) follows the published instrument's
scales (Croxford et al., 2025; notes in shared/papers/pdsqi9-notes.md):

* seven 1–5 items: ``cited``, ``accurate``, ``thorough``, ``useful``, ``organized``,
  ``comprehensible``, ``succinct``;
* ``abstraction_needed``: 0/1, a gate; ``synthesized``: 1–5 when abstraction is needed, else
  not applicable (``"NA"`` in the reply, ``None`` in the scores, left out of every mean);
* ``stigmatizing`` (the output) and ``stigmatizing_record`` (the patient record): 0/1, 1 = the
  text contains stigmatizing language (lower is better).

A reply that is not one JSON object with every item on its own scale triggers a bounded re-ask
(:func:`with_reask`); a 3 on a binary item is rejected, never averaged in.

Aggregate: ``average`` = the mean of the seven dimensions LogosKG Table 5 reports (accurate,
thorough, useful, organized, comprehensible, succinct, synthesized), as the table's "Average" row
(checked there: GPT-4.1 / UMLS / ProbSum baseline, (3.42+3.17+3.61+3.38+4.62+3.65+3.24)/7 = 3.58).
Run level: ``judge/pdsqi_average`` is the mean of the seven run-level ``judge/<attr>`` means, the
way the table's row is formed; every item is also logged on its own.

Consistency controls:

* ``samples > 1``: the same judgement is sampled n times (``temperature``, ``sample_index`` i);
  scores are the per-attribute mean and ``std`` the per-attribute population std.
* ``compare(example, a, b)`` scores two outputs side by side; with ``position_swap`` it asks
  again with the order reversed, averages, and reports how often the preference agreed.

What the judge reads: the output under review as the method wrote it (:func:`output_of`): a
reasoner's full text (``extra["output"]``: CoT's reasoning and answer line) where it writes one,
else the diagnoses in the method's order, each with the method's reasoning for it
(``extra["reasoning"]``) where it gives one; never a list numbered by us.

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

LIKERT = (1, 2, 3, 4, 5)
BINARY = (0, 1)
# item → (allowed integer values, not-applicable allowed)
PDSQI_SCALES: dict[str, tuple[tuple[int, ...], bool]] = {
    "cited": (LIKERT, False),
    "accurate": (LIKERT, False),
    "thorough": (LIKERT, False),
    "useful": (LIKERT, False),
    "organized": (LIKERT, False),
    "comprehensible": (LIKERT, False),
    "succinct": (LIKERT, False),
    "abstraction_needed": (BINARY, False),
    "synthesized": (LIKERT, True),   # NA exactly when abstraction_needed == 0
    "stigmatizing": (BINARY, False),
    "stigmatizing_record": (BINARY, False),
}
PDSQI_ATTRIBUTES: tuple[str, ...] = tuple(PDSQI_SCALES)
# the seven dimensions of LogosKG Table 5, whose mean is the table's "Average"
TABLE5_DIMENSIONS: tuple[str, ...] = (
    "accurate", "thorough", "useful", "organized", "comprehensible", "succinct", "synthesized",
)
_NA = ("na", "n/a", "not applicable")


def load_rubric(name: str = "pdsqi9") -> str:
    return files("kgreason.judges").joinpath("rubrics", f"{name}.txt").read_text()


def _scale_text(a: str) -> str:
    allowed, na = PDSQI_SCALES.get(a, (LIKERT, False))
    return f"{allowed[0]}-{allowed[-1]}" + (' or "NA"' if na else "")


def _score_obj(obj, attributes: Sequence[str]) -> tuple[dict[str, int | None] | None, str]:
    if not isinstance(obj, Mapping):
        return None, "expected a JSON object"
    norm = {str(k).strip().lower(): v for k, v in obj.items()}
    out: dict[str, int | None] = {}
    for a in attributes:
        if a not in norm:
            return None, f"missing key {a!r}"
        allowed, na_ok = PDSQI_SCALES.get(a, (LIKERT, False))
        v = norm[a]
        if na_ok and (v is None or (isinstance(v, str) and v.strip().lower() in _NA)):
            out[a] = None
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != int(v):
            return None, f"{a!r} must be an integer {_scale_text(a)}, got {v!r}"
        if int(v) not in allowed:
            return None, f"{a!r} must be one of {_scale_text(a)}, got {v!r}"
        out[a] = int(v)
    if "abstraction_needed" in out and "synthesized" in out:
        if out["abstraction_needed"] == 0 and out["synthesized"] is not None:
            return None, "'synthesized' must be \"NA\" when 'abstraction_needed' is 0"
        if out["abstraction_needed"] == 1 and out["synthesized"] is None:
            return None, "'synthesized' needs a score 1-5 when 'abstraction_needed' is 1"
    return out, ""


def parse_pdsqi(text: str, attributes: Sequence[str] = PDSQI_ATTRIBUTES) -> ParseResult:
    """Strict: one JSON object holding every attribute on its own scale (:data:`PDSQI_SCALES`).

    >>> parse_pdsqi('{"cited": 5, "accurate": 4}', ["cited", "accurate"]).value
    {'cited': 5, 'accurate': 4}
    >>> parse_pdsqi('{"cited": 7}', ["cited"]).ok
    False
    >>> parse_pdsqi('{"stigmatizing": 3}', ["stigmatizing"]).ok
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


def render_output(answers: Sequence[str], reasoning: Mapping[str, str] | None = None,
                  text: str | None = None) -> str:
    """The output under review, as a physician would read it (issue 43): the text the method wrote
    (``text``, a reasoner's ``extra["output"]``, e.g. CoT's reasoning and answer line) when it
    wrote one; else its diagnoses in its own order, one per line, each followed by the method's
    reasoning for it where it gives one (``reasoning``, ``extra["reasoning"]``: diagnosis → text).
    No numbering or other structure the method did not produce is added."""
    if text is not None and str(text).strip():
        return str(text).strip()
    if not answers:
        return "(no diagnoses given)"
    why = {str(k): str(v).strip() for k, v in (reasoning or {}).items() if str(v).strip()}
    return "\n".join(f"{a}: {why[a]}" if a in why else a for a in answers)


def output_of(prediction: Prediction) -> str:
    """:func:`render_output` of a prediction's final output (its ``extra["output"]`` text or
    ``extra["reasoning"]`` when the reasoner records them)."""
    extra = prediction.extra or {}
    reasoning = extra.get("reasoning") if isinstance(extra.get("reasoning"), Mapping) else None
    text = extra.get("output") if isinstance(extra.get("output"), str) else None
    return render_output(prediction.answers, reasoning, text)


class PDSQIJudge:
    """PDSQI-9 judge.

    Args:
        llm: the judge's own (metered, cached) LLM, built by ``run.py`` from ``judge.llm``.
        max_reasks: re-asks after an unparseable reply.
        samples: judgements sampled per output (std reported when > 1).
        temperature: sampling temperature when ``samples > 1`` (0 otherwise).
        position_swap: in :meth:`compare`, also ask with the two outputs swapped.
        judge_rounds: also judge each round of ``prediction.rounds``.
        aggregate: ``mean``: the mean of the seven Table 5 dimensions (the "Average" row);
            ``sum``: their sum (7–35; 6–30 when ``synthesized`` is NA).
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
        return "{" + ", ".join(f'"{a}": <{_scale_text(a)}>' for a in self.attributes) + "}"

    def _prompt(self, record: str, output: str) -> str:
        return (f"{self.rubric}\nPatient record:\n{record}\n\nDiagnostic output to evaluate, as the method wrote it:\n{output}\n\n"
                f"Reply with only a JSON object, one value per item on its own scale: {self._keys()}")

    def _pair_prompt(self, record: str, out_a: str, out_b: str) -> str:
        return (f"{self.rubric}\nPatient record:\n{record}\n\nOutput A:\n{out_a}\n\nOutput B:\n{out_b}\n\n"
                f"Score both outputs. Reply with only a JSON object "
                f'{{"A": {self._keys()}, "B": {self._keys()}}}')

    def _request(self, prompt: str, i: int) -> ChatRequest:
        sampled = self.samples > 1
        return ChatRequest.of(prompt, temperature=self.temperature if sampled else 0.0,
                              max_tokens=self.max_tokens, seed=self.seed + i if sampled else None,
                              sample_index=i)

    def _total(self, scores: Mapping[str, float | None]) -> float:
        vals = [float(scores[a]) for a in TABLE5_DIMENSIONS if scores.get(a) is not None]
        if not vals:
            return float("nan")
        return sum(vals) if self.aggregate == "sum" else sum(vals) / len(vals)

    # ------------------------------------------------------------------ absolute scoring
    def score_output(self, record: str, output: str | Sequence[str]):
        """``(mean scores, std, raw replies, parse failures)`` over ``samples`` judgements of
        ``output`` (the rendered output under review; a list is rendered by :func:`render_output`)."""
        prompt = self._prompt(record, output if isinstance(output, str) else render_output(output))
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
        def vals(a):
            return [g[a] for g in got if g[a] is not None]

        scores = {a: (statistics.fmean(vals(a)) if vals(a) else None) for a in self.attributes}
        std = {a: statistics.pstdev(vals(a)) for a in self.attributes if vals(a)} if len(got) > 1 else {}
        return scores, std, raw, failures

    def judge(self, example: Example, prediction: Prediction) -> JudgeScore:
        memo: dict[str, tuple] = {}

        def once(output: str):
            if output not in memo:
                memo[output] = self.score_output(example.question, output)
            return memo[output]

        scores, std, raw, fails = once(output_of(prediction))
        raws, failures = list(raw), fails
        per_round: dict[str, dict[str, float]] = {}
        per_round_total: dict[str, float] = {}
        rounds = prediction.rounds if self.judge_rounds else None
        if isinstance(rounds, Mapping):
            for name, answers in rounds.items():
                # a round is its diagnosis list (the round that equals the final output reads as it)
                out = output_of(prediction) if tuple(answers) == tuple(prediction.answers) else render_output(list(answers))
                fresh = out not in memo
                s, _, r, f = once(out)
                if fresh:
                    raws += r
                    failures += f
                per_round[str(name)] = dict(s)
                per_round_total[str(name)] = self._total(s)
        return JudgeScore(scores=dict(scores), total=self._total(scores), std=std, per_round=per_round,
                          per_round_total=per_round_total, raw=tuple(raws), parse_failures=failures,
                          average_of=TABLE5_DIMENSIONS)

    # ------------------------------------------------------------------ pairwise comparison
    def compare(self, example: Example, a, b) -> ComparisonScore:
        """Score outputs ``a`` and ``b`` (Predictions or diagnosis lists) side by side."""
        ra = output_of(a) if isinstance(a, Prediction) else render_output(list(a))
        rb = output_of(b) if isinstance(b, Prediction) else render_output(list(b))
        parser = lambda s: parse_pair(s, self.attributes)  # noqa: E731
        res1, c1 = with_reask(self.llm, self._request(self._pair_prompt(example.question, ra, rb), 0), parser, self.max_reasks)
        raw = [c.text for c in c1]
        if not res1.ok:
            raise ValueError(f"PDSQI compare: unparseable reply: {raw[-1][:200]!r}")
        sa, sb = dict(res1.value["A"]), dict(res1.value["B"])
        # preferences over the 1-5 quality items scored for both outputs (binary items and NA skipped)
        keys = [k for k in self.attributes if PDSQI_SCALES.get(k, (LIKERT,))[0] == LIKERT]
        agreement = None
        if self.position_swap:
            res2, c2 = with_reask(self.llm, self._request(self._pair_prompt(example.question, rb, ra), 0), parser, self.max_reasks)
            raw += [c.text for c in c2]
            if not res2.ok:
                raise ValueError(f"PDSQI compare (swapped): unparseable reply: {raw[-1][:200]!r}")
            sa2, sb2 = res2.value["B"], res2.value["A"]  # un-swap
            keys = [k for k in keys if None not in (sa[k], sb[k], sa2[k], sb2[k])]
            sign = lambda x, y: (x > y) - (x < y)  # noqa: E731
            agree = [sign(sa[k], sb[k]) == sign(sa2[k], sb2[k]) for k in keys]
            agreement = sum(agree) / len(agree) if agree else None
            avg = lambda x, y: None if x is None or y is None else (x + y) / 2  # noqa: E731
            sa = {k: avg(sa[k], sa2[k]) for k in self.attributes}
            sb = {k: avg(sb[k], sb2[k]) for k in self.attributes}
        keys = [k for k in keys if sa[k] is not None and sb[k] is not None]
        pref = {k: ("a" if sa[k] > sb[k] else "b" if sb[k] > sa[k] else "tie") for k in keys}
        return ComparisonScore(a=sa, b=sb, preference=pref, swap_agreement=agreement, raw=tuple(raw))
