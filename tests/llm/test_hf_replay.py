"""A readonly replay (``kgreason bundle replay``) of an ``llm=hf`` run needs no weights: it answers
from the bundle's store under the key :class:`~kgreason.llm.hf.HFCausalLM` gives (backend ``hf``,
the configured model name, ``max_input_tokens``). It loaded the model first, so a reviewer without
the checkpoint got an OSError on every example (checked as a user would: an hf run bundled, its
model dir moved away, the bundle replayed). The key equality with a real HFCausalLM is checked on a
tiny model in tests/llm/test_hf.py (slow)."""

from __future__ import annotations

import pytest

from kgreason.llm.base import CacheMiss
from kgreason.llm.lazy import build_llm
from kgreason.llm.cache import CallStore, cache_key, request_json
from kgreason.types import ChatRequest


def test_a_readonly_hf_replay_answers_from_the_store_without_the_model(tmp_path):
    cfg = {"_target_": "kgreason.llm.hf.HFCausalLM", "model": str(tmp_path / "gone"), "device": "cpu",
           "dtype": "auto", "batch_size": 8, "max_input_tokens": 4096, "trust_remote_code": False}
    req = ChatRequest.of("Which company produced The Hollow Orchard?", max_tokens=8)
    key = cache_key("hf", cfg["model"], "generate", request_json(req), {"max_input_tokens": 4096})
    store = CallStore.open(str(tmp_path / "cache"), mode="readwrite")
    store.put(key, {"texts": ["Favark Pictures"], "usage": {"calls": 1}}, backend="hf", model=cfg["model"],
              method="generate")
    store.close()
    llm = build_llm(cfg, {"dir": str(tmp_path / "cache"), "mode": "readonly"})
    try:
        assert llm.generate([req])[0].text == "Favark Pictures"
        with pytest.raises(CacheMiss):  # a call the store cannot serve is a miss, not a model load
            llm.generate([ChatRequest.of("another question", max_tokens=8)])
    finally:
        llm.close()
