"""A key never reaches a file, whatever the user types (issue 18, Secrets).

Each case used to leave the key in up to 10 files of the run dir (``config.yaml``, ``.hydra/``,
``predictions.jsonl``, the log, the W&B run).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from conftest import REPO

from kgreason import secrets
from kgreason.bench.llm import FakeChatServer
from kgreason.runs import PredictionStore, scrub_secrets, write_json

KEY_ENV = "KGREASON_TEST_SECRET_KEY"
KEY = "sk-proj-LEAKCHECK-0123456789abcdef"
URL_PASSWORD = "urlpw-LEAKCHECK-42"


@pytest.fixture(autouse=True)
def _fresh():
    secrets.forget_all()
    yield
    secrets.forget_all()


def _files_with_key(root, key=KEY):
    return [str(f) for f in root.rglob("*") if f.is_file() and key.encode() in f.read_bytes()]


def test_values_named_by_env_keys_and_secret_keys_are_scrubbed_everywhere(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = {"llm": {"api_key_env": KEY_ENV}, "judge": {"llm": {"token": "tok-123456789"}}, "n": 3}
    clean = scrub_secrets(cfg)
    assert clean["judge"]["llm"]["token"] == "<redacted>" and clean["llm"]["api_key_env"] == KEY_ENV
    store = PredictionStore(tmp_path / "p.jsonl")
    store.append({"id": "a", "error": f"AuthenticationError: bad key {KEY} and tok-123456789"})
    write_json(tmp_path / "m.json", {"note": KEY})
    assert _files_with_key(tmp_path) == [] and _files_with_key(tmp_path, "tok-123456789") == []
    assert "<redacted>" in next(iter(store))["error"]  # the in-memory row is the scrubbed one too


def test_log_records_and_tracebacks_are_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    secrets.register_from_config({"api_key_env": KEY_ENV})
    log = logging.getLogger("kgreason.test_secrets")
    h = logging.FileHandler(tmp_path / "run.log")
    log.addHandler(h)
    secrets.install_log_filter(log)
    try:
        log.warning("example failed: %s", f"401 {KEY}")
        try:
            raise RuntimeError(f"server said {KEY}")
        except RuntimeError:
            log.exception("boom")
    finally:
        h.close()
        log.removeHandler(h)
    text = (tmp_path / "run.log").read_text()
    assert "example failed: 401 <redacted>" in text and "server said <redacted>" in text
    assert KEY not in text


def test_key_typed_into_api_key_env_is_refused_without_repeating_it():
    problems = secrets.register_from_config({"llm": {"api_key_env": KEY}})
    assert problems and "llm.api_key_env must be the NAME" in problems[0] and KEY not in problems[0]
    assert secrets.scrub(f"x{KEY}y") == "x<redacted>y"


def test_a_urls_password_is_scrubbed_with_nothing_registered():
    """``http://user:password@host`` in a base URL: the user info never reaches a line or a file,
    whatever its length, even before any secret is registered (an error quoting the URL)."""
    text = "LLMError: http://me:pw1@127.0.0.1:9/v1/chat/completions failed"
    assert secrets.scrub(text) == "LLMError: http://127.0.0.1:9/v1/chat/completions failed"
    assert secrets.scrub_obj({"e": [text]}) == {"e": [secrets.scrub(text)]}
    secrets.register_from_config({"llm": {"base_url": "https://me:hunter22pw@example.org/v1"}})
    assert secrets.scrub("the password was hunter22pw") == "the password was <redacted>"


def test_an_endpoint_that_does_not_answer_is_named_without_its_password(tmp_path):
    """The start-up probe's one-line refusal quotes the endpoint; its password stays out."""
    env = dict(os.environ, KGREASON_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-m", "kgreason", "reasoner=io", "llm=openai", "llm.api_key_env=null",
                        f"llm.base_url=http://user:{URL_PASSWORD}@127.0.0.1:9/v1", "dataset.limit=1",
                        "tracking=none", f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "did not answer" in p.stderr, p.stderr[-2000:]
    assert URL_PASSWORD not in p.stdout + p.stderr and "http://127.0.0.1:9/v1" in p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case", ["server_quotes_key", "plus_api_key", "key_in_api_key_env", "password_in_base_url"])
def test_cli_run_dir_never_holds_the_key(tmp_path, case):
    """The whole app as a user runs it, W&B offline included: no file under the run dir holds
    the key, nor does anything printed."""
    env = dict(os.environ, KGREASON_CACHE_DIR=str(tmp_path / "cache"), WANDB_MODE="offline")
    env[KEY_ENV] = KEY
    out = tmp_path / "run"
    faults = [("401-quote",)] * 40 if case == "server_quotes_key" else []
    with FakeChatServer(faults=faults) as srv:
        args = ["reasoner=io", "llm=openai", f"llm.base_url={srv.base_url}", "llm.model=fake-model",
                "dataset.limit=2", "tracking=wandb", "fail_on_error_rate=false", f"hydra.run.dir={out}"]
        if case == "server_quotes_key":  # no start-up probe: the rejection must reach the rows
            args += [f"llm.api_key_env={KEY_ENV}", "preflight.probe_llm=false"]
        elif case == "plus_api_key":
            args += [f"llm.api_key_env={KEY_ENV}", f"+llm.api_key={KEY}"]
        elif case == "password_in_base_url":  # a proxy that takes basic auth in the URL
            args[2] = f"llm.base_url={srv.base_url.replace('://', f'://user:{URL_PASSWORD}@', 1)}"
            args.append("llm.api_key_env=null")
        else:
            args.append(f"llm.api_key_env={KEY}")
        p = subprocess.run([sys.executable, "-m", "kgreason", *args], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    if case == "key_in_api_key_env":
        assert p.returncode != 0 and "must be the NAME of an environment variable" in p.stderr
    elif case == "server_quotes_key":
        assert p.returncode == 0, p.stderr[-3000:]
        rows = (out / "predictions.jsonl").read_text()
        assert "Incorrect API key provided: <redacted>" in rows  # the error is kept, the key is not
    elif case == "password_in_base_url":
        assert p.returncode == 0, p.stderr[-3000:]
        assert _files_with_key(out, URL_PASSWORD) == [] and URL_PASSWORD not in p.stdout + p.stderr
        assert _files_with_key(tmp_path / "cache", URL_PASSWORD) == [] if (tmp_path / "cache").exists() else True
    assert KEY not in p.stdout + p.stderr
    assert out.exists() and _files_with_key(out) == []
    assert _files_with_key(tmp_path / "cache") == [] if (tmp_path / "cache").exists() else True
