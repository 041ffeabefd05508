"""The run's text embedder (kgreason/embed.py): lazy, offline, and the same vectors as the model
card's recipe (mean pooling over the attention mask, then L2 normalisation)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from kgreason.embed import Embedder, minilm_path

TEXTS = ["Where was the director of Alien born?", "Ridley Scott was born in South Shields.", "x",
         "", "word " * 400]  # empty text and one past the 256-token cap


def test_construction_loads_nothing_and_close_is_idempotent():
    emb = Embedder()
    assert not emb.loaded
    emb.close()
    emb.close()
    assert not emb.loaded


def test_vectors_equal_model_card_mean_pooling():
    """sentence-transformers on the packaged directory = the all-MiniLM-L6-v2 model card recipe,
    written out here with plain transformers, to 1e-5."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = str(minilm_path())
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    batch = tok(TEXTS, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    ref = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=1).numpy()
    got = Embedder().encode(TEXTS)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
    assert np.abs(got - ref).max() < 1e-5


@pytest.mark.slow
def test_loads_offline(tmp_path):
    """With HF_HUB_OFFLINE=1 and an empty HF home the packaged model still loads (no download)."""
    code = ("from kgreason.embed import Embedder; e = Embedder(); v = e.encode(['a b c']); "
            "print(v.shape, e.dim)")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), TRANSFORMERS_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "(1, 384) 384"


def test_the_dimension_is_read_without_a_deprecation_warning():
    """sentence-transformers renamed ``get_sentence_embedding_dimension`` to
    ``get_embedding_dimension`` and warns on the old name: every rag run and bundle replay printed
    that FutureWarning (two lines on stderr) before its first example."""
    import warnings

    emb = Embedder()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        assert emb.dim == 384
    emb.close()
