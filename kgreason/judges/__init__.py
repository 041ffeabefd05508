"""LLM-as-a-judge scoring of predictions.

* :mod:`base` — the :class:`Judge` protocol and :class:`JudgeScore` (per-attribute scores + total,
  optional per-round scores, per-attribute std under repeated sampling).
* :mod:`pdsqi` — :class:`PDSQIJudge`, the PDSQI-9 rubric (logoskg.txt §6, App. A.4 Table 5) with
  strict JSON parsing, bounded re-ask, repeated sampling and position-swapped pairwise comparison.
"""

from kgreason.judges.base import ComparisonScore, Judge, JudgeScore
from kgreason.judges.pdsqi import PDSQI_ATTRIBUTES, PDSQIJudge

__all__ = ["Judge", "JudgeScore", "ComparisonScore", "PDSQIJudge", "PDSQI_ATTRIBUTES"]
