"""Progress you can watch (kgreason/progress.py): an LLM-driven run reports progress while it
runs, with the ETA, errors so far, the running headline metric and the LLM calls in flight;
nothing is written per example."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from conftest import compose_cfg
from kgreason import progress
from kgreason.llm.scripted import ScriptedLLM


class SlowScriptedLLM(ScriptedLLM):
    """The scripted test double, plus a fixed delay per batch (a slow endpoint or local model).
    Records when each batch returned, so the test can tell "during the run" from "after"."""

    slow_s = 0.25  # (not delay_s: ScriptedLLM has its own delay_s setting, 0 by default)
    returned: list[float] = []

    def generate(self, requests):
        time.sleep(self.slow_s)
        out = super().generate(requests)
        SlowScriptedLLM.returned.append(time.time())  # the clock LogRecord.created uses
        return out


def _progress_records(caplog):
    return [r for r in caplog.records if r.name == "kgreason.progress"]


def test_llm_run_reports_progress_before_it_ends(tmp_path, monkeypatch, caplog):
    from kgreason.runner.run import run

    monkeypatch.setenv("KGREASON_PROGRESS", "log")          # what CI (no TTY) gets
    monkeypatch.setenv("KGREASON_PROGRESS_INTERVAL", "0.1")
    SlowScriptedLLM.returned = []
    cfg = compose_cfg(["reasoner=io", "llm=scripted", "dataset.limit=6", "tracking=none",
                       "reports.hop_distribution=false", "llm_cache.mode=off"], tmp_path)
    cfg.llm._target_ = f"{__name__}.SlowScriptedLLM"
    caplog.set_level(logging.INFO, logger="kgreason")
    run(cfg, tmp_path / "run")
    assert len(SlowScriptedLLM.returned) >= 6, "every example should call the LLM"
    recs = _progress_records(caplog)
    during = [r for r in recs if "(done)" not in r.getMessage()]
    assert during, f"no progress line while the run was going; got {[r.getMessage() for r in recs]}"
    # the first mid-run line was written before the last LLM call returned: before the run ended
    assert during[0].created < SlowScriptedLLM.returned[-1]
    msgs = [r.getMessage() for r in during]
    assert any("llm_in_flight=1" in m for m in msgs), msgs  # a call was visibly in flight
    assert any("ETA" in m and "/6 ex" in m for m in msgs), msgs
    final = recs[-1].getMessage()
    assert final.endswith("(done)")
    assert "examples: 6/6 ex (100%)" in final and "errors=0" in final and "hits_at_1=" in final, final


def test_progress_line_has_eta_errors_and_metric(monkeypatch):
    monkeypatch.setenv("KGREASON_PROGRESS", "off")
    p = progress.Progress(10, "examples", "ex", show_llm=True)
    p.update(4, errors=1, hits_at_1=0.5)
    with progress.llm_calls(3):
        line = p.line()
    p.close()
    assert line.startswith("examples: 4/10 ex (40%)")
    assert "ETA" in line and "errors=1" in line and "hits_at_1=0.500" in line and "llm_in_flight=3" in line
    assert progress.in_flight() == 0


def test_a_bar_ended_by_an_exception_says_stopped_and_where(monkeypatch, caplog):
    """A bar left by Ctrl-C or SIGTERM (a long set-up such as SubQRAG's index) logs "(stopped)",
    never "(done)", and :func:`progress.stopped_at` says how far it got; a bar that ends normally
    changes neither."""
    monkeypatch.setenv("KGREASON_PROGRESS", "log")
    monkeypatch.setattr(progress, "_stopped", None)
    caplog.set_level(logging.INFO, logger="kgreason.progress")
    with progress.bar(5, "warm-up", "step") as p:
        p.update(5)
    assert progress.stopped_at() is None and _progress_records(caplog)[-1].getMessage().endswith("(done)")
    with pytest.raises(KeyboardInterrupt):
        with progress.bar(6256, "SubQRAG indexing", "passage", initial=800) as p:
            p.update(12)
            raise KeyboardInterrupt
    last = _progress_records(caplog)[-1].getMessage()
    assert last.startswith("SubQRAG indexing: 812/6256 passage") and last.endswith("(stopped)"), last
    assert progress.stopped_at() == {"what": "SubQRAG indexing", "done": 812, "total": 6256, "unit": "passage"}


def test_stage_heartbeat_while_a_long_step_runs(monkeypatch, caplog):
    monkeypatch.setenv("KGREASON_PROGRESS", "log")
    monkeypatch.setenv("KGREASON_PROGRESS_INTERVAL", "0.05")
    caplog.set_level(logging.INFO, logger="kgreason.progress")
    with progress.stage("converting model"):
        time.sleep(0.3)
    msgs = [r.getMessage() for r in _progress_records(caplog)]
    assert msgs[0] == "converting model ..."
    assert any("still running after" in m for m in msgs[1:-1]), msgs
    assert msgs[-1].startswith("converting model: done after")


def test_llm_calls_counts_across_threads():
    seen = []
    gate = threading.Event()

    def call():
        with progress.llm_calls():
            gate.wait(2)

    ts = [threading.Thread(target=call) for _ in range(3)]
    for t in ts:
        t.start()
    deadline = time.monotonic() + 2
    while progress.in_flight() < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    seen.append(progress.in_flight())
    gate.set()
    for t in ts:
        t.join()
    assert seen == [3] and progress.in_flight() == 0


@pytest.mark.parametrize("env,tty,expected", [("off", True, "off"), ("log", True, "log"), ("bar", False, "bar"),
                                              ("auto", False, "log"), ("auto", True, "bar")])
def test_mode_follows_tty_unless_told(env, tty, expected, monkeypatch):
    monkeypatch.setenv("KGREASON_PROGRESS", env)
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: tty, raising=False)
    assert progress.mode() == expected
