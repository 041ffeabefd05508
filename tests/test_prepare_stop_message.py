"""The line a run stopped in its set-up prints says what a resume keeps (checked as a user would:
Ctrl-C during ``reasoner=rag``'s first embedding-store build, then the same command again). SubQRAG's
index keeps every extracted passage; an embedding store stopped mid-build keeps nothing (its
``<key>.tmp.<pid>`` dir is removed, kgreason/storage/embedstore.py), and the resume built it again
from its first text while the line said "a resume goes on from there"."""

from __future__ import annotations

import logging
import signal

import pytest

from kgreason import progress
from kgreason.runner import run
from kgreason.runner.run import RunInterrupted


@pytest.mark.parametrize("what,unit,kept", [
    ("embedding store embedded/triple", "texts", False),
    ("SubQRAG indexing", "passage", True),
])
def test_the_stop_line_says_whether_the_set_up_goes_on(tmp_path, monkeypatch, caplog, what, unit, kept):
    monkeypatch.setattr(progress, "stopped_at", lambda: {"what": what, "done": 1024, "total": 6675, "unit": unit})
    with caplog.at_level(logging.WARNING, logger="kgreason"):
        run._write_prepare_stopped(tmp_path, RunInterrupted(signal.SIGTERM), 0, 5)
    line = caplog.records[-1].getMessage()
    assert f"({what}: 1024 of 6675 {unit} done)" in line
    assert ("a resume goes on from there" in line) is kept, line
    if not kept:
        assert "builds it again from its first" in line, line
