"""Issue 44 (2): a reply is a success only when it is one.

A scripted HTTP server on 127.0.0.1 answers what real servers sometimes do: ``choices: []``,
``content: null``, an HTML page or cut JSON with status 200, ``Retry-After: 86400`` / ``inf`` /
``1e12``, no ``usage``, a huge reply. Each unusable reply is a failed attempt (retried under the
same backoff, then an LLMError naming it), the call ends in bounded time, and the call cache holds
none of them.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kgreason.storage.callstore import KeyValueStore
from kgreason.llm.accounting import Ledger, ledger_metrics
from kgreason.llm.base import LLMError
from kgreason.llm.cache import CachedLLM
from kgreason.llm.openai_http import OpenAIChat, parse_retry_after
from kgreason.types import ChatRequest

KEY_ENV = "KGREASON_TEST_FAKE_KEY"


def good(text="ok", usage=True, n=1):
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        for i in range(n)]}
    if usage:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


def js(code, obj, **headers):
    return code, {"Content-Type": "application/json", **headers}, json.dumps(obj).encode()


EMPTY = js(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [],
                 "usage": {"prompt_tokens": 3, "completion_tokens": 0}})
NULL = js(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]})
HTML = (200, {"Content-Type": "text/html"}, b"<html><body>502 Bad Gateway (proxy)</body></html>")
CUT_JSON = (200, {"Content-Type": "application/json"}, b'{"id": "x", "choices": [{"index": 0, "mess')
NOT_OBJECT = (200, {"Content-Type": "application/json"}, b"[1, 2]")
NULL_BODY = (200, {"Content-Type": "application/json"}, b"null")


class Scripted:
    """Answers each POST with the next (status, headers, body) of ``script``; then ``then``."""

    def __init__(self, script, then=None):
        self.script, self.then, self.n = list(script), then, 0
        srv = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                srv.n += 1
                code, headers, body = srv.script.pop(0) if srv.script else srv.then
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-0123456789")


def _llm(srv, sleeps, **kw):
    kw.setdefault("max_retries", 2)
    return OpenAIChat(model="m", base_url=srv.base_url, api_key_env=KEY_ENV, sleep=sleeps.append,
                      rng=random.Random(0), timeout_s=5, **kw)


@pytest.mark.parametrize("bad,says", [
    (EMPTY, "no choices"), (NULL, "choice 0 has no text (content: null"), (HTML, "not a JSON completion"),
    (CUT_JSON, "not a JSON completion"), (NOT_OBJECT, "not a JSON completion"), (NULL_BODY, "not a JSON completion"),
])
def test_an_unusable_reply_is_retried_then_fails_and_is_never_cached(tmp_path, bad, says):
    store = KeyValueStore(tmp_path / "calls")
    sleeps: list[float] = []
    with Scripted([bad] * 3) as srv:
        llm = CachedLLM(_llm(srv, sleeps), store)
        with pytest.raises(LLMError, match="failed after 3 attempts; last status: unusable reply") as ei:
            llm.generate([ChatRequest.of("q")])
        assert says in str(ei.value)
        assert srv.n == 3 and len(sleeps) == 2  # retried under the same backoff
        assert len(store) == 0
    # the same request once the server recovers: a real reply, now cached
    with Scripted([bad], then=good("fine")) as srv:
        llm = CachedLLM(_llm(srv, sleeps), store)
        assert llm.generate([ChatRequest.of("q")])[0].text == "fine"
        assert srv.n == 2 and len(store) == 1


def test_fewer_choices_than_asked_is_a_failed_attempt():
    sleeps: list[float] = []
    with Scripted([good("a", n=1)], then=good("b", n=2)) as srv:
        c = _llm(srv, sleeps).generate([ChatRequest.of("q", n=2)])[0]
    assert c.texts == ("b", "b") and srv.n == 2


@pytest.mark.parametrize("value", ["86400", "inf", "1e12", "Fri, 31 Dec 9999 23:59:59 GMT", "61"])
def test_a_retry_after_past_the_cap_fails_at_once(tmp_path, value):
    store = KeyValueStore(tmp_path / "calls")
    sleeps: list[float] = []
    with Scripted([js(429, {"error": {"message": "slow down"}}, **{"Retry-After": value})], then=good()) as srv:
        llm = CachedLLM(_llm(srv, sleeps), store)
        t0 = time.monotonic()
        with pytest.raises(LLMError, match=r"Retry-After.*longer than llm.max_retry_after_s=60; not retried"):
            llm.generate([ChatRequest.of("q")])
        assert time.monotonic() - t0 < 30 and sleeps == [] and srv.n == 1 and len(store) == 0


def test_a_retry_after_within_the_cap_is_honoured_and_the_cap_is_a_setting():
    sleeps: list[float] = []
    with Scripted([js(429, {}, **{"Retry-After": "60"}), js(503, {}, **{"Retry-After": "nan"})],
                  then=good()) as srv:
        assert _llm(srv, sleeps).generate([ChatRequest.of("q")])[0].text == "ok"
    assert sleeps[0] == 60.0 and 0 < sleeps[1] <= 1.0  # nan: unreadable, so the backoff decides
    with Scripted([js(429, {}, **{"Retry-After": "5"})], then=good()) as srv:
        with pytest.raises(LLMError, match="max_retry_after_s=2"):
            _llm(srv, [], max_retry_after_s=2).generate([ChatRequest.of("q")])
    with pytest.raises(LLMError, match="max_retry_after_s"):
        _llm(srv, [], max_retry_after_s=float("inf"))


def test_parse_retry_after_never_raises():
    assert parse_retry_after("inf") == float("inf") and parse_retry_after("1e12") == 1e12
    assert parse_retry_after("nan") is None and parse_retry_after("-5") == 0.0
    assert parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT") > 1e9
    assert parse_retry_after("Mon, 01 Jan 0001 00:00:00 GMT") == 0.0
    assert parse_retry_after("soon") is None


def test_a_reply_without_usage_is_unknown_not_zero_and_warned_once(tmp_path, caplog):
    store = KeyValueStore(tmp_path / "calls")
    with Scripted([], then=good("x", usage=False)) as srv:
        llm = _llm(srv, [], prices={"m": {"input": 1.0, "output": 1.0}})
        with caplog.at_level(logging.WARNING, logger="kgreason.llm"):
            a, b = llm.generate([ChatRequest.of("q1")])[0], llm.generate([ChatRequest.of("q2")])[0]
        assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
        assert "without token counts" in caplog.records[0].message and len(caplog.records) == 1
        assert a.usage.usage_unknown == 1 and a.usage.cost_usd == 0 and a.usage.calls == 1
        cached = CachedLLM(_llm(srv, []), store)
        cached.generate([ChatRequest.of("q3")])
        cached.close()
    again = CachedLLM(_llm(srv, []), KeyValueStore(tmp_path / "calls"))
    hit = again.generate([ChatRequest.of("q3")])[0]
    assert hit.cached and hit.usage.usage_unknown == 1  # the replay is still unknown, not 0 tokens
    led = Ledger()
    for u in (a.usage, b.usage, hit.usage):
        led.add("answer", u)
    m = ledger_metrics([led], 1)
    assert m["llm/calls_usage_unknown"] == 3 and m["llm/cost_usd"] == 0 and m["llm/replies_cut"] == 0


def test_a_reply_over_max_reply_chars_is_cut_and_counted(caplog):
    with Scripted([], then=good("y" * 5000)) as srv:
        with caplog.at_level(logging.WARNING, logger="kgreason.llm"):
            c = _llm(srv, [], max_reply_chars=100).generate([ChatRequest.of("q")])[0]
    assert c.text == "y" * 100 and c.usage.replies_cut == 1 and c.usage.usage_unknown == 0
    assert any("max_reply_chars=100" in r.message for r in caplog.records)
    led = Ledger()
    led.add("answer", c.usage)
    assert ledger_metrics([led], 1)["llm/replies_cut"] == 1


def test_the_cache_stores_only_whole_replies(tmp_path):
    """Whatever the backend: a completion with fewer texts than asked, or a score list with a
    missing or non-finite value, is returned to the caller but never stored."""
    from kgreason.types import Completion

    class Partial:
        backend, model = "scripted", "m"

        def generate(self, reqs):
            return [Completion(texts=()) for _ in reqs]

        def score(self, prompt, cands):
            return [float("nan")] * len(cands)

    store = KeyValueStore(tmp_path / "calls")
    llm = CachedLLM(Partial(), store)
    assert llm.generate([ChatRequest.of("q")])[0].texts == ()
    assert len(llm.score(ChatRequest.of("q").messages, ["a", "b"])) == 2
    assert len(store) == 0
