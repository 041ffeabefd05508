"""LogosKG-Large: degree-aware partitions on disk, cross-graph routing, LRU cache
(logoskg.txt §3.4, Algorithm 1, Table 3).

* **Partitioning** (:func:`build_partitions`): subject entities are sorted by out-degree
  (descending) and assigned greedily to the currently least-loaded partition (load = triples),
  so high-degree subjects are spread evenly; all triples of a subject land in one partition.
  Built from the memory-mapped triple arrays with compiled counting sorts, one partition
  at a time (bounded memory at PKG scale). Each partition ``part_{i:05d}.npz`` holds the local CSR of its subjects
  (``keys`` sorted subject ids, ``indptr``, ``tids`` global triple ids, ``heads``, ``rels``,
  ``tails``); ``meta.json`` + ``entity_partition.npy`` (``(n,)`` int32, ``-1`` = no triples) is
  the metadata map ``P: E → {0..M-1}``.
* **Directions**: ``out`` routes by subject as in the paper. ``in`` and ``both`` are supported
  by a second partitioning keyed by the object (``by_tail/``), built the same way; ``both``
  consults both layouts, which share one LRU cache (cache keys are ``(layout, partition)``).
* **Routing** (Algorithm 1, lines 3–8): at each hop the active entities are grouped by
  partition via ``P``; each needed partition is fetched from the cache (loaded from disk on a
  miss, evicting the least-recently-used one when full) and expanded locally; the local results
  are merged into the next global query vector.
* **Batching**: :meth:`PartitionedRetriever.retrieve_many` reorders queries by the partition set
  of their seeds so queries with similar subgraph needs run back to back, then restores order.
* **Backends** (``backend``; Table 3's "Exp. 4: backend"): how a partition's local expansion
  (Alg. 1, line 6: the active subjects' triples in the partition's local CSR) is computed.
  ``numpy`` (default: vectorised index ranges), ``numba`` (a compiled loop over the active rows),
  ``scipy`` (the partition's incidence matrix, built when it is loaded, times the active rows'
  indicator vector: the paper's "local retrieval within each subgraph using incidence matrices"),
  ``torch`` / ``torch_cuda`` (the partition's arrays as tensors on the CPU or the GPU when loaded;
  the rows gathered with ``repeat_interleave``). Every backend activates the same triples and
  reaches the same entities (tests/retrieval/test_partition_store.py); the routing, the cache and
  the merge are shared.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
import time
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np
from numba import njit

from kgreason.storage.embedstore import (StoreNoSpace, clean_stale_tmp, no_space_error, out_of_space, reserved_npy,
                                         store_lock)
from kgreason.textio import InputFileError
from kgreason.kg.store import KG
from kgreason.retrieval.base import Direction, GraphRetriever, QueryTimeout
from kgreason.types import Subgraph

LAYOUTS = {"by_head": "heads", "by_tail": "tails"}


@njit(cache=True)
def _count(key, n):  # pragma: no cover - jitted
    deg = np.zeros(n, dtype=np.int64)
    for i in range(len(key)):
        deg[key[i]] += 1
    return deg


@njit(cache=True)
def _greedy(ents, degree, n_partitions, part):  # pragma: no cover - jitted
    """Least-loaded greedy over ``ents`` (already in degree order) with a binary min-heap keyed
    by ``(load, partition id)`` — the same choices as ``heapq`` on ``(load, p)`` tuples."""
    load = np.zeros(n_partitions, dtype=np.int64)
    heap = np.arange(n_partitions)  # heap of partition ids
    for j in range(len(ents)):
        e = ents[j]
        p = heap[0]
        part[e] = p
        load[p] += degree[e]
        i = 0  # sift the root down
        while True:
            c = 2 * i + 1
            if c >= n_partitions:
                break
            if c + 1 < n_partitions and (load[heap[c + 1]] < load[heap[c]] or
                                         (load[heap[c + 1]] == load[heap[c]] and heap[c + 1] < heap[c])):
                c += 1
            if load[heap[c]] < load[heap[i]] or (load[heap[c]] == load[heap[i]] and heap[c] < heap[i]):
                heap[i], heap[c] = heap[c], heap[i]
                i = c
            else:
                break


@njit(cache=True)
def _group_by(key, indptr, out):  # pragma: no cover - jitted
    """Stable counting sort: ``out[indptr[k]:indptr[k+1]]`` = positions i with key[i] == k, ascending."""
    pos = indptr[:-1].copy()
    for i in range(len(key)):
        k = key[i]
        out[pos[k]] = i
        pos[k] += 1


@njit(cache=True)
def _gather(keys, indptr, order, out):  # pragma: no cover - jitted
    o = 0
    for j in range(len(keys)):
        k = keys[j]
        for t in range(indptr[k], indptr[k + 1]):
            out[o] = order[t]
            o += 1


@njit(cache=True)
def _expand_rows(indptr, loc, tids, far, out_t, out_e):  # pragma: no cover - jitted
    """The ``numba`` backend: the triples of local rows ``loc`` (ids and far ends), in row order."""
    o = 0
    for j in range(len(loc)):
        for t in range(indptr[loc[j]], indptr[loc[j] + 1]):
            out_t[o] = tids[t]
            out_e[o] = far[t]
            o += 1


#: local-expansion backends of the partitioned engine (module docstring, "Backends")
BACKENDS = ("numpy", "numba", "scipy", "torch", "torch_cuda")


def assign_partitions(degree: np.ndarray, n_partitions: int) -> np.ndarray:
    """Degree-aware greedy assignment (§3.4): ``(n,)`` degrees → ``(n,)`` int32 partition ids,
    ``-1`` for entities of degree 0. Entities are taken by degree (desc, ties by id) and each goes
    to the least-loaded partition (ties: lowest id). O(|E| log |E|) for the sort, then a compiled
    O(|E| log M) heap loop (54M entities in seconds)."""
    degree = np.asarray(degree)
    part = np.full(len(degree), -1, dtype=np.int32)
    ents = np.flatnonzero(degree > 0)
    ents = ents[np.argsort(-degree[ents], kind="stable")]  # ents ascending → ties by id
    _greedy(ents, degree.astype(np.int64, copy=False), int(n_partitions), part)
    return part


def kg_digest(kg: KG) -> str:
    """SHA-256 over what the partitions are made of: the entity count and the head, relation and
    tail id arrays (names do not enter a partition). ``meta.json`` keeps it, so a directory built
    for another KG of the same size is refused rather than read."""
    h = hashlib.sha256(f"{kg.n_entities}:{kg.n_triples}".encode())
    step = 1 << 22  # in slices, so a memory-mapped PKG-size array is never copied whole
    for arr in (kg.heads, kg.rels, kg.tails):
        for s in range(0, len(arr), step):
            h.update(np.ascontiguousarray(arr[s:s + step], dtype=np.int64).tobytes())
    return h.hexdigest()


def build_partitions(kg: KG, directory: str | Path, n_partitions: int, layouts=("by_head", "by_tail"),
                     digest: str | None = None) -> Path:
    """Write the partitioned KG under ``directory`` (one sub-directory per layout).
    ``digest``: the KG's :func:`kg_digest` for ``meta.json`` (computed here when None; ``""``
    writes none, for a directory nobody opens with the check).

    Works from the (memory-mapped) triple arrays without sorting them: degrees by a compiled
    count, a stable counting sort of triple ids by key (O(m), int32/int64 ids written to a
    temporary ``.npy`` memmap in the layout directory, deleted afterwards), then one partition at
    a time is gathered and saved, so peak memory is ~O(n + m/M) on top of the mapped arrays.
    Partitions hold each key's triples in ascending triple-id order (as ``lexsort`` would give).
    """
    d = Path(directory)
    n, m = kg.n_entities, kg.n_triples
    digest = kg_digest(kg) if digest is None else digest
    tid_dtype = np.int32 if m < 2**31 else np.int64
    heads, rels, tails = (np.asarray(a) for a in (kg.heads, kg.rels, kg.tails))
    for layout in layouts:
        key = {"by_head": heads, "by_tail": tails}[layout]
        ld = d / layout
        ld.mkdir(parents=True, exist_ok=True)
        degree = _count(key, n)
        ent_part = assign_partitions(degree, n_partitions)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(degree, out=indptr[1:])
        del degree
        tmp = ld / "_order.tmp.npy"
        # its bytes reserved first: a sparse map on a full disk dies of SIGBUS (issue 57 M4)
        order = reserved_npy(tmp, tid_dtype, (m,), what="partitioned KG") if m else np.zeros(0, tid_dtype)
        _group_by(key, indptr, order)
        # entities grouped by partition, ascending ids within each (counting sort again)
        has = ent_part >= 0
        pcount = np.bincount(ent_part[has], minlength=n_partitions).astype(np.int64)
        pptr = np.zeros(n_partitions + 1, dtype=np.int64)
        np.cumsum(pcount, out=pptr[1:])
        by_part = _entities_by_partition(ent_part, pptr)
        sizes = []
        for p in range(n_partitions):
            keys = by_part[pptr[p]:pptr[p + 1]]
            lens = indptr[keys + 1] - indptr[keys]
            loc = np.zeros(len(keys) + 1, dtype=np.int64)
            np.cumsum(lens, out=loc[1:])
            tids = np.empty(int(loc[-1]), dtype=np.int64)
            _gather(keys, indptr, order, tids)
            np.savez(ld / f"part_{p:05d}.npz", keys=keys.astype(np.int32), indptr=loc, tids=tids,
                     heads=heads[tids], rels=rels[tids], tails=tails[tids])
            sizes.append(int(len(tids)))
            del tids, keys, lens, loc
        del order
        if m:
            tmp.unlink()
        np.save(ld / "entity_partition.npy", ent_part)
        (ld / "meta.json").write_text(json.dumps({
            "layout": layout, "n_partitions": n_partitions, "n_entities": n,
            "n_triples": m, "partition_triples": sizes, "kg_digest": digest or None,
        }))
    return d


def _entities_by_partition(ent_part: np.ndarray, pptr: np.ndarray) -> np.ndarray:
    out = np.empty(int(pptr[-1]), dtype=np.int64)
    _scatter_parts(ent_part, pptr, out)
    return out


@njit(cache=True)
def _scatter_parts(ent_part, pptr, out):  # pragma: no cover - jitted
    pos = pptr[:-1].copy()
    for e in range(len(ent_part)):
        p = ent_part[e]
        if p >= 0:
            out[pos[p]] = e
            pos[p] += 1


_NPZ_LAYOUTS: dict[tuple, list] = {}   # (path, size, mtime) -> [(key, offset, dtype, shape, order)]


def _npz_layout(path: Path) -> list:
    """Where each member's array data sits inside an uncompressed ``.npz`` (parsed once per file
    version: partitions do not change after they are written)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _NPZ_LAYOUTS:
        return _NPZ_LAYOUTS[key]
    layout = []
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        for info in zf.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                raise ValueError(f"{path}: member {info.filename} is compressed; partitions must be "
                                 "written with np.savez (stored), not np.savez_compressed")
            f.seek(info.header_offset)
            name_len, extra_len = struct.unpack("<HH", f.read(30)[26:30])
            f.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            layout.append((name, f.tell(), dtype, shape, "F" if fortran else "C"))
    _NPZ_LAYOUTS[key] = layout
    return layout


