"""OpenAIChat against a real HTTP server on 127.0.0.1 (kgreason.bench.llm.FakeChatServer)."""

from __future__ import annotations

import random

import pytest

from kgreason.bench.llm import FakeChatServer
from kgreason.llm.base import LLMError, ScoringUnsupported
from kgreason.llm.openai_http import SCORE_PROBES, OpenAIChat, parse_retry_after
from kgreason.types import ChatRequest, Message

KEY_ENV = "KGREASON_TEST_FAKE_KEY"
KEY = "sk-test-SECRET-0123456789"


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def _llm(srv, sleeps=None, **kw):
    kw.setdefault("max_retries", 3)
    return OpenAIChat(model="fake-model", base_url=srv.base_url, api_key_env=KEY_ENV,
                      sleep=(sleeps.append if sleeps is not None else (lambda s: None)),
                      rng=random.Random(0), **kw)


def test_batched_order_tokens_and_request_fields():
    with FakeChatServer() as srv:
        llm = _llm(srv, max_concurrency=4, prices={"fake-model": {"input": 1.0, "output": 2.0}})
        reqs = [ChatRequest.of(f"q {i} " + "w " * i, system="sys", temperature=0.3, top_p=0.9, max_tokens=7,
                               seed=11, stop=("END",)) for i in range(12)]
        comps = llm.generate(reqs)
    assert [c.text for c in comps] == ["echo: " + r.messages[-1].content for r in reqs]
    for r, c in zip(reqs, comps):
        pt = sum(len(m.content.split()) for m in r.messages)
        assert c.usage.calls == 1 and c.usage.prompt_tokens == pt
        assert c.usage.completion_tokens == len(c.text.split())
        assert c.usage.cost_usd == pytest.approx((pt * 1.0 + c.usage.completion_tokens * 2.0) / 1e6)
        assert c.usage.latency_s > 0
    body = srv.requests[0]
    assert body["model"] == "fake-model" and body["temperature"] == 0.3 and body["top_p"] == 0.9
    assert body["max_tokens"] == 7 and body["seed"] == 11 and body["stop"] == ["END"] and body["n"] == 1
    assert srv.headers[0]["authorization"] == f"Bearer {KEY}"


def test_n_and_logprobs():
    with FakeChatServer() as srv:
        c = _llm(srv).generate([ChatRequest.of("hello there", n=3, logprobs=True)])[0]
    assert c.texts == ("echo: hello there", "echo: hello there #1", "echo: hello there #2")
    assert [len(x) for x in c.token_logprobs] == [3, 4, 4]
    assert c.token_logprobs[0] == pytest.approx((-0.1, -0.2, -0.3))
    assert srv.requests[0]["logprobs"] is True and srv.requests[0]["n"] == 3


def test_429_retry_after_is_honoured_then_success():
    sleeps: list[float] = []
    with FakeChatServer(faults=[("429", 7), ("429", "2.5")]) as srv:
        c = _llm(srv, sleeps).generate([ChatRequest.of("x")])[0]
    assert c.text == "echo: x"
    assert sleeps == [7.0, 2.5]  # exactly what the server asked for, no jitter
    assert len(srv.requests) == 3  # client's own retries are off: every attempt is ours


def test_5xx_and_slow_exponential_backoff_with_jitter():
    sleeps: list[float] = []
    with FakeChatServer(faults=[("500",), ("503",), ("slow", 1.0)]) as srv:
        llm = _llm(srv, sleeps, backoff_base_s=1.0, backoff_max_s=3.0, timeout_s=0.3, max_retries=4)
        c = llm.generate([ChatRequest.of("y")])[0]
    assert c.text == "echo: y"
    assert len(sleeps) == 3  # 500, 503, timeout
    caps = [1.0, 2.0, 3.0]  # base·2^attempt capped at 3
    for s, cap in zip(sleeps, caps):
        assert 0.5 * cap <= s <= cap


def test_gives_up_naming_endpoint_and_last_status():
    sleeps: list[float] = []
    with FakeChatServer(faults=[("500",), ("502",), ("429", None)]) as srv:
        llm = _llm(srv, sleeps, max_retries=2)
        with pytest.raises(LLMError) as ei:
            llm.generate([ChatRequest.of("z")])
    msg = str(ei.value)
    assert f"{srv.base_url}/chat/completions" in msg and "HTTP 429" in msg and "3 attempts" in msg
    assert len(srv.requests) == 3 and len(sleeps) == 2
    assert KEY not in msg


