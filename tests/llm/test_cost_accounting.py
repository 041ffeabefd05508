"""Issue 70: scoring calls count the tokens they read, prefix reuse is counted, a cached prompt is
priced as cached, structured output is an option a backend either honours or refuses at start-up,
and a request's new ``json_schema`` field leaves every other request's cache key as it was."""

from __future__ import annotations

import json

import pytest

from kgreason.llm.accounting import Ledger, MeteredLLM, PriceTable, example_ledger, ledger_metrics
from kgreason.llm.scripted import ScriptedLLM
from kgreason.llm.cache import CachedLLM, CallStore, cache_key, request_json
from kgreason.types import ChatRequest, Message, Usage


def test_scoring_calls_count_their_prompt_tokens_and_a_cache_hit_keeps_them(tmp_path):
    """`llm/score/prompt_tokens` was 0 on every scoring call (172 calls of the metaqa_sgr bundle), so
    tokens per question understated SGR's work."""
    inner = ScriptedLLM(scores={"a b": -1.0, "c": -2.0})
    llm = MeteredLLM(CachedLLM(inner, CallStore.open(tmp_path, "readwrite")))
    prompt = (Message("user", "one two three four"),)
    with example_ledger() as first:
        llm.score(prompt, ["a b", "c"])
    with example_ledger() as again:  # answered by the call cache
        llm.score(prompt, ["a b", "c"])
    assert first.by_purpose["score"].prompt_tokens == 4 + 3  # the prompt once, then each candidate's tokens
    assert again.by_purpose["score"].cache_hits == 1 and again.by_purpose["score"].prompt_tokens == 7
    m = ledger_metrics([first, again], 2)
    assert m["llm/score/prompt_tokens"] == 14 and m["llm/tokens_per_question"] == 7.0


def test_reused_prompt_tokens_are_reported_and_computed_is_the_rest():
    led = Ledger()
    led.add("answer", Usage(calls=1, prompt_tokens=100, prompt_tokens_reused=60, completion_tokens=5))
    led.add("score", Usage(calls=1, prompt_tokens=40, prompt_tokens_reused=30))
    m = ledger_metrics([led], 1)
    assert (m["llm/prompt_tokens"], m["llm/prompt_tokens_reused"], m["llm/prompt_tokens_computed"]) == (140, 90, 50)
    assert m["llm/answer/prompt_tokens_computed"] == 40 and m["llm/score/prompt_tokens_reused"] == 30


def test_a_cached_prompt_is_priced_as_cached_where_the_table_says_so():
    t = PriceTable.of({"m": {"input": 1.0, "output": 2.0, "cached_input": 0.25}, "n": {"input": 1.0, "output": 2.0}})
    assert t.cost("m", 1_000_000, 0, cached_tokens=400_000) == pytest.approx(0.6 + 0.1)
    assert t.cost("n", 1_000_000, 0, cached_tokens=400_000) == pytest.approx(1.0)  # no cached price: full price


def test_openai_cached_tokens_are_read_from_the_reply_usage():
    from kgreason.llm.openai_http import cached_prompt_tokens

    assert cached_prompt_tokens({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 6}}) == 6
    assert cached_prompt_tokens({"prompt_tokens": 10}) == 0 and cached_prompt_tokens(None) == 0


def test_the_schema_field_leaves_other_requests_keys_unchanged_and_keys_the_requests_that_carry_one():
    """Adding `json_schema` to ChatRequest must not move the key of any request written before it
    (every committed bundle replays by key)."""
    r = ChatRequest.of("hello", max_tokens=16)
    old_form = {"messages": [{"role": "user", "content": "hello"}], "temperature": 0.0, "top_p": 1.0,
                "max_tokens": 16, "n": 1, "stop": [], "seed": None, "logprobs": False, "sample_index": 0}
    assert request_json(r) == old_form
    with_schema = ChatRequest.of("hello", max_tokens=16, json_schema='{"type":"object"}')
    assert cache_key("b", "m", "generate", request_json(with_schema)) != cache_key("b", "m", "generate", old_form)


def test_structured_output_off_strips_the_schema_before_the_cache_and_the_backend(tmp_path):
    from kgreason.llm.lazy import LazyLLM

    cfg = {"_target_": "kgreason.llm.scripted.ScriptedLLM", "default": "{}", "structured_output": False}
    cache = {"dir": str(tmp_path), "mode": "readwrite"}
    req = ChatRequest.of("q", json_schema='{"type":"object"}')
    off = LazyLLM(cfg, cache)
    off.generate([req])
    assert off.get().inner.calls[0].json_schema is None
    on = LazyLLM({**cfg, "structured_output": True}, {"dir": str(tmp_path / "b"), "mode": "readwrite"})
    on.generate([req])
    assert on.get().inner.calls[0].json_schema == '{"type":"object"}'
    off.close(), on.close()


@pytest.mark.parametrize("cfg,fits", [
    ({"_target_": "kgreason.llm.local.LocalLLM", "route": "transformers"}, False),
    ({"_target_": "kgreason.llm.local.LocalLLM", "route": "llamacpp"}, True),
    ({"_target_": "kgreason.llm.hf.HFCausalLM", "model": "x"}, False),
    ({"_target_": "kgreason.llm.openai_http.OpenAIChat", "model": "x"}, True),
])
def test_a_backend_that_cannot_constrain_decoding_refuses_structured_output_in_one_line(cfg, fits):
    from kgreason.llm.lazy import LazyLLM, structured_output_refusal

    why = structured_output_refusal(cfg)
    assert (why is None) == fits
    if not fits:
        assert "structured_output" in why and "\n" not in why
        with pytest.raises(ValueError, match="structured_output"):
            LazyLLM({**cfg, "structured_output": True}, None)


def test_openai_request_carries_the_schema_as_response_format():
    from kgreason.llm.openai_http import OpenAIChat

    c = OpenAIChat(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=None)
    schema = json.dumps({"type": "object", "properties": {"answer": {"type": "string"}}})
    body = c.request_body(ChatRequest.of("q", json_schema=schema))
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == json.loads(schema)
    assert "response_format" not in c.request_body(ChatRequest.of("q"))
