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
    kw.setdefault("timeout_s", 5)
    return OpenAIChat(model="m", base_url=srv.base_url, api_key_env=KEY_ENV, sleep=sleeps.append,
                      rng=random.Random(0), **kw)


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


# --------------------------------------------------------------------------- issue 57: L5, M2


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
def test_an_empty_or_blank_reply_is_a_failed_attempt_never_cached(tmp_path, text):
    """Issue 57 L5: an empty or whitespace-only reply was a success, cached and replayed."""
    store = KeyValueStore(tmp_path / "calls.sqlite")
    sleeps: list[float] = []
    with Scripted([good(text)] * 3) as srv:
        llm = CachedLLM(_llm(srv, sleeps), store)
        with pytest.raises(LLMError, match=r"failed after 3 attempts; last status: unusable reply \(choice 0 is "
                                           r"empty"):
            llm.generate([ChatRequest.of("q")])
        assert srv.n == 3 and len(sleeps) == 2 and len(store) == 0
    with Scripted([good(text)], then=good("fine")) as srv:
        assert CachedLLM(_llm(srv, sleeps), store).generate([ChatRequest.of("q")])[0].text == "fine"
        assert srv.n == 2 and len(store) == 1
    with Scripted([good("a", n=2)[:2] + (json.dumps({"choices": [
            {"index": 0, "message": {"content": "a"}}, {"index": 1, "message": {"content": text}}]}).encode(),)],
                  then=good("b", n=2)) as srv:  # one blank sample of n fails the call too
        assert _llm(srv, []).generate([ChatRequest.of("q", n=2)])[0].texts == ("b", "b") and srv.n == 2


def test_the_start_up_probe_takes_a_blank_one_token_reply():
    """The probe asks for one token, which may well be a newline: the endpoint answered."""
    with Scripted([], then=good("\n")) as srv:
        assert _llm(srv, []).probe(wait_s=5).text == "\n" and srv.n == 1


def _raw_reply(text_json: bytes) -> tuple:
    """A 200 whose reply text is ``text_json`` spliced in as it is (bytes the JSON encoder would not write)."""
    body = (b'{"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [{"index": 0, '
            b'"message": {"role": "assistant", "content": "' + text_json + b'"}, "finish_reason": "stop"}], '
            b'"usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}')
    return 200, {"Content-Type": "application/json"}, body


@pytest.mark.parametrize("raw", [b"Paris \\ud800 x", b"Paris \xed\xa0\x80 x", b"Paris \\udfff\\ud800 x"])
def test_a_lone_surrogate_is_replaced_counted_and_every_store_takes_the_row(tmp_path, raw):
    """Issue 57 M2: a reply holding a lone UTF-16 surrogate (escaped, or as the bytes ed a0 80)
    could be stored nowhere: the call cache raised, and with the cache off predictions.jsonl
    raised on every resume. The client replaces it with U+FFFD and counts the reply."""
    from kgreason.runs import PredictionStore

    store = KeyValueStore(tmp_path / "calls.sqlite")
    with Scripted([], then=_raw_reply(raw)) as srv:
        llm = CachedLLM(_llm(srv, []), store)
        c = llm.generate([ChatRequest.of("q")])[0]
        assert srv.n == 1
    assert c.text.startswith("Paris \ufffd") and c.text.endswith(" x")
    c.text.encode("utf-8")  # strict: nothing left that UTF-8 cannot hold
    assert c.usage.replies_cleaned == 1 and c.usage.calls == 1 and len(store) == 1
    hit = CachedLLM(_llm(srv, []), store).generate([ChatRequest.of("q")])[0]
    assert hit.cached and hit.text == c.text and hit.usage.replies_cleaned == 1
    led = Ledger()
    for u in (c.usage, hit.usage):
        led.add("answer", u)
    m = ledger_metrics([led], 1)
    assert m["llm/replies_cleaned"] == 2 and m["llm/calls"] == 1 and m["llm/cache_hits"] == 1
    preds = PredictionStore(tmp_path / "predictions.jsonl")
    preds.append({"id": "e1", "answers": [c.text], "raw": c.text})
    again = PredictionStore(tmp_path / "predictions.jsonl")
    assert again.rows["e1"]["raw"] == c.text


# --------------------------------------------------------------------------- issue 57: M1


class Streaming:
    """A loopback server whose reply body is ``body(handler)``'s chunks, written as they come
    (chunked transfer, or a ``Content-Length`` when ``length`` is given). Bounded: each reply
    stops after ``max_s`` seconds or when the client goes away."""

    def __init__(self, chunks, length=None, max_s=30.0, then=None):
        self.n, self.sent = 0, []
        srv = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                srv.n += 1
                if then is not None and srv.n > 1:
                    code, headers, body = then
                    self.send_response(code)
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if length is None:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(length))
                self.end_headers()
                t0, sent = time.monotonic(), 0
                try:
                    for chunk in chunks():
                        if time.monotonic() - t0 > max_s:
                            break
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if length is None else chunk)
                        self.wfile.flush()
                        sent += len(chunk)
                except OSError:  # the client hung up: what the test wants
                    pass
                srv.sent.append((sent, time.monotonic() - t0))
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def _endless(size=1 << 20):
    head = b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"content": "'
    block = b"y" * size

    def gen():
        yield head
        while True:
            yield block
    return gen


