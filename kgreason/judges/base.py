"""Judge protocol and result dataclasses.

``run.py`` stores ``to_jsonable(judge.judge(example, prediction))`` as ``row["judge"]``;
``summarise`` averages ``scores[attr]`` into ``judge/<attr>``, ``total`` into
``judge/pdsqi_total`` and ``per_round[round][attr]`` into ``judge/<round>/<attr>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from kgreason.types import Example, Prediction


@dataclass(frozen=True, slots=True)
class JudgeScore:
    """Attributes:
        scores: ``{attribute: score}`` for the prediction's final answers (mean over samples).
        total: aggregate of ``scores`` (the judge's ``aggregate``: mean or sum).
        std: ``{attribute: population std over samples}`` (empty when ``samples == 1``).
        per_round: ``{round: {attribute: score}}`` when the reasoner exposes rounds
            (``prediction.rounds``), e.g. baseline / round1 / round2 of logoskg_dx.
        per_round_total: ``{round: total}``.
        raw: the judge's raw replies (all samples, all rounds), for audit.
        parse_failures: replies that stayed unparseable after the re-ask budget.
    """

    scores: Mapping[str, float]
    total: float
    std: Mapping[str, float] = field(default_factory=dict)
    per_round: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    per_round_total: Mapping[str, float] = field(default_factory=dict)
    raw: tuple[str, ...] = ()
    parse_failures: int = 0


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


__all__ = ["Judge", "JudgeScore", "ComparisonScore", "Any"]
