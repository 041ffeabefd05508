"""Named question splits (issue 29): ``questions.split=dev`` is the first ``dev_size`` questions of
the dataset file, the only ones prompts and settings are chosen on; ``heldout`` is a seeded sample
disjoint from them, nested as it grows (a longer held-out row extends a shorter one)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from kgreason import preflight
from kgreason.data.base import ExampleSet, select_split
from kgreason.types import Example


def _ds(n=200):
    return ExampleSet("toy", [Example(id=str(i), question=f"q{i}", answers=("a",)) for i in range(n)])


def ids(ds):
    return [ex.id for ex in ds]


def test_dev_is_the_first_questions_and_heldout_is_disjoint_seeded_and_nested():
    dev = select_split(_ds(), "dev", dev_size=20)
    assert ids(dev) == [str(i) for i in range(20)]
    h30 = select_split(_ds(), "heldout", dev_size=20, n=30, seed=7)
    h100 = select_split(_ds(), "heldout", dev_size=20, n=100, seed=7)
    assert len(h30) == 30 and len(h100) == 100
    assert not set(ids(h100)) & set(ids(dev))
    assert set(ids(h30)) <= set(ids(h100))            # growing N keeps the questions already answered
    assert ids(h100) == sorted(ids(h100), key=int)      # file order
    assert ids(select_split(_ds(), "heldout", dev_size=20, n=30, seed=7)) == ids(h30)
    assert ids(select_split(_ds(), "heldout", dev_size=20, n=30, seed=8)) != ids(h30)
    assert len(select_split(_ds(), "heldout", dev_size=20, n=None)) == 180
    assert ids(select_split(_ds(), "all")) == ids(_ds())


def test_a_split_is_refused_beside_a_limit_or_sample_and_unknown_names_are_refused():
    cfg = OmegaConf.create({"questions": {"split": "heldout", "dev_size": 20, "heldout_n": 100, "seed": 0},
                            "dataset": {"limit": 20, "sample": None}})
    (msg,) = [p for p in preflight.check_settings(cfg) if "questions.split" in p]
    assert "dataset.limit" in msg
    cfg.dataset.limit = None
    assert not [p for p in preflight.check_settings(cfg) if "questions" in p]
    cfg.questions.split = "test"
    (msg,) = [p for p in preflight.check_settings(cfg) if "questions.split" in p]
    assert "all, dev or heldout" in msg
    with pytest.raises(ValueError, match="questions.split"):
        select_split(_ds(), "test")


def test_heldout_skip_is_a_fresh_draw_disjoint_from_the_first():
    """``questions.heldout_skip=30``: the next questions of the same seeded order, none of the
    first 30 held-out questions and none of dev; together they are the first 60."""
    first = ids(select_split(_ds(), "heldout", dev_size=20, n=30, seed=7))
    fresh = ids(select_split(_ds(), "heldout", dev_size=20, n=30, seed=7, skip=30))
    dev = ids(select_split(_ds(), "dev", dev_size=20))
    assert len(fresh) == 30 and not set(fresh) & set(first) and not set(fresh) & set(dev)
    assert set(first) | set(fresh) == set(ids(select_split(_ds(), "heldout", dev_size=20, n=60, seed=7)))
    assert len(select_split(_ds(), "heldout", dev_size=20, n=30, seed=7, skip=170)) == 10  # what is left
    cfg = OmegaConf.create({"questions": {"split": "heldout", "dev_size": 20, "heldout_n": 30, "seed": 0,
                                          "heldout_skip": -1}, "dataset": {"limit": None, "sample": None}})
    (msg,) = [p for p in preflight.check_settings(cfg) if "heldout_skip" in p]
    assert "expected an integer >= 0" in msg
    cfg.questions.heldout_skip, cfg.questions.split = 30, "dev"
    (msg,) = [p for p in preflight.check_settings(cfg) if "heldout_skip" in p]
    assert "only applies to questions.split=heldout" in msg