def test_an_endless_reply_is_cut_off_at_its_byte_ceiling_in_bounded_memory(tmp_path):
    """Issue 57 M1: against a server streaming 1 MiB chunks without end the client grew to 2.8 GB
    and then wrote a MemoryError row. Now the body is read against a ceiling derived from
    ``max_reply_chars`` (:func:`reply_byte_ceiling`): the attempt fails as an unusable reply past
    it, is retried, and nothing is cached. Memory stays within 100 MB of where it started (the
    process's resident size, sampled every 10 ms while the call runs)."""
    import psutil

    from kgreason.llm.openai_http import reply_byte_ceiling

    proc = psutil.Process()
    store = KeyValueStore(tmp_path / "calls.sqlite")
    base = proc.memory_info().rss
    peak, stop = [base], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.01)
    threading.Thread(target=sample, daemon=True).start()
    try:
        with Streaming(_endless(), max_s=20) as srv:
            llm = CachedLLM(_llm(srv, [], max_retries=1, timeout_s=15), store)
            t0 = time.monotonic()
            with pytest.raises(LLMError, match=r"failed after 2 attempts; last status: unusable reply \(the body "
                                               r"passed .* bytes, the ceiling"):
                llm.generate([ChatRequest.of("q")])
            took = time.monotonic() - t0
    finally:
        stop.set()
    ceiling = reply_byte_ceiling(200_000)
    assert srv.n == 2 and len(store) == 0
    assert took < 10, took  # far inside the 15 s deadline: the ceiling ends it, not the clock
    assert peak[0] - base < 100 * 2**20, f"grew by {(peak[0] - base) / 2**20:.0f} MB"
    assert all(sent < ceiling + 64 * 2**20 for sent, _ in srv.sent)  # the client hung up early


def test_a_huge_finite_reply_is_refused_retried_and_never_cached(tmp_path):
    """A 20 MB reply (announced in its Content-Length) to a client whose ``max_reply_chars`` is
    1,000 was read whole and cut; now it is an unusable reply: retried, never cached."""
    body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "y" * 20_000_000},
                                    "finish_reason": "stop"}]}).encode()
    store = KeyValueStore(tmp_path / "calls.sqlite")
    with Scripted([(200, {"Content-Type": "application/json"}, body)] * 3) as srv:
        llm = CachedLLM(_llm(srv, [], max_reply_chars=1000), store)
        with pytest.raises(LLMError, match=r"failed after 3 attempts; last status: unusable reply \(the body "
                                           r"(announces|passed) .*bytes, the ceiling .*llm.max_reply_chars=1000"):
            llm.generate([ChatRequest.of("q")])
        assert srv.n == 3 and len(store) == 0
    # the cut still holds for a reply within the ceiling
    with Scripted([], then=good("z" * 5000)) as srv:
        c = _llm(srv, [], max_reply_chars=1000).generate([ChatRequest.of("q")])[0]
        assert c.text == "z" * 1000 and c.usage.replies_cut == 1


def test_a_trickling_reply_ends_at_the_attempts_deadline():
    """Issue 57 M1/L2: ``timeout_s`` was httpx's per-read timeout, so a server sending one byte
    every 0.2 s held the call for as long as it liked. It is each attempt's deadline now."""
    def trickle():
        yield b'{"id": "x", "choices": [{"index": 0, "message": {"content": "'
        while True:
            time.sleep(0.2)
            yield b"y"

    sleeps: list[float] = []
    with Streaming(trickle, max_s=25) as srv:
        t0 = time.monotonic()
        with pytest.raises(LLMError, match=r"failed after 2 attempts; last status: timeout \(no complete reply "
                                           r"within llm.timeout_s=1.5 s\)"):
            _llm(srv, sleeps, max_retries=1, timeout_s=1.5).generate([ChatRequest.of("q")])
        took = time.monotonic() - t0
        deadline = time.monotonic() + 30  # the server's thread sees the hang-up at its next write
        while len(srv.sent) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    # each attempt held the server for its 1.5 s deadline (+ the server's next 0.2 s write, which
    # finds the client gone, and whatever a loaded machine adds), not for the server's 25 s
    assert srv.n == 2 and len(srv.sent) == 2 and all(d < 1.5 + 6.0 for _, d in srv.sent), srv.sent
    assert took < 20, took


def test_a_compressed_reply_is_unpacked_within_the_ceiling(tmp_path):
    """A server may gzip its reply although the client asks for none: a small one is read as
    usual, and a small body that unpacks past the ceiling (20 MB of text in about 20 kB) is an
    unusable reply, found without unpacking it whole."""
    import gzip

    def packed(text):
        code, headers, body = good(text)
        return code, {**headers, "Content-Encoding": "gzip"}, gzip.compress(body)

    with Scripted([], then=packed("fine")) as srv:
        assert _llm(srv, []).generate([ChatRequest.of("q")])[0].text == "fine"
    bomb = packed("y" * 20_000_000)
    assert len(bomb[2]) < 100_000
    store = KeyValueStore(tmp_path / "calls.sqlite")
    with Scripted([bomb] * 2) as srv:
        with pytest.raises(LLMError, match=r"unusable reply \(the body unpacks to more than \d+ bytes, the ceiling"):
            CachedLLM(_llm(srv, [], max_retries=1, max_reply_chars=1000), store).generate([ChatRequest.of("q")])
        assert srv.n == 2 and len(store) == 0
