"""The one name → :class:`Metric` table. Datasets name their metrics in YAML (``metrics: [...]``).

A metric scores one (prediction, example) pair; ``None`` means "not applicable" and is left
out of the mean. Distributions (hops, judge sub-scores) are reports, not metrics.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from kgreason.metrics import qa
from kgreason.types import Example, Prediction


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    per_example: Callable[[Prediction, Example], float | None]
    aggregate: Callable[[Sequence[float]], float] = statistics.fmean
    higher_is_better: bool = True


def _groups(ex: Example) -> tuple[tuple[str, ...], ...]:
    return ex.answer_groups or ((tuple(ex.answers)),)


HITS_AT_1 = Metric("hits_at_1", lambda p, e: qa.hits_at_1(p.answers, e.answers))
ACCURACY = Metric("accuracy", lambda p, e: qa.accuracy(p.answers, _groups(e)))
EXACT_MATCH = Metric("em", lambda p, e: qa.exact_match_multi(p.answer, e.answers))
F1 = Metric("f1", lambda p, e: qa.f1_multi(p.answer, e.answers))
ANSWER_COVERAGE = Metric(
    "answer_coverage",
    lambda p, e: (None if "retrieved" not in p.extra else qa.coverage(p.extra["retrieved"], e.answers)),
)

METRICS: dict[str, Metric] = {m.name: m for m in (HITS_AT_1, ACCURACY, EXACT_MATCH, F1, ANSWER_COVERAGE)}


def register(metric: Metric) -> Metric:
    METRICS[metric.name] = metric
    return metric
