"""The one name → :class:`Metric` table. Datasets name their metrics in YAML (``metrics: [...]``).

A metric scores one (prediction, example) pair; ``None`` means "not applicable" and is left
out of the mean. Distributions (hops, judge sub-scores) are reports, not metrics
(:mod:`kgreason.metrics.hops`). Definitions and the official script each one matches:
docs/metrics.md.

**Errored examples (one denominator, docs/metrics.md "Errored examples").** A score's mean is
over every example the run wrote a row for, answered or errored, that the score applies to;
an errored example scores the metric's ``worst`` value. Whether a score applies is decided by
the example (it has the gold the score needs: :func:`applies`) and by the method (the run's
answered examples report what a ``method_side`` score reads: a retrieved set, a round), never
by whether the example errored. A metric whose ``worst`` is ``None`` is a count of what the
method did (``search_space``), not a score: errored examples have no value for it.
:func:`error_value` is an errored example's value, :func:`run_values` the per-example values a
run's mean is taken over (``run.summarise`` and ``kgreason.score`` both use them).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from kgreason.metrics import clinical, community, qa, retrieval
from kgreason.types import Example, Prediction


@dataclass(frozen=True, slots=True)
class Metric:
    """``worst``: the value an errored example scores (the bottom of the score's range; ``None``:
    not a score, errored examples are left out). ``method_side``: the score reads something a
    method may not report at all (``extra["retrieved"]``, a round); it applies to a run's errored
    examples only when some answered example of the run has a value for it."""

    name: str
    per_example: Callable[[Prediction, Example], float | None]
    aggregate: Callable[[Sequence[float]], float] = statistics.fmean
    higher_is_better: bool = True
    worst: float | None = 0.0
    method_side: bool = False


def _groups(ex: Example) -> tuple[tuple[str, ...], ...]:
    return ex.answer_groups or ((tuple(ex.answers)),)


def _dx(i: int) -> Callable[[Prediction, Example], float | None]:
    def fn(p: Prediction, e: Example) -> float | None:
        r = clinical.dx_prf(p.answers, e.diagnoses or e.answers, clinical.links_of(p.extra))
        return None if r is None else r[i]

    return fn


def _dx_round(rd: str, i: int) -> Callable[[Prediction, Example], float | None]:
    """Diagnosis P/R/F1 of one round the prediction carries (``Prediction.rounds[rd]``);
    not applicable (None) when it carries no such round. Entity-level: the run's KG links
    (``extra["dx_entity_links"]``) join the names of one entity (metrics/clinical.py)."""
    def fn(p: Prediction, e: Example) -> float | None:
        if rd not in p.rounds:
            return None
        r = clinical.dx_prf(p.rounds[rd], e.diagnoses or e.answers, clinical.links_of(p.extra))
        return None if r is None else r[i]

    return fn


def _rog(i: int) -> Callable[[Prediction, Example], float | None]:
    def fn(p: Prediction, e: Example) -> float | None:
        r = community.rog_scores(p.answers, community.rog_golds(e.answers, e.answer_groups))
        return None if r is None else r[i]

    return fn


# per-round diagnosis metrics of the LogosKG two-round study (App. A.2 Eq. 12)
DX_ROUNDS = ("baseline", "round1", "round2")
DX_ROUND_METRICS = tuple(Metric(f"dx_{rd}_{stat}", _dx_round(rd, i), method_side=True)
                         for rd in DX_ROUNDS for i, stat in enumerate(("precision", "recall", "f1")))


def _set(i: int) -> Callable[[Prediction, Example], float | None]:
    def fn(p: Prediction, e: Example) -> float | None:
        r = qa.answer_set_prf(p.answers, _groups(e))
        return None if r is None else r[i]

    return fn


# strict (normalised equality) KGQA metrics
HITS_AT_1 = Metric("hits_at_1", lambda p, e: qa.hits_at_1(p.answers, e.answers))
ALL_ANSWERS_FOUND = Metric("all_answers_found", lambda p, e: qa.all_answers_found(p.answers, _groups(e)))
ANSWER_SET_PRECISION = Metric("answer_set_precision", _set(0))
ANSWER_SET_RECALL = Metric("answer_set_recall", _set(1))
ANSWER_SET_F1 = Metric("answer_set_f1", _set(2))
# community evaluators (substring matching; kgreason.metrics.community, docs/metrics.md)
TOG_HITS_AT_1 = Metric("tog_hits_at_1", lambda p, e: community.tog_exact_match(p.answer, e.answers))
# ToG's normalisation, equality only (no substring clause): <= tog_hits_at_1 by construction (SGR's Acc)
TOG_EXACT_TOP1 = Metric("tog_exact_top1", lambda p, e: community.tog_exact_top1(p.answer, e.answers))
ROG_HIT = Metric("rog_hit", _rog(0))
ROG_ACC = Metric("rog_acc", _rog(1))
ROG_F1 = Metric("rog_f1", _rog(2))
ROG_PRECISION = Metric("rog_precision", _rog(3))
ROG_RECALL = Metric("rog_recall", _rog(4))
EXACT_MATCH = Metric("em", lambda p, e: qa.exact_match_multi(p.answer, e.answers))
F1 = Metric("f1", lambda p, e: qa.f1_multi(p.answer, e.answers))
MUSIQUE_EM = Metric("musique_em", lambda p, e: qa.musique_exact_multi(p.answer, e.answers))
MUSIQUE_F1 = Metric("musique_f1", lambda p, e: qa.musique_f1_multi(p.answer, e.answers))
# 2Wiki's evaluate_v1.1 = HotpotQA's em/f1, best over the answer and its aliases
TWOWIKI_EM = Metric("twowiki_em", lambda p, e: qa.exact_match_multi(p.answer, e.answers))
TWOWIKI_F1 = Metric("twowiki_f1", lambda p, e: qa.f1_multi(p.answer, e.answers))
DX_PRECISION = Metric("dx_precision", _dx(0))
DX_RECALL = Metric("dx_recall", _dx(1))
DX_F1 = Metric("dx_f1", _dx(2))
ANSWER_COVERAGE = Metric("answer_coverage", lambda p, e: retrieval.answer_coverage(p.extra, e.answers),
                         method_side=True)
# ReKnoS: the same over the entities of all N kept paths (answer_coverage: the top-K selected ones)
ANSWER_COVERAGE_N_PATHS = Metric("answer_coverage_n_paths",
                                 lambda p, e: retrieval.answer_coverage(p.extra, e.answers, "retrieved_n_paths"),
                                 method_side=True)
# a count of what the method looked at, not a score: an errored example has none (worst=None)
SEARCH_SPACE = Metric("search_space", lambda p, e: retrieval.search_space(p.extra), higher_is_better=False,
                      worst=None, method_side=True)
# SubQRAG's graph update (Eq. 4): triples a question wrote into G (new after validation and
# de-duplication); null for a reasoner that records none. Mean per question, and the run's sum.
# Counts, not scores: an errored example is left out (worst=None), as search_space is.
TRIPLES_WRITTEN = Metric("triples_written", lambda p, e: p.extra.get("triples_written"), worst=None,
                         method_side=True)
TRIPLES_WRITTEN_TOTAL = Metric("triples_written_total", lambda p, e: p.extra.get("triples_written"), aggregate=sum,
                               worst=None, method_side=True)

# SGR's candidate cost cap (reasoner.max_candidate_triples, Eq. 4-6): whether a question's
# candidates were cut before scoring, and how many were left unscored. Counts, not scores.
def _truncated(p, e):
    v = p.extra.get("candidates_truncated")
    return None if v is None else float(bool(v))


def _unscored(p, e):
    tot, done = p.extra.get("candidates_total"), p.extra.get("candidates_scored")
    return None if tot is None or done is None else float(tot - done)


CANDIDATES_TRUNCATED_RATE = Metric("candidates_truncated_rate", _truncated, higher_is_better=False, worst=None,
                                   method_side=True)
CANDIDATES_UNSCORED = Metric("candidates_unscored", _unscored, higher_is_better=False, worst=None, method_side=True)

METRICS: dict[str, Metric] = {m.name: m for m in (
    HITS_AT_1, ALL_ANSWERS_FOUND, ANSWER_SET_PRECISION, ANSWER_SET_RECALL, ANSWER_SET_F1,
    TOG_HITS_AT_1, TOG_EXACT_TOP1, ROG_HIT, ROG_ACC, ROG_F1, ROG_PRECISION, ROG_RECALL, EXACT_MATCH, F1, MUSIQUE_EM, MUSIQUE_F1,
    TWOWIKI_EM, TWOWIKI_F1, DX_PRECISION, DX_RECALL, DX_F1, *DX_ROUND_METRICS, ANSWER_COVERAGE, ANSWER_COVERAGE_N_PATHS, SEARCH_SPACE,
    TRIPLES_WRITTEN, TRIPLES_WRITTEN_TOTAL, CANDIDATES_TRUNCATED_RATE, CANDIDATES_UNSCORED,
)}


def _probe(ex: Example) -> Prediction:
    """An empty answer that reports everything a metric may read: a metric that is ``None`` on
    it lacks the example's gold (no gold answer, no gold diagnosis), whatever the method did."""
    return Prediction(example_id=ex.id, answers=(), rounds={rd: () for rd in DX_ROUNDS},
                      extra={"retrieved": [], "retrieved_n_paths": []})