def test_non_retryable_4xx_fails_at_once():
    sleeps: list[float] = []
    with FakeChatServer(faults=[("400",)]) as srv:
        with pytest.raises(LLMError, match="HTTP 400"):
            _llm(srv, sleeps).generate([ChatRequest.of("z")])
    assert sleeps == [] and len(srv.requests) == 1


def test_connection_error_is_retried_then_named():
    sleeps: list[float] = []
    llm = OpenAIChat(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=KEY_ENV, max_retries=2,
                     sleep=sleeps.append, timeout_s=2)
    with pytest.raises(LLMError, match=r"127\.0\.0\.1:9/v1/chat/completions.*connection error"):
        llm.generate([ChatRequest.of("z")])
    assert len(sleeps) == 2


def test_missing_key_env_is_a_clear_error(monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(LLMError, match=KEY_ENV):
        OpenAIChat(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=KEY_ENV)
    assert KEY not in repr(OpenAIChat(model="m", base_url="http://x/v1", api_key_env=None))


def test_score_via_echo_logprobs_and_unsupported():
    prompt = (Message("user", "Capital of France?"),)
    with FakeChatServer() as srv:
        got = _llm(srv).score(prompt, ["Paris", "Rome de Italia"])
    # the fake: one token per word with its leading spaces, log-prob −0.01·(len(token) mod 7 + 1).
    # The prompt ends in "assistant: ", so " Paris" is one token that starts on the prefix's last
    # space: it counts (it scored 0 when only tokens starting inside the candidate counted)
    assert got == pytest.approx([-0.01 * (6 % 7 + 1), -0.01 * ((5 % 7 + 1) + (3 % 7 + 1) + (7 % 7 + 1))])
    scored = [r for r in srv.requests if r["prompt"].startswith("user: ")]
    assert len(srv.requests) == len(scored) + 2 * len(SCORE_PROBES)  # the alignment check, once
    # max_tokens=1: llama-cpp-python reads 0 as "generate until the context is full"
    assert all(r["echo"] is True and r["max_tokens"] == 1 for r in srv.requests)
    with FakeChatServer(completions=False) as srv:
        with pytest.raises(ScoringUnsupported):
            _llm(srv).score(prompt, ["Paris"])
    with pytest.raises(ScoringUnsupported):
        OpenAIChat(model="m", base_url="http://x/v1", api_key_env=None, score_endpoint="none").score(prompt, ["a"])


def test_generated_token_after_the_candidate_is_not_counted():
    """The one generated token (max_tokens=1) lies past the candidate: never part of its score."""
    from kgreason.llm.openai_http import render_plain

    prompt = (Message("user", "Q"),)

    class Gen(FakeChatServer):
        def _completion(self, body):
            out = super()._completion(body)
            if body["prompt"].startswith("user: "):
                lp = out["choices"][0]["logprobs"]
                lp["tokens"].append(" extra")
                lp["token_logprobs"].append(-50.0)
                lp["text_offset"].append(len(body["prompt"]))
            return out

    with Gen() as srv:
        assert _llm(srv).score(prompt, [" Paris"]) == pytest.approx([-0.01 * (7 % 7 + 1)])  # "  Paris"
    assert render_plain(prompt).endswith("assistant: ")


def test_server_with_shifted_echo_logprobs_cannot_score(caplog):
    """A server that reports each echoed token with the next position's log-prob (llama-cpp-python
    0.3.36 on a model without BOS) fails the known-answer check: score() raises
    ScoringUnsupported every time, the check runs once, and the run is warned once."""
    import logging

    prompt = (Message("user", "Capital of France?"),)
    with FakeChatServer(echo_shift=True) as srv, caplog.at_level(logging.WARNING, logger="kgreason.llm"):
        llm = _llm(srv)
        for _ in range(3):
            with pytest.raises(ScoringUnsupported, match="alignment"):
                llm.score(prompt, ["Paris", "Rome"])
        assert llm.score_alignment()[0] is False
        assert len(srv.requests) == 2  # the probe's two continuations, never again; no candidate scored
    warned = [r for r in caplog.records if "known-answer" in r.getMessage()]
    assert len(warned) == 1 and srv.base_url in warned[0].getMessage()
    # the same server, aligned: the check passes and the candidates are scored
    with FakeChatServer() as srv:
        llm = _llm(srv)
        assert llm.score_alignment()[0] is True
        assert len(llm.score(prompt, ["Paris", "Rome"])) == 2
    # score_check=false trusts the server as is (the shifted values come back)
    with FakeChatServer(echo_shift=True) as srv:
        assert len(_llm(srv, score_check=False).score(prompt, ["Paris"])) == 1
        assert len(srv.requests) == 1


def test_sgr_falls_back_to_chat_choice_when_the_server_cannot_score():
    """SGR's P_θ (Eq. 18) comes from score() on an aligned server and is None (chat-choice
    fallback) on a shifted one."""
    from kgreason.reasoners.sgr import SGR

    class Stub:
        def __init__(self, llm):
            self.llm = llm

    with FakeChatServer() as srv:
        p = SGR._p_theta(Stub(_llm(srv)), "Which?", ["Paris", "Rome"])
        assert p is not None and sum(p) == pytest.approx(1.0)
    with FakeChatServer(echo_shift=True) as srv:
        assert SGR._p_theta(Stub(_llm(srv)), "Which?", ["Paris", "Rome"]) is None


def test_parse_retry_after():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)


