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


def test_a_deferred_gguf_path_that_is_missing_here_still_names_the_model(tmp_path):
    """A run made with ``llm=local llm.gguf_path=<file>`` replays on a machine without that file:
    the name its calls were keyed under is the file's stem (or ``llm.model``), known from the path
    alone; the file is looked for only on a call the store misses, and then its absence is the error."""
    import pytest

    gone = tmp_path / "weights" / "my-model-q4.gguf"
    llm = LocalLLM(route="llamacpp", gguf_path=str(gone), defer_load=True)
    assert llm._impl is None and llm.model.startswith("my-model-q4")
    named = LocalLLM(route="llamacpp", gguf_path=str(gone), model="mine", defer_load=True)
    assert named.model.startswith("mine")
    with pytest.raises(FileNotFoundError, match="no such file"):
        llm.impl  # a miss: the file is needed now
    with pytest.raises(FileNotFoundError, match="no such file"):
        LocalLLM(route="llamacpp", gguf_path=str(gone))  # not a replay: refused at once, as before
