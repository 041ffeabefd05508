"""VLLMEngine: offline batched inference with vLLM (GPU), imported lazily.

* ``vllm.LLM(model, tensor_parallel_size, dtype, gpu_memory_utilization, max_model_len,
  seed, trust_remote_code)`` is built on first use of the object (construction).
* Prompts are rendered with the tokenizer's chat template
  (``llm.get_tokenizer().apply_chat_template(..., add_generation_prompt=True)``) and the whole
  ``generate`` batch goes to one ``llm.generate(prompts, [SamplingParams, ...])`` call —
  vLLM schedules it with continuous batching; outputs are matched back by position.
* ``SamplingParams(n, temperature, top_p, max_tokens, stop, seed, logprobs)``: ``logprobs=0``
  returns the sampled token's log-prob only.
* A request with ``json_schema`` (``llm.structured_output``) is decoded under it with vLLM's
  guided decoding (``StructuredOutputsParams(json=…)``, or ``GuidedDecodingParams`` on older vLLM).
* ``enable_prefix_caching`` (default true): vLLM's automatic prefix caching, so the prompts of a
  question that start alike compute their shared prefix once.
* ``score`` uses ``prompt_logprobs=0`` with ``max_tokens=1`` on ``prompt + candidate`` token
  ids and sums the log-probs of the candidate positions.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from kgreason.llm.accounting import call_usage, split_usage
from kgreason.llm.base import backend_seed
from kgreason.types import ChatRequest, Completion, Message, Usage


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError("llm=vllm needs the `vllm` package and a CUDA GPU: pip install 'kgreason[vllm]' "
                          "(or serve the model with `vllm serve` and use llm=openai llm.base_url=...)") from e
    return vllm


def sampling_kwargs(req: ChatRequest) -> dict[str, Any]:
    """``vllm.SamplingParams`` kwargs of one request."""
    kw: dict[str, Any] = {"n": int(req.n), "temperature": float(req.temperature), "top_p": float(req.top_p),
                          "max_tokens": int(req.max_tokens)}
    if req.stop:
        kw["stop"] = list(req.stop)
    seed = backend_seed(req)  # sample_index shifts the seed: repeated sampled calls differ, reproducibly
    if seed is not None:
        kw["seed"] = seed
    if req.logprobs:
        kw["logprobs"] = 0
    if getattr(req, "json_schema", None):
        kw.update(structured_kwargs(req.json_schema))
    return kw


def structured_kwargs(schema: str) -> dict[str, Any]:
    """The ``SamplingParams`` keyword that makes vLLM decode under a JSON schema (newer vLLM:
    ``structured_outputs``; older: ``guided_decoding``)."""
    import json

    js = json.loads(schema)
    try:
        from vllm.sampling_params import StructuredOutputsParams  # vLLM >= 0.11

        return {"structured_outputs": StructuredOutputsParams(json=js)}
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=js)}


def _lp_value(x: Any) -> float:
    return float(getattr(x, "logprob", x))


class VLLMEngine:
    """Args:
        model: HF id or local path (offline: a local path).
        tensor_parallel_size, dtype, gpu_memory_utilization, max_model_len, seed,
        trust_remote_code, enforce_eager, enable_prefix_caching: passed to ``vllm.LLM``.
    """

    backend = "vllm"

    def __init__(self, model: str, tensor_parallel_size: int = 1, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.85, max_model_len: int | None = None, seed: int = 0,
                 trust_remote_code: bool = False, enforce_eager: bool = False,
                 enable_prefix_caching: bool = True) -> None:
        self.vllm = _import_vllm()
        self.model = str(model)
        kw: dict[str, Any] = dict(model=self.model, tensor_parallel_size=int(tensor_parallel_size), dtype=dtype,
                                  gpu_memory_utilization=float(gpu_memory_utilization), seed=int(seed),
                                  trust_remote_code=bool(trust_remote_code), enforce_eager=bool(enforce_eager),
                                  enable_prefix_caching=bool(enable_prefix_caching))
        if max_model_len:
            kw["max_model_len"] = int(max_model_len)
        self.llm = self.vllm.LLM(**kw)
        self.tok = self.llm.get_tokenizer()

    def render(self, messages: Sequence[Message]) -> str:
        return self.tok.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                            tokenize=False, add_generation_prompt=True)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        requests = list(requests)
        if not requests:
            return []
        prompts = [self.render(r.messages) for r in requests]
        params = [self.vllm.SamplingParams(**sampling_kwargs(r)) for r in requests]
        t0 = time.perf_counter()
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        shares = split_usage(Usage(latency_s=time.perf_counter() - t0), len(requests))
        comps = []
        for r, o, sh in zip(requests, outs, shares):
            seqs = sorted(o.outputs, key=lambda s: s.index)
            lps = None
            if r.logprobs:
                lps = tuple(tuple(_lp_value(d[t]) for t, d in zip(s.token_ids, s.logprobs or [])) for s in seqs)
            comps.append(Completion(
                texts=tuple(s.text for s in seqs), token_logprobs=lps,
                usage=call_usage(len(o.prompt_token_ids or []), sum(len(s.token_ids) for s in seqs), sh.latency_s)))
        return comps

    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]:
        p_ids = self.tok(self.render(prompt), add_special_tokens=False)["input_ids"]
        c_ids = [self.tok(c, add_special_tokens=False)["input_ids"] for c in candidates]
        params = self.vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        inputs = [{"prompt_token_ids": p_ids + c} for c in c_ids]
        outs = self.llm.generate(inputs, params, use_tqdm=False)
        scores = []
        for c, o in zip(c_ids, outs):
            plp = o.prompt_logprobs or []
            total = 0.0
            for pos, t in enumerate(c, start=len(p_ids)):
                total += _lp_value(plp[pos][t])
            scores.append(total)
        return scores
