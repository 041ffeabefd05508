"""Judge protocol and result dataclasses.

``run.py`` stores ``to_jsonable(judge.judge(example, prediction))`` as ``row["judge"]``;
:func:`judge_metrics` (called by ``run.summarise``) averages ``scores[attr]`` into
``judge/<attr>``, ``per_round[round][attr]`` into ``judge/<round>/<attr>``, and the mean of the
``average_of`` attribute means into ``judge/pdsqi_average`` (and ``judge/<round>/pdsqi_average``).
:func:`judge_llm_config` picks the judge's own LLM config and refuses self-judging.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from kgreason.types import Example, Prediction


@dataclass(frozen=True, slots=True)
class JudgeScore:
    """Attributes:
        scores: ``{attribute: score}`` for the prediction's final answers (mean over samples);
            ``None`` = not applicable (left out of every mean).
        total: aggregate of the ``average_of`` scores (the judge's ``aggregate``: mean or sum).
        std: ``{attribute: population std over samples}`` (empty when ``samples == 1``).
        per_round: ``{round: {attribute: score}}`` when the reasoner exposes rounds
            (``prediction.rounds``), e.g. baseline / round1 / round2 of logoskg_dx.
        per_round_total: ``{round: total}``.
        raw: the judge's raw replies (all samples, all rounds), for audit.
        parse_failures: replies that stayed unparseable after the re-ask budget.
        average_of: the attributes whose run-level means are averaged into ``judge/pdsqi_average``
            (PDSQI: the seven dimensions of LogosKG Table 5).
    """

    scores: Mapping[str, float]
    total: float
    std: Mapping[str, float] = field(default_factory=dict)
    per_round: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    per_round_total: Mapping[str, float] = field(default_factory=dict)
    raw: tuple[str, ...] = ()
    parse_failures: int = 0
    average_of: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ComparisonScore:
    """Pairwise comparison of two outputs for the same example.

    Attributes:
        a, b: ``{attribute: score}`` of each output (averaged over both orders when swapped).
        preference: ``{attribute: "a" | "b" | "tie"}``.
        swap_agreement: fraction of attributes whose preference is the same in both presentation
            orders (1.0 = no position bias observed; ``None`` when ``position_swap`` is off).
        raw: raw replies.
    """

    a: Mapping[str, float]
    b: Mapping[str, float]
    preference: Mapping[str, str]
    swap_agreement: float | None = None
    raw: tuple[str, ...] = ()


class Judge(Protocol):
    rubric: str

    def judge(self, example: Example, prediction: Prediction) -> JudgeScore: ...


def _mean_of(dicts: list[Mapping[str, Any]], key: str) -> float | None:
    vals = [d[key] for d in dicts if d.get(key) is not None]
    return sum(vals) / len(vals) if vals else None


def judge_metrics(judge_rows: list[Mapping[str, Any]]) -> dict[str, float]:
    """Run-level judge scores from the rows' ``judge`` objects (those with ``scores``).

    ``judge/<attr>``: mean over examples where the attribute applies; ``judge/pdsqi_average``: the
    mean of the run-level means of the ``average_of`` attributes (LogosKG Table 5's "Average" is
    the mean of its seven rows); the same under ``judge/<round>/`` for per-round scores.
    """
    out: dict[str, float] = {}
    if not judge_rows:
        return out

    def block(prefix: str, score_dicts: list[Mapping[str, Any]], average_of) -> None:
        means = {}
        for k in sorted({k for s in score_dicts for k in s}):
            m = _mean_of(score_dicts, k)
            if m is not None:
                means[k] = m
                out[f"{prefix}{k}"] = m
        dims = [means[k] for k in average_of if k in means]
        if average_of and dims:
            out[f"{prefix}pdsqi_average"] = sum(dims) / len(dims)

    average_of = next((tuple(j["average_of"]) for j in judge_rows if j.get("average_of")), ())
    block("judge/", [j["scores"] for j in judge_rows], average_of)
    rounds = sorted({rd for j in judge_rows for rd in (j.get("per_round") or {})})
    for rd in rounds:
        block(f"judge/{rd}/", [j["per_round"][rd] for j in judge_rows if rd in (j.get("per_round") or {})], average_of)
    return out


def _same_model(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def ident(c):
        return (str(c.get("_target_", "")), str(c.get("model", "")), str(c.get("base_url", "") or ""),
                str(c.get("package", "") or ""), str(c.get("gguf_path", "") or ""))

    return ident(a) == ident(b)


def judge_llm_config(judge_cfg: Any, run_llm_cfg: Any) -> Any:
    """The judge's own LLM config (``judge.llm``), checked before any example is answered.

    Raises ``ValueError`` when ``judge.llm`` is missing, or when it names the judged model (same
    backend, model, endpoint) and ``judge.allow_self_judging`` is not true: a model grading its
    own output is not the LogosKG protocol (GPT-5-mini judges the other models, App. A.4)."""
    from omegaconf import OmegaConf

    jl = judge_cfg.get("llm") if judge_cfg is not None else None
    if jl is None or not jl.get("_target_"):
        raise ValueError("judge.llm is not set: the judge needs its own LLM config, e.g. "
                         "`llm@judge.llm=openai judge.llm.model=gpt-5-mini` (conf/judge/pdsqi.yaml)")
    a = OmegaConf.to_container(jl, resolve=True)
    b = OmegaConf.to_container(run_llm_cfg, resolve=True) if run_llm_cfg is not None else {}
    if _same_model(a, b) and not bool(judge_cfg.get("allow_self_judging", False)):
        raise ValueError(f"judge.llm is the judged model ({a.get('_target_')}, model={a.get('model')!r}): "
                         "the model would grade its own output. Pick another judge model "
                         "(llm@judge.llm=..., judge.llm.model=...) or set judge.allow_self_judging=true")
    return jl


__all__ = ["Judge", "JudgeScore", "ComparisonScore", "judge_metrics", "judge_llm_config", "Any"]
