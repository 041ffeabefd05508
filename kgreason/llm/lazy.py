"""Building the configured LLM: :func:`build_llm` (backend from ``conf/llm/`` wrapped in the call
cache from ``llm_cache``) and :class:`LazyLLM`, which does that on first use, so runs whose
reasoner never calls an LLM (retrieval_only, kg_dx) load no model and open no cache file.

``run.build`` makes one :class:`LazyLLM` for the reasoner (and one for a judge with its own
``judge.llm`` config); SubQRAG's offline indexing CLI builds its LLM through the same function,
so both share the run's call cache. Whoever builds one closes it (:meth:`LazyLLM.close`).
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

from hydra.utils import instantiate

from kgreason import progress
from kgreason.llm.cache import CachedLLM, open_store

#: the ``llm`` config key that turns structured output on (docs/llm.md, "Structured output"); it is
#: read here and never passed to the backend's constructor
STRUCTURED = "structured_output"


def _local_route(cfg: Mapping[str, Any]) -> str:
    """The route an ``llm=local`` config will take (``auto``: llama.cpp when llama-cpp-python is installed)."""
    route = str(cfg.get("route", "transformers"))
    if route == "auto":
        import importlib.util

        route = "llamacpp" if importlib.util.find_spec("llama_cpp") is not None else "transformers"
    return route


def structured_output_refusal(cfg: Mapping[str, Any]) -> str | None:
    """Why ``llm.structured_output=true`` cannot be honoured by the configured backend, or None.
    Decided from the config alone, so a run refuses before it loads a model or answers anything:
    the llama.cpp route (``llm=local``/``qwen_coder_1_5b`` with llama-cpp-python) decodes under the
    schema's grammar; ``llm=openai`` sends ``response_format`` with the schema (OpenAI, vLLM and
    llama.cpp servers accept it); ``llm=vllm`` uses guided decoding; the scripted test double
    accepts it. The transformers routes (``llm=hf``, ``llm=local`` with ``route=transformers``)
    cannot."""
    target = str(cfg.get("_target_", ""))
    if target.endswith("llm.local.LocalLLM"):
        if _local_route(cfg) != "llamacpp":
            return ("llm.structured_output=true needs the llama.cpp route (llm.route=llamacpp, or route=auto with "
                    "llama-cpp-python installed: make qwen); the transformers route cannot constrain decoding")
        return None
    if target.endswith("llm.hf.HFCausalLM"):
        return ("llm.structured_output=true: llm=hf (transformers) cannot constrain decoding to a schema; use the "
                "llama.cpp route (llm=qwen_coder_1_5b after make qwen), llm=vllm or an OpenAI-compatible server")
    return None


def without_schema(requests):
    """``requests`` with their ``json_schema`` removed (structured output off: the cache keys are those
    of requests that never carried one)."""
    import dataclasses

    return [dataclasses.replace(r, json_schema=None) if getattr(r, "json_schema", None) else r for r in requests]


def build_llm(cfg: Mapping[str, Any], cache_cfg: Mapping[str, Any] | None, example_workers: int = 1,
              call_log: str | None = None):
    """Instantiate ``cfg`` (a ``conf/llm/*.yaml`` node) and wrap it in the persistent call cache
    unless ``cache_cfg`` is null or ``cache_cfg.mode`` is ``off``. With ``example_workers > 1``
    an in-process model (local, hf) is put behind the cross-example batcher
    (:mod:`kgreason.llm.batching`), under the cache, so cache hits never wait for a batch.
    ``call_log``: the run's ``calls.jsonl`` (every cache key it used; ``kgreason bundle``)."""
    from kgreason.llm.batching import maybe_batching

    if STRUCTURED in cfg:
        cfg = {k: v for k, v in cfg.items() if k != STRUCTURED}
    readonly = cache_cfg is not None and str(cache_cfg.get("mode", "off")) == "readonly"
    if readonly and str(cfg.get("_target_", "")).endswith("llm.local.LocalLLM"):
        # a replay: the named model answers under its name from the store; its weights are found and
        # loaded only for a call the store misses (which then fails as a miss), so a replay needs none
        llm = maybe_batching(instantiate(cfg, defer_load=True), int(example_workers or 1))
    elif readonly and str(cfg.get("_target_", "")).endswith("llm.hf.HFCausalLM"):
        llm = maybe_batching(DeferredHF(cfg), int(example_workers or 1))
    else:
        llm = maybe_batching(instantiate(cfg), int(example_workers or 1))
    if cache_cfg is None or str(cache_cfg.get("mode", "off")) == "off":
        return llm
    return CachedLLM(llm, open_store(cache_cfg["dir"], mode=str(cache_cfg["mode"])),
                     legacy_batched_keys=bool(cache_cfg.get("legacy_batched_keys", False)), call_log=call_log)


class DeferredHF:
    """An ``llm=hf`` backend for a readonly replay: it keys its calls exactly as
    :class:`~kgreason.llm.hf.HFCausalLM` does (backend ``hf``, the configured name, the
    ``max_input_tokens`` it truncates to; :func:`~kgreason.llm.cache.backend_settings`)
    and loads the weights only for a call, which a readonly store never lets through (a miss fails
    first). So a replay of an hf bundle needs no checkpoint."""

    backend = "hf"

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self._cfg, self._impl = cfg, None
        import inspect

        from kgreason.llm.hf import HFCausalLM  # no torch at import: the defaults are read, not repeated

        default = {k: p.default for k, p in inspect.signature(HFCausalLM.__init__).parameters.items()}
        self.model = str(cfg.get("name") or cfg["model"])
        self.max_input_tokens = int(cfg.get("max_input_tokens", default["max_input_tokens"]))
        self.batch_size = max(1, int(cfg.get("batch_size", default["batch_size"])))

    def _real(self) -> Any:
        if self._impl is None:
            self._impl = instantiate(self._cfg)
        return self._impl

    def generate(self, requests):
        return self._real().generate(requests)

    def score(self, prompt, candidates):
        return self._real().score(prompt, candidates)

    def close(self) -> None:
        if self._impl is not None and callable(getattr(self._impl, "close", None)):
            self._impl.close()


class LazyLLM:
    """The configured (cached) LLM, built on the first ``generate``/``score`` call.

    Args:
        cfg: the ``llm`` config node (``_target_`` + backend settings).
        cache_cfg: the ``llm_cache`` node (``dir``, ``mode``) or None.
        call_log: the run's ``calls.jsonl`` (the cache keys it used), or None.
    """

    def __init__(self, cfg: Mapping[str, Any], cache_cfg: Mapping[str, Any] | None, example_workers: int = 1,
                 call_log: str | None = None) -> None:
        self._cfg, self._cache_cfg, self._llm = cfg, cache_cfg, None
        self._call_log = call_log
        self._workers = int(example_workers or 1)
        self._lock = threading.Lock()  # example_workers > 1: build once
        self._closed = False
        self.backend = str(cfg.get("backend", cfg.get("_target_", "?")))
        self.model = str(cfg.get("model", "?"))
        self.structured_output = bool(cfg.get(STRUCTURED, False))
        if self.structured_output:
            why = structured_output_refusal(cfg)
            if why:
                raise ValueError(why)
        if str(cfg.get("_target_", "")).endswith("llm.local.LocalLLM"):  # from the config alone, before any load
            from kgreason.llm.local import LLAMACPP_ONLY, llamacpp_settings_refusal

            # only the keys it judges: reading the whole node would resolve every interpolation in it
            why = llamacpp_settings_refusal(_local_route(cfg), {k: cfg.get(k) for k in LLAMACPP_ONLY if k in cfg})
            if why:
                raise ValueError(why)

    def get(self):
        if self._llm is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError(f"LLM {self.model} was used after the run closed it")
                if self._llm is None:
                    self._llm = build_llm(self._cfg, self._cache_cfg, self._workers, self._call_log)
        return self._llm

    def resolved_model(self) -> str:
        """The name the built model answers under (it builds the model): the config's ``model``
        can name several variants, e.g. ``qwen2.5-coder-1.5b-instruct`` in bfloat16, in float32
        (``…@float32``) or through llama.cpp (``…@llamacpp``), whose outputs must not share a
        SubQRAG index. ``model`` itself stays the config's name (no build)."""
        return str(getattr(self.get(), "model", self.model))

    @property
    def built(self) -> bool:
        return self._llm is not None

    def generate(self, requests):
        llm = self.get()
        if not self.structured_output:
            requests = without_schema(requests)
        with progress.llm_calls(len(requests)):  # shown as llm_in_flight by the example progress
            return llm.generate(requests)

    def score(self, prompt, candidates):
        llm = self.get()
        with progress.llm_calls(1):
            return llm.score(prompt, candidates)

    def close(self) -> None:
        """Close the built LLM (its call-store files, the backend); idempotent."""
        with self._lock:
            self._closed = True
            llm, self._llm = self._llm, None
        close = getattr(llm, "close", None)
        if callable(close):
            close()


__all__ = ["DeferredHF", "LazyLLM", "build_llm"]
