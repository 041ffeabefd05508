"""A readonly replay (``kgreason bundle replay``) of a run made with the default ``llm=local``
(SmolLM2, shipped as a package) loads no model: it answers from the bundle's store under the
model's name. It converted the GGUF into ``paths.models`` (a transformers copy, ~25 s on 2 cores)
before a replay that then made zero calls (checked as a user would, with KGREASON_MODEL_DIR empty);
the named models (Qwen) were already deferred (kgreason/llm/lazy.py)."""

from __future__ import annotations

from kgreason.llm.local import LocalLLM


def test_a_deferred_default_model_converts_and_loads_nothing(tmp_path):
    llm = LocalLLM(cache_dir=str(tmp_path / "models"), defer_load=True)
    assert llm._impl is None and not (tmp_path / "models").exists()
    assert llm.model.startswith("SmolLM2")  # the name its cache keys were made under, known without loading
