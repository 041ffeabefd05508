"""A quiet console (issue 74, item 2): no line per model request, whatever the HTTP client calls
its logger. The OpenAI client moved from ``httpx`` to ``httpx2``, which a fixed list of logger
names missed: every request printed ``HTTP Request: POST …/v1/chat/completions "HTTP/1.1 200 OK"``."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgreason.bench.llm import FakeChatServer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def root_handler():
    """A handler on the root logger (as Hydra's job logging installs one), removed afterwards."""
    stream = io.StringIO()
    h = logging.StreamHandler(stream)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(h)
    root.setLevel(logging.INFO)
    try:
        yield h, stream
    finally:
        root.removeHandler(h)
        root.setLevel(old_level)


@pytest.mark.parametrize("name", ["httpx", "httpx2", "httpcore", "urllib3.connectionpool", "aiohttp.client",
                                  "some_future_client._transport"])
def test_a_library_info_line_is_not_printed_whatever_its_logger_is_called(monkeypatch, root_handler, name):
    from kgreason.app import quiet_logs

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    _, stream = root_handler
    lib = logging.getLogger(name)
    monkeypatch.setattr(lib, "level", logging.NOTSET)
    quiet_logs()
    lib.info('HTTP Request: POST http://127.0.0.1:1/v1/chat/completions "HTTP/1.1 200 OK"')
    lib.warning("a library's warning still shows")
    logging.getLogger("kgreason.progress").info("examples: 3/12")
    logging.getLogger("hydra.core.utils").info("Launching 2 jobs")
    out = stream.getvalue()
    assert "HTTP Request" not in out
    assert "a library's warning still shows" in out
    assert "examples: 3/12" in out and "Launching 2 jobs" in out


def test_debug_shows_the_library_lines(monkeypatch, root_handler):
    from kgreason.app import quiet_logs

    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # kgreason --debug
    _, stream = root_handler
    quiet_logs()
    lib = logging.getLogger("httpx2")
    monkeypatch.setattr(lib, "level", logging.NOTSET)
    lib.info("HTTP Request: POST x")
    assert "HTTP Request" in stream.getvalue()


def test_quiet_logs_twice_adds_one_filter(monkeypatch, root_handler):
    from kgreason.app import quiet_logs

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    h, _ = root_handler
    quiet_logs()
    quiet_logs()
    assert len(h.filters) == 1


def test_a_12_question_run_against_a_local_server_prints_no_request_line(tmp_path):
    """The must-show: 12 questions against a real OpenAI-compatible HTTP server on 127.0.0.1, at the
    default log level: neither the console nor the run's log holds a per-request line."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for var in ("KGREASON_PROGRESS", "HYDRA_FULL_ERROR"):
        env.pop(var, None)
    with FakeChatServer() as srv:
        r = subprocess.run([sys.executable, "-m", "kgreason", "reasoner=io", "llm=openai", f"llm.base_url={srv.base_url}",
                            "llm.model=fake-model", "llm.api_key_env=null", "dataset.limit=12", "tracking=none",
                            f"hydra.run.dir={run_dir}"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300)
        n_requests = len(srv.requests)
    assert r.returncode == 0, r.stderr[-3000:]
    assert n_requests >= 12  # the run did reach the server (12 questions and the probe)
    console = r.stdout + r.stderr
    assert "HTTP Request" not in console and "/v1/chat/completions" not in console, console[-3000:]
    log = (run_dir / "run.log").read_text(encoding="utf-8")
    assert "HTTP Request" not in log, log[-3000:]
    assert "examples: 12/12" in log  # the run's own lines are still there
