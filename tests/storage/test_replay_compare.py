"""What ``kgreason bundle replay`` counts as a difference between a bundled run and its replay
(kgreason/runner/replay.py ``first_difference``); no run is made here."""

from __future__ import annotations


def test_a_replay_that_adds_only_a_funnel_an_older_bundle_lacks_is_identical():
    """Issue 72: a run now records its funnel (``extra.funnel``, ``funnel/*`` in metrics.json). A
    bundle made before holds neither; its replay adds them, and that alone is no difference. A
    funnel the bundle does hold is compared like any field, and any other new field still differs."""
    from kgreason.runner.replay import first_difference

    bundled_row = {"id": "q", "predictions": ["a"], "extra": {"end": "yes"}}
    replayed = {"id": "q", "predictions": ["a"], "extra": {"end": "yes", "funnel": {"topics_linked": True}}}
    assert first_difference(bundled_row, replayed) is None
    assert first_difference({"metric/em": 1.0}, {"metric/em": 1.0, "funnel/topics_linked": 1.0,
                                                 "funnel/_stages": ["topics_linked"]}) is None
    with_funnel = {**bundled_row, "extra": {"end": "yes", "funnel": {"topics_linked": False}}}
    assert first_difference(with_funnel, replayed) == "extra.funnel.topics_linked"
    assert first_difference(replayed, bundled_row) == "extra.funnel"  # the replay lost a recorded funnel
    assert first_difference(bundled_row, {**replayed, "extra": {"end": "yes", "other": 1}}) == "extra.other"