def map_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Memory-map every array of an uncompressed ``.npz`` (what :func:`numpy.savez` writes).

    ``np.load(..., mmap_mode=...)`` reads ``.npz`` members eagerly; here the file is mapped once
    read-only and each member is a view at its ``.npy`` payload (located from the zip's local
    headers, parsed once per file), so opening a partition costs one ``mmap`` and a hop reads
    only the pages it touches. A compressed member is an error naming the file.
    """
    path = Path(path)
    layout = _npz_layout(path)
    buf = np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)
    out: dict[str, np.ndarray] = {}
    for name, offset, dtype, shape, order in layout:
        if int(np.prod(shape)) == 0:
            out[name] = np.zeros(shape, dtype=dtype)
        else:
            out[name] = np.ndarray(shape, dtype=dtype, buffer=buf, offset=offset, order=order)
    return out


class LRUCache:
    """Fixed-capacity least-recently-used cache of loaded partitions (§3.4).

    Attributes:
        loads, hits, evictions: counters; ``evicted``: keys in eviction order.
    """

    def __init__(self, capacity: int, loader) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._loader = loader
        self._data: OrderedDict = OrderedDict()
        self.loads = self.hits = self.evictions = 0
        self.evicted: list = []

    def get(self, key):
        if key in self._data:
            self._data.move_to_end(key)
            self.hits += 1
            return self._data[key]
        value = self._loader(key)
        self.loads += 1
        if len(self._data) >= self.capacity:
            old, _ = self._data.popitem(last=False)
            self.evictions += 1
            self.evicted.append(old)
        self._data[key] = value
        return value

    def keys(self) -> list:
        """Cached keys, least recently used first."""
        return list(self._data)

    def reset_stats(self) -> None:
        self.loads = self.hits = self.evictions = 0
        self.evicted = []


class PartitionedRetriever(GraphRetriever):
    """LogosKG-Large k-hop retrieval (Algorithm 1) over on-disk partitions with an LRU cache.

    Args:
        kg: the KG (used to build partitions when ``directory`` has none, and for triple rows).
        n_partitions: M, number of subgraphs.
        cache_size: n, partitions held in memory.
        load: ``mmap`` (default): a cache load maps the partition's arrays and a hop reads only
            the pages it touches; ``read``: a load reads the whole partition into memory.
        directory: where partitions live; ``None`` = a fresh temporary directory. A directory that
            holds partitions is opened only if they were built for this KG (``meta.json``'s
            :func:`kg_digest`), else refused; a missing layout is built under a lock.
        backend: how a partition's local expansion is computed: ``numpy`` (default) | ``numba`` |
            ``scipy`` | ``torch`` | ``torch_cuda`` (module docstring, "Backends"; LogosKG Table 3,
            Exp. 4). The same triples and entities with each.
        check_kg: compare ``directory``'s partitions with this KG (one pass over its id arrays).
            ``False`` only where the caller built them from the same KG itself and must not page the
            arrays in (``python -m kgreason.bench.scale`` measures the query phase's memory).
        (others): see :class:`~kgreason.retrieval.base.GraphRetriever`. All directions are
            supported (``in``/``both`` use the object-keyed layout, see the module docstring).
    """

    name = "partitioned"

    def __init__(self, kg: KG, *, n_partitions: int = 8, cache_size: int = 2,
                 directory: str | None = None, load: str = "mmap", check_kg: bool = True, backend: str = "numpy",
                 **kw) -> None:
        super().__init__(kg, **kw)
        if load not in ("mmap", "read"):
            raise ValueError(f"PartitionedRetriever: load must be 'mmap' or 'read', got {load!r}")
        if backend not in BACKENDS:
            raise ValueError(f"PartitionedRetriever: backend must be one of {' | '.join(BACKENDS)}, got {backend!r}")
        if backend == "torch_cuda":
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError(f"PartitionedRetriever(backend='torch_cuda'): torch {torch.__version__} sees no "
                                   "CUDA device; use backend=torch for the CPU")
        self.load, self.backend = load, backend
        self.n_partitions = int(n_partitions)
        # a directory the user named is a store that outlives the run: checked against this KG,
        # built under a lock, each layout in a temporary dir renamed into place (storage/__init__.py)
        digest = kg_digest(kg) if check_kg and directory is not None else ""
        if directory is None:  # fresh: nothing in it to check
            self._tmp = tempfile.TemporaryDirectory(prefix="kgreason-parts-")
            directory = self._tmp.name
        self.directory = Path(directory)
        self.entity_partition = {}
        for lo in self._layouts():
            self.entity_partition[lo] = self._open_layout(kg, lo, digest)
        self.cache = LRUCache(cache_size, self._load)

    def _open_layout(self, kg: KG, layout: str, digest: str) -> np.ndarray:
        ld = self.directory / layout
        if not (ld / "meta.json").exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            with store_lock(self.directory / f"{layout}.lock", f"LogosKG-Large partitions {ld}"):
                if not (ld / "meta.json").exists():  # else built by the run this one waited for
                    clean_stale_tmp(self.directory, held=layout)  # builds stopped by kill -9 or a signal
                    tmp = self.directory / f"{layout}.tmp.{os.getpid()}"
                    try:
                        build_partitions(kg, tmp, self.n_partitions, layouts=(layout,), digest=digest)
                        if ld.exists():
                            shutil.rmtree(ld)  # an incomplete build (no meta.json)
                        os.replace(tmp / layout, ld)
                    except OSError as e:
                        # a full disk while the partition files are written (np.savez's short
                        # write has no errno): one line naming the dir, as the compiled KG does
                        if out_of_space(e) and not isinstance(e, StoreNoSpace):
                            # each triple once: its id (int64) and its head, relation and tail
                            per = 8 + sum(np.dtype(getattr(kg, a).dtype).itemsize for a in ("heads", "rels", "tails"))
                            raise no_space_error(self.directory, kg.n_triples * per,
                                                 f"LogosKG-Large partitions ({layout})", e, at_least=True) from None
                        raise
                    finally:
                        shutil.rmtree(tmp, ignore_errors=True)
        meta = json.loads((ld / "meta.json").read_text())
        # a user error, so the command line says it in one line (kgreason/app.py is_user_error)
        if digest and meta.get("kg_digest") != digest:
            raise InputFileError(ld / "meta.json", None, f"these partitions were built for another KG "
                                 f"({meta.get('n_triples')} triples, digest {str(meta.get('kg_digest'))[:12]}; this "
                                 f"KG's is {digest[:12]}); remove {self.directory} or set retriever.directory to "
                                 f"another dir")
        if not digest and meta["n_triples"] != kg.n_triples:
            raise InputFileError(ld / "meta.json", None, f"built for {meta['n_triples']} triples, this KG has "
                                 f"{kg.n_triples}")
        if meta["n_partitions"] != self.n_partitions:
            raise InputFileError(ld / "meta.json", None, f"built for {meta['n_partitions']} partitions, expected "
                                 f"{self.n_partitions} (retriever.n_partitions); remove {self.directory} or set "
                                 f"retriever.directory to another dir")
        return np.load(ld / "entity_partition.npy")

    def _layouts(self) -> list[str]:
        return {Direction.OUT: ["by_head"], Direction.IN: ["by_tail"],
                Direction.BOTH: ["by_head", "by_tail"]}[self.direction]

    def _load(self, key):
        """Bring partition ``key`` into the cache: ``read`` copies its arrays into memory,
        ``mmap`` maps them (the OS pages in what the hops touch)."""
        layout, p = key
        path = self.directory / layout / f"part_{p:05d}.npz"
        if self.load == "mmap":
            part = map_npz(path)
        else:
            with np.load(path) as z:
                part = {k: z[k] for k in z.files}
        far = "tails" if layout == "by_head" else "heads"
        if self.backend == "scipy":  # the partition's (local rows × local triples) incidence matrix
            from scipy.sparse import csr_matrix

            nnz = len(part["tids"])
            part["incidence"] = csr_matrix((np.ones(nnz, dtype=np.int8), np.arange(nnz, dtype=np.int64),
                                            np.asarray(part["indptr"], dtype=np.int64)), shape=(len(part["keys"]), nnz))
        elif self.backend in ("torch", "torch_cuda"):
            import torch

            dev = "cuda" if self.backend == "torch_cuda" else "cpu"
            part["torch"] = {k: torch.from_numpy(np.array(part[k], dtype=np.int64)).to(dev)  # a copy: mmaps are read-only
                             for k in ("keys", "indptr", "tids", "rels", far)}
        return part

    def _local(self, part, ents: np.ndarray, far: str, rel_mask) -> tuple[np.ndarray, np.ndarray]:
        """Alg. 1, line 6, in one partition: ``(triple ids, far ends)`` of the rows of ``ents``
        (sorted subjects the partition holds), by this retriever's backend."""
        if self.backend in ("torch", "torch_cuda"):
            import torch

            t = part["torch"]
            e = torch.from_numpy(np.ascontiguousarray(ents, dtype=np.int64)).to(t["keys"].device)
            loc = torch.searchsorted(t["keys"], e)
            starts, lens = t["indptr"][loc], t["indptr"][loc + 1] - t["indptr"][loc]
            offs = torch.repeat_interleave(starts - torch.cumsum(lens, 0) + lens, lens)
            idx = offs + torch.arange(int(lens.sum()), device=offs.device)
            if rel_mask is not None:
                idx = idx[torch.from_numpy(rel_mask).to(idx.device)[t["rels"][idx]]]
            return t["tids"][idx].cpu().numpy(), t[far][idx].cpu().numpy()
        loc = np.searchsorted(part["keys"], ents)
        if self.backend == "scipy":
            from scipy.sparse import csr_matrix

            q = csr_matrix((np.ones(len(loc), dtype=np.int8), (np.zeros(len(loc), dtype=np.int64), loc)),
                           shape=(1, part["incidence"].shape[0]))
            idx = np.sort((q @ part["incidence"]).indices).astype(np.int64)
        elif self.backend == "numba":
            indptr = np.asarray(part["indptr"])
            n = int((indptr[loc + 1] - indptr[loc]).sum())
            out_t, out_e = np.empty(n, dtype=part["tids"].dtype), np.empty(n, dtype=part[far].dtype)
            _expand_rows(indptr, loc.astype(np.int64), part["tids"], part[far], out_t, out_e)
            if rel_mask is None:
                return out_t, out_e
            keep = rel_mask[self.kg.rels[out_t]]
            return out_t[keep], out_e[keep]
        else:
            starts, ends = part["indptr"][loc], part["indptr"][loc + 1]
            lens = ends - starts
            idx = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
        if rel_mask is not None:
            idx = idx[rel_mask[part["rels"][idx]]]
        return part["tids"][idx], part[far][idx]

    @property
    def loads(self) -> int:
        return self.cache.loads

    @property
    def hits(self) -> int:
        return self.cache.hits

    @property
    def evictions(self) -> int:
        return self.cache.evictions

    def stats(self) -> dict:
        return {"loads": self.cache.loads, "hits": self.cache.hits, "evictions": self.cache.evictions,
                "cache_size": self.cache.capacity, "n_partitions": self.n_partitions, "backend": self.backend}

    def _hop(self, active, rel_mask, deadline):
        # merged global t^(h) and q^(h+1) (Alg. 1, line 7): the partitions' local results are
        # concatenated and de-duplicated, so the cost follows the activated triples, not n or m
        tparts, eparts = [], []
        for layout in self._layouts():
            part_of = self.entity_partition[layout][active]
            ok = part_of >= 0
            ents, pids = active[ok], part_of[ok]
            for p in np.unique(pids).tolist():
                if deadline is not None and time.perf_counter() > deadline:
                    raise QueryTimeout
                part = self.cache.get((layout, p))
                tids, far = self._local(part, ents[pids == p], "tails" if layout == "by_head" else "heads", rel_mask)
                tparts.append(tids)
                eparts.append(far)
        if not tparts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        return (np.unique(np.concatenate(tparts)).astype(np.int64, copy=False),
                np.unique(np.concatenate(eparts)).astype(np.int32, copy=False))

    def retrieve_many(self, seed_sets: Sequence[Sequence[int]], hops: int,
                      relations: Sequence[int] | None = None) -> list[Subgraph]:
        """Cache-aware batch (§3.4): queries sorted by the partition set of their seeds, answered
        in that order, returned in the caller's order."""
        lo = self._layouts()[0]

        def key(i):
            s = np.asarray(seed_sets[i], dtype=np.int64)
            return tuple(np.unique(self.entity_partition[lo][s]).tolist()) if len(s) else ()

        order = sorted(range(len(seed_sets)), key=lambda i: (key(i), i))
        out: list[Subgraph | None] = [None] * len(seed_sets)
        for i in order:
            out[i] = self.retrieve(seed_sets[i], hops, relations)
        return out  # type: ignore[return-value]
