"""HFCausalLM on a tiny random-weight Llama built locally (nothing downloaded)."""

from __future__ import annotations

import math

import pytest

from kgreason.types import ChatRequest, Message

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # transformers import + tiny model build: ~20 s on 2 shared cores


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from kgreason.llm.hf import HFCausalLM, build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny_llama"))
    return HFCausalLM(path, batch_size=3, device="cpu")


PROMPTS = [f"what is the capital of {w} ?" for w in ("france", "paris", "rome", "the graph", "yes no", "1 2 3", "who")]


def test_batched_generate_keeps_order_and_matches_single(tiny):
    reqs = [ChatRequest.of(p, max_tokens=6, logprobs=True) for p in PROMPTS]
    batched = tiny.generate(reqs)
    single = [tiny.generate([r])[0] for r in reqs]
    assert [c.texts for c in batched] == [c.texts for c in single]
    assert len({c.text for c in batched}) > 1  # distinct prompts → distinct outputs, so order matters
    for c, s in zip(batched, single):
        assert len(c.token_logprobs) == 1 and len(c.token_logprobs[0]) == c.usage.completion_tokens
        assert c.token_logprobs[0] == pytest.approx(s.token_logprobs[0], abs=1e-4)
        assert all(x <= 0 for x in c.token_logprobs[0])
        assert c.usage.calls == 1 and c.usage.prompt_tokens > 0


def test_greedy_logprobs_equal_score_of_generated_text(tiny):
    prompt = (Message("system", "sys"), Message("user", "what is the capital of france ?"))
    c = tiny.generate([ChatRequest(messages=prompt, max_tokens=5, logprobs=True)])[0]
    ids = tiny.tok(c.text, add_special_tokens=False)["input_ids"]
    if len(ids) != c.usage.completion_tokens:
        pytest.skip("generated an end-of-sequence token; text does not round-trip")
    (s,) = tiny.score(prompt, [c.text])
    assert s == pytest.approx(sum(c.token_logprobs[0]), abs=1e-3)


def test_score_batches_candidates_like_one_by_one(tiny):
    prompt = (Message("user", "capital of france ?"),)
    cands = ["paris", "rome the city", "yes", "", "the knowledge graph answer is paris"]
    together = tiny.score(prompt, cands)
    alone = [tiny.score(prompt, [c])[0] for c in cands]
    assert together == pytest.approx(alone, abs=1e-4)
    assert together[3] == 0.0 and all(x < 0 for i, x in enumerate(together) if i != 3)
    # a longer continuation of the same prefix has lower log-prob
    assert tiny.score(prompt, ["paris", "paris paris"])[1] < tiny.score(prompt, ["paris"])[0]


def test_seeded_sampling_n_and_stop(tiny):
    r = ChatRequest.of("hello there", temperature=1.0, n=3, seed=7, max_tokens=6)
    a, b = tiny.generate([r])[0], tiny.generate([r])[0]
    assert a.texts == b.texts and len(a.texts) == 3
    c = tiny.generate([ChatRequest.of("hello there", temperature=1.0, n=3, seed=8, max_tokens=6)])[0]
    assert c.texts != a.texts
    assert math.isfinite(a.usage.latency_s)
    full = tiny.generate([ChatRequest.of("hello", max_tokens=6)])[0].text
    words = full.split()
    if len(words) >= 2:
        cut = tiny.generate([ChatRequest.of("hello", max_tokens=6, stop=(words[1],))])[0].text
        assert words[1] not in cut[len(words[0]):] or cut == full[: full.find(words[1])]
        assert cut == full[: full.find(words[1])]


def test_a_deferred_replay_backend_keys_calls_as_the_loaded_model_does(tiny):
    """A readonly replay's stand-in (kgreason/llm/lazy.py ``DeferredHF``) gives the same cache key
    parts as the loaded model: backend, model name and reply-shaping settings."""
    from kgreason.llm.lazy import DeferredHF
    from kgreason.llm.cache import backend_settings

    stand_in = DeferredHF({"_target_": "kgreason.llm.hf.HFCausalLM", "model": tiny.model, "batch_size": 3})
    assert (stand_in.backend, stand_in.model, backend_settings(stand_in)) == \
        (tiny.backend, tiny.model, backend_settings(tiny))
    assert stand_in._impl is None  # nothing loaded to say so
