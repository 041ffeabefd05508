"""Dense text retrieval: exact cosine top-k over a fixed list of texts (passages or verbalised
triples) with the run's :class:`~kgreason.embed.Embedder` (all-MiniLM-L6-v2; vectors are unit
norm, so one matrix product gives the cosines).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kgreason.embed import Embedder
from kgreason.retrieval.base import Hit


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

    def __init__(self, texts: Sequence[str], embedder: Embedder) -> None:
        self.texts = list(texts)
        self.embedder = embedder
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