def applies(metric: Metric, ex: Example) -> bool:
    """Whether the example has what ``metric`` needs on the gold side."""
    return metric.per_example(_probe(ex), ex) is not None


def error_value(metric: Metric, ex: Example) -> float | None:
    """An errored example's value: the metric's ``worst`` where the metric applies to the
    example, else ``None``. (A ``method_side`` metric gets ``worst`` here too; :func:`run_values`
    drops it for a method that never reports what the metric reads.)"""
    if metric.worst is None or not applies(metric, ex):
        return None
    return float(metric.worst)


def example_value(metric: Metric, pred: Prediction, ex: Example) -> float | None:
    """One example's value: the metric's own on an answered example, :func:`error_value` on
    an errored one (``pred.error`` set)."""
    return error_value(metric, ex) if pred.error else metric.per_example(pred, ex)


def run_values(metric: Metric, values: Sequence[float | None], errored: Sequence[bool]) -> list[float | None]:
    """The per-example values a run's mean of ``metric`` is taken over, from each example's
    stored value (an errored example's is :func:`error_value`) and whether it errored: an
    errored example's value is dropped when the metric is ``method_side`` and no answered
    example of the run has a value for it (the method does not report what it reads; with every
    example errored that cannot be told, so it is dropped too)."""
    values, errored = list(values), list(errored)
    if metric.method_side and not any(v is not None for v, e in zip(values, errored) if not e):
        return [None if e else v for v, e in zip(values, errored)]
    return values


def register(metric: Metric) -> Metric:
    METRICS[metric.name] = metric
    return metric


_JUDGE_COSTS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "reasoning_tokens", "cost_usd", "errors",
                "stigmatizing", "stigmatizing_record")  # judge/<x>: lower is better


def higher_is_better(name: str) -> bool:
    """Direction of a metric by name (``metric/`` prefix allowed; unknown names: True,
    except ``llm/*``, ``run/error*``, ``timing/*``, ``retrieval/search_space`` and the judge's call
    counts, cost, errors and stigmatizing-language rates, which are lower-is-better)."""
    base = name.split("/", 1)[1] if name.startswith("metric/") else name
    if base in METRICS:
        return METRICS[base].higher_is_better
    if name.startswith("judge/") and name.rsplit("/", 1)[-1] in _JUDGE_COSTS:
        return False
    return not (name.startswith("llm/") or name.startswith("run/error") or name.endswith("search_space")
                or name.startswith("timing/"))