def test_bounded_concurrency_seen_by_the_server():
    """A batch never has more than max_concurrency requests in flight at the server."""
    with FakeChatServer(latency_s=0.05) as srv:
        comps = _llm(srv, max_concurrency=3).generate([ChatRequest.of(f"q{i}") for i in range(12)])
        assert [c.text for c in comps] == [f"echo: q{i}" for i in range(12)]
        assert srv.in_flight == 0 and 1 <= srv.max_in_flight <= 3
        srv.max_in_flight = 0
        _llm(srv, max_concurrency=1).generate([ChatRequest.of(f"r{i}") for i in range(4)])
        assert srv.max_in_flight == 1


# ----------------------------------------------------------------------------- reasoning models (issue 30 item 3)
# FakeChatServer(openai_rules=True) refuses what the OpenAI API refuses from GPT-5 / o-series
# models (HTTP 400, OpenAI's error JSON) and reports reasoning tokens.


def _reasoner(srv, model="gpt-5-mini", **kw):
    return OpenAIChat(model=model, base_url=srv.base_url, api_key_env=KEY_ENV, sleep=lambda s: None,
                      rng=random.Random(0), **kw)


def test_the_test_server_refuses_what_the_api_refuses():
    """The server itself: today's request form (max_tokens, temperature 0) is refused from a
    reasoning model with OpenAI's error JSON, accepted from gpt-4o-mini."""
    import json
    import urllib.error
    import urllib.request

    def post(srv, body):
        req = urllib.request.Request(f"{srv.base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    msgs = [{"role": "user", "content": "hi"}]
    with FakeChatServer(openai_rules=True, reasoning_tokens=5) as srv:
        code, body = post(srv, {"model": "gpt-5-mini", "messages": msgs, "max_tokens": 5})
        assert code == 400 and body["error"]["param"] == "max_tokens"
        assert body["error"]["type"] == "invalid_request_error" and "max_completion_tokens" in body["error"]["message"]
        code, body = post(srv, {"model": "o3-mini", "messages": msgs, "temperature": 0})
        assert code == 400 and body["error"]["code"] == "unsupported_value"
        code, body = post(srv, {"model": "gpt-4o-mini", "messages": msgs, "reasoning_effort": "low"})
        assert code == 400 and body["error"]["param"] == "reasoning_effort"
        code, body = post(srv, {"model": "gpt-5-mini", "messages": msgs, "max_completion_tokens": 50})
        assert code == 200 and body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 5
        code, body = post(srv, {"model": "gpt-4o-mini", "messages": msgs, "max_tokens": 5, "temperature": 0})
        assert code == 200


def test_reasoning_model_gets_the_request_the_api_accepts():
    with FakeChatServer(openai_rules=True, reasoning_tokens=40) as srv:
        llm = _reasoner(srv, reasoning_effort="low", reasoning_budget_tokens=1000,
                        prices={"gpt-5-mini": {"input": 1.0, "output": 2.0}})
        c = llm.generate([ChatRequest.of("what is up", temperature=0.0, max_tokens=20, seed=3)])[0]
        assert srv.rejected == [] and c.text == "echo: what is up"
        body = srv.requests[0]
        assert body["max_completion_tokens"] == 20 + 1000 and body["reasoning_effort"] == "low"
        for absent in ("max_tokens", "temperature", "top_p", "seed", "stop", "logprobs"):
            assert absent not in body, absent
        # reasoning tokens: part of completion_tokens (billed as output), recorded on their own
        assert c.usage.reasoning_tokens == 40 and c.usage.completion_tokens == 40 + 4
        assert c.usage.cost_usd == pytest.approx((c.usage.prompt_tokens * 1.0 + 44 * 2.0) / 1e6)
        # temperature 1 is the API's own: also sent without one
        llm.generate([ChatRequest.of("again", temperature=1.0)])
        assert "temperature" not in srv.requests[-1] and srv.rejected == []


def test_stop_is_applied_to_a_reasoning_models_reply():
    with FakeChatServer(openai_rules=True, reply=lambda b: "Paris\nQuestion: next") as srv:
        c = _reasoner(srv, model="o4-mini").generate([ChatRequest.of("q", stop=("\nQuestion:",))])[0]
    assert c.text == "Paris" and "stop" not in srv.requests[0] and srv.rejected == []


def test_non_reasoning_models_keep_their_request_and_cache_key():
    from kgreason.llm.cache import backend_settings

    with FakeChatServer(openai_rules=True) as srv:
        llm = _reasoner(srv, model="gpt-4o-mini")
        llm.generate([ChatRequest.of("x", temperature=0.0, max_tokens=7, stop=("END",), seed=1)])
        body = srv.requests[0]
        assert body["max_tokens"] == 7 and body["temperature"] == 0.0 and body["stop"] == ["END"]
        assert "max_completion_tokens" not in body and "reasoning_effort" not in body
        # keys of caches written before reasoning models were told apart stay valid
        assert set(backend_settings(llm)) == {"base_url", "extra_body", "score_endpoint"}
        r = _reasoner(srv, reasoning_effort="high")
        assert backend_settings(r)["reasoning"] == {"request": "max_completion_tokens", "effort": "high",
                                                    "budget_tokens": 8192}
        assert backend_settings(_reasoner(srv, reasoning_effort="low"))["reasoning"]["effort"] == "low"


def test_reasoning_temperature_it_cannot_serve_is_refused_before_sending():
    with FakeChatServer(openai_rules=True) as srv:
        llm = _reasoner(srv)
        with pytest.raises(LLMError, match=r"reasoning model .* temperature=0\.7"):
            llm.generate([ChatRequest.of("x", temperature=0.7)])
        with pytest.raises(LLMError, match="top_p=0.9"):
            llm.generate([ChatRequest.of("x", top_p=0.9)])
        with pytest.raises(LLMError, match="no log-probabilities"):
            llm.generate([ChatRequest.of("x", logprobs=True)])
        assert srv.requests == []  # nothing was sent: no 400 per example


def test_reasoning_models_are_configurable():
    from kgreason.llm.openai_http import is_reasoning_model

    assert is_reasoning_model("gpt-5-mini") and is_reasoning_model("O3-MINI") and is_reasoning_model("openai/o1")
    assert not is_reasoning_model("gpt-4o-mini") and not is_reasoning_model("qwen2.5-7b")
    assert not is_reasoning_model("gpt-5-chat-latest", ["gpt-5*", "!gpt-5-chat*"])
    with FakeChatServer(openai_rules=True) as srv:
        own = _reasoner(srv, model="my-thinker-1", reasoning_models=["my-thinker*"])
        own.generate([ChatRequest.of("x", max_tokens=5)])
        assert srv.requests[-1]["max_completion_tokens"] == 5 + 8192 and "max_tokens" not in srv.requests[-1]
        # a list without gpt-5: the old request form, which the API refuses at once (no retries)
        with pytest.raises(LLMError, match=r"HTTP 400: .*Unsupported parameter: 'max_tokens'"):
            _reasoner(srv, reasoning_models=["o1*"]).generate([ChatRequest.of("x")])
    with pytest.raises(LLMError, match=r"reasoning_effort='low': model 'gpt-4o-mini' is not a reasoning model"):
        OpenAIChat(model="gpt-4o-mini", base_url="http://x/v1", api_key_env=None, reasoning_effort="low")


def test_a_reply_budget_alone_leaves_a_reasoning_model_nothing_to_say():
    """300 tokens for the PDSQI reply are gone after 500 reasoning tokens: the reply is empty
    (finish_reason length), an unusable reply (issue 57 L5) whose error names the knob; the
    reasoning budget fits it."""
    with FakeChatServer(openai_rules=True, reasoning_tokens=500) as srv:
        with pytest.raises(LLMError, match=r"choice 0 is empty .*'length'.*max_completion_tokens=300; raise "
                                           r"llm.reasoning_budget_tokens \(now 0\)"):
            _reasoner(srv, reasoning_budget_tokens=0, max_retries=0).generate([ChatRequest.of("grade", max_tokens=300)])
        c = _reasoner(srv).generate([ChatRequest.of("grade", max_tokens=300)])[0]
        assert c.text == "echo: grade" and c.usage.reasoning_tokens == 500
