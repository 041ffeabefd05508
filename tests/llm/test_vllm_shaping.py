"""VLLMEngine request shaping with a fake `vllm` module (vllm itself is not installed)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import pytest

from kgreason.types import ChatRequest, Message


@dataclass
class _Seq:
    index: int
    text: str
    token_ids: list
    logprobs: list | None = None


@dataclass
class _Out:
    prompt: object
    outputs: list
    prompt_token_ids: list = field(default_factory=list)
    prompt_logprobs: list | None = None


class _Tok:
    def apply_chat_template(self, msgs, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<{m['role']}>{m['content']}" for m in msgs) + "<assistant>"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


class _LLM:
    last: "_LLM" = None

    def __init__(self, **kw):
        self.kw, self.calls = kw, []
        _LLM.last = self

    def get_tokenizer(self):
        return _Tok()

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append((prompts, params))
        outs = []
        for i, p in enumerate(prompts):
            sp = params[i] if isinstance(params, list) else params
            if isinstance(p, dict):  # scoring: prompt_logprobs per position, −1/1000·token id
                ids = p["prompt_token_ids"]
                plp = [None] + [{t: types.SimpleNamespace(logprob=-t / 1000)} for t in ids[1:]]
                outs.append(_Out(p, [_Seq(0, "", [1])], ids, plp))
                continue
            seqs = [_Seq(k, f"reply{k}:{p[-15:]}", [7, 8, 9][: k + 1],
                         [{t: types.SimpleNamespace(logprob=-0.5)} for t in [7, 8, 9][: k + 1]]
                         if sp.kw.get("logprobs") is not None else None) for k in range(sp.kw["n"])]
            outs.append(_Out(p, list(reversed(seqs)), list(range(len(p)))))
        return outs


class _SP:
    def __init__(self, **kw):
        self.kw = kw


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.LLM, mod.SamplingParams = _LLM, _SP
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return mod


def test_sampling_kwargs_carry_every_field():
    from kgreason.llm.vllm_engine import sampling_kwargs

    r = ChatRequest.of("q", temperature=0.7, top_p=0.9, max_tokens=33, n=4, stop=("\n\n",), seed=5,
                       logprobs=True, sample_index=2)
    assert sampling_kwargs(r) == {"n": 4, "temperature": 0.7, "top_p": 0.9, "max_tokens": 33, "stop": ["\n\n"],
                                  "seed": 5 + 2 * 1_000_003, "logprobs": 0}
    assert sampling_kwargs(ChatRequest.of("q")) == {"n": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": 512}


def test_engine_batches_prompts_and_maps_outputs(fake_vllm):
    from kgreason.llm.vllm_engine import VLLMEngine

    eng = VLLMEngine("some/model", tensor_parallel_size=2, dtype="bfloat16", max_model_len=4096)
    assert _LLM.last.kw["tensor_parallel_size"] == 2 and _LLM.last.kw["dtype"] == "bfloat16"
    assert _LLM.last.kw["max_model_len"] == 4096
    reqs = [ChatRequest.of(f"question {i}", system="be brief", n=1 + i % 2, logprobs=(i == 1)) for i in range(3)]
    comps = eng.generate(reqs)
    prompts, params = _LLM.last.calls[0]
    assert len(_LLM.last.calls) == 1 and len(prompts) == 3  # one batched call
    assert prompts[0] == "<system>be brief<user>question 0<assistant>"
    assert [p.kw["n"] for p in params] == [1, 2, 1]
    assert comps[1].texts == ("reply0:on 1<assistant>", "reply1:on 1<assistant>")  # sorted by index
    assert comps[1].token_logprobs == ((-0.5,), (-0.5, -0.5)) and comps[0].token_logprobs is None
    assert comps[1].usage.completion_tokens == 3 and comps[0].usage.prompt_tokens == len(prompts[0])


def test_score_sums_candidate_prompt_logprobs(fake_vllm):
    from kgreason.llm.vllm_engine import VLLMEngine

    eng = VLLMEngine("m")
    p = (Message("user", "hi"),)
    got = eng.score(p, ["ab", "c"])
    assert got == pytest.approx([-(ord("a") + ord("b")) / 1000, -ord("c") / 1000])
    _, params = _LLM.last.calls[-1]
    assert params.kw == {"max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}


def test_missing_vllm_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    from kgreason.llm.vllm_engine import VLLMEngine

    with pytest.raises(ImportError, match="pip install 'kgreason\\[vllm\\]'"):
        VLLMEngine("m")
