"""Rankings that feed a prompt are recorded and served back to a replay (kgreason/ranking.py,
issue 71): a float-level difference in the recomputed scores is reported as such and the
bundle's order kept; a real difference is not hidden; a replay that serves recorded rankings
computes no score."""

from __future__ import annotations

import numpy as np
import pytest

from kgreason import ranking
from kgreason.ranking import FLOAT_TOL, agrees, keys_digest, ranked, stable_order

KEYS = ["a | r | b", "c | r | d", "e | r | f", "g | r | h"]


def test_the_order_is_the_stable_sort_best_first_ties_to_the_earlier_candidate():
    s = np.asarray([0.5, 0.9, 0.5, 0.9], dtype=np.float32)
    assert stable_order(s).tolist() == [1, 3, 0, 2]
    assert stable_order(s, k=3).tolist() == [1, 3, 0]
    assert stable_order(s, tau=0.6).tolist() == [1, 3]
    order, scores = ranked("t.site", KEYS, s, k=2)  # outside an example: computed, nothing recorded
    assert order.tolist() == [1, 3] and scores.tolist() == pytest.approx([0.9, 0.9])


def test_an_example_records_each_ranking_with_the_digest_of_its_candidates():
    with ranking.example("q1") as log:
        ranked("t.site", KEYS, lambda: np.asarray([0.1, 0.4, 0.3, 0.2]), k=2)
        ranked("t.other", KEYS[:2], np.asarray([0.2, 0.1]))
    assert [r["site"] for r in log] == ["t.site", "t.other"]
    assert log[0] == {"site": "t.site", "n": 4, "keys": keys_digest(KEYS), "order": [1, 2],
                      "scores": pytest.approx([0.4, 0.3])}


def _recorded(scores, k=2, site="t.site", keys=KEYS):
    with ranking.example("q1") as log:
        ranked(site, keys, np.asarray(scores, dtype=np.float64), k=k)
    return {"q1": log}


def test_a_replay_serving_recorded_rankings_computes_no_score():
    rec = _recorded([0.1, 0.4, 0.3, 0.2])

    def never():
        raise AssertionError("a served ranking was computed")

    with ranking.serving(rec, verify=False) as served, ranking.example("q1"):
        order, scores = ranked("t.site", KEYS, never, k=2)
    assert order.tolist() == [1, 2] and scores.tolist() == pytest.approx([0.4, 0.3]) and served.notes == []


def test_a_float_level_swap_keeps_the_bundles_order_and_is_reported_as_float_level():
    """Two near-tied candidates swap under another machine's rounding (1e-7): the replay keeps the
    bundle's order and scores (its prompt is the bundle's) and says so; today's code would have
    asked for another order."""
    rec = _recorded([0.1, 0.4000001, 0.4, 0.2])
    now = np.asarray([0.1, 0.4, 0.4000001, 0.2])  # the other machine's scores: 1 and 2 swap
    assert stable_order(now, 2).tolist() == [2, 1]
    with ranking.serving(rec, verify=True) as served, ranking.example("q1"):
        order, scores = ranked("t.site", KEYS, now, k=2)
    assert order.tolist() == [1, 2] and scores.tolist() == pytest.approx([0.4000001, 0.4], abs=0)
    (note,) = served.float_level()
    assert note["swapped"] and note["max_diff"] < FLOAT_TOL and "float-level: 1 ranking" in served.summary()


def test_a_real_difference_is_not_hidden():
    rec = _recorded([0.1, 0.4, 0.3, 0.2])
    now = np.asarray([0.9, 0.4, 0.3, 0.2])  # candidate 0 now ranks first: the method changed
    with ranking.serving(rec, verify=True) as served, ranking.example("q1"):
        order, _ = ranked("t.site", KEYS, now, k=2)
    assert order.tolist() == [0, 1]
    assert [n["what"] for n in served.notes] == ["ranking_differs"] and served.summary() == ""


def test_other_candidates_are_ranked_as_in_a_run():
    rec = _recorded([0.1, 0.4, 0.3, 0.2])
    other = KEYS[:3] + ["x | r | y"]
    with ranking.serving(rec, verify=False) as served, ranking.example("q1"):
        order, _ = ranked("t.site", other, np.asarray([0.9, 0.1, 0.2, 0.3]), k=2)
    assert order.tolist() == [0, 3] and served.notes[0]["what"] == "candidates_differ"


def test_a_record_read_back_from_an_older_trace_is_served_by_its_kept_keys():
    rec = {"q1": [{"site": "t.site", "kept_keys": [KEYS[3], KEYS[0]], "scores": [0.7, 0.6],
                   "tol": ranking.ROUNDED_TOL}]}
    with ranking.serving(rec, verify=True) as served, ranking.example("q1"):
        order, scores = ranked("t.site", KEYS, np.asarray([0.60003, 0.1, 0.2, 0.69996]), k=2)
    assert order.tolist() == [3, 0] and scores.tolist() == [0.7, 0.6]
    assert served.float_level()[0]["swapped"] is False


def test_agrees_reads_ties_and_cuts_within_the_tolerance():
    s = np.asarray([0.5, 0.5 + 1e-7, 0.1])
    assert agrees(s, [0, 1], [0.5, 0.5], k=2, tau=None, tol=1e-5)
    assert not agrees(s, [0, 2], [0.5, 0.1], k=2, tau=None, tol=1e-5)  # left out candidate 1 (0.5) for 0.1
    assert agrees(s, [1], [0.5], k=None, tau=0.5 + 1e-6, tol=1e-5)  # 0.5 is under tau within the tolerance
    assert not agrees(s, [1], [0.5], k=None, tau=0.3, tol=1e-5)  # 0.5 is over tau by far: it was due a place
