"""A key set for every job of a sweep over a config group (``--multirun reasoner=io,cot
reasoner.temperature=0.7``) is checked against what Hydra composes first: a sweep's base config,
with the group's *default* option (``reasoner=retrieval_only``, which has no ``temperature``).
The typo check composed with the first swept option, passed, and Hydra then stopped with its own
six-line "Could not override ... Key 'temperature' is not in struct" and exit 1 (checked as a
user would). Now one line says why and what to write (``++reasoner.temperature=0.7``)."""

from __future__ import annotations

from kgreason.runner.overrides import check


def test_a_key_only_the_swept_options_have_gets_one_line_naming_the_default_and_the_fix():
    msg = check(["--multirun", "reasoner=io,cot", "reasoner.temperature=0.7", "dataset.limit=3"])
    assert msg is not None and "\n" not in msg, msg
    assert "reasoner.temperature=0.7" in msg and "retrieval_only" in msg and "++reasoner.temperature=0.7" in msg, msg


def test_what_hydra_accepts_is_left_alone():
    # one job (no sweep of the group): Hydra applies the choice first
    assert check(["reasoner=io", "reasoner.temperature=0.7"]) is None
    assert check(["--multirun", "reasoner=io", "reasoner.temperature=0.7"]) is None
    # the forced form, and a key the default option has too
    assert check(["--multirun", "reasoner=io,cot", "++reasoner.temperature=0.7"]) is None
    assert check(["--multirun", "reasoner=io,cot", "seed=0,1", "dataset.limit=3"]) is None
    # a typo is still the typo line
    assert "did you mean reasoner.temperature" in check(["--multirun", "reasoner=io,cot", "reasoner.temperatur=0.7"])
