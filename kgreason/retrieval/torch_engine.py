"""PyTorch backend of the LogosKG engine (logoskg.txt §3.3, Table 2 "LogosKG (Torch)").

A hop is LogosKG's two products, ``t = q·SUB`` (activated triples, Eq. 5) and ``q' = t·OBJ``
(reached entities, Eq. 4), computed so that its cost follows the edges the query touches, not the
size of the graph (issue 60): the engine keeps the KG's CSR rows (``kg.out_csr`` / ``kg.in_csr``:
triple ids grouped by head / tail) as tensors on its device and, per hop, gathers only the rows of
the active frontier:

* the frontier of a batch of B queries is a list of ``(query, entity)`` pairs;
* each pair expands to its CSR row (``repeat_interleave`` of the row lengths), giving
  ``(query, triple)`` pairs: the nonzeros of ``q·SUB`` for the whole batch (a relation filter keeps
  those whose relation is allowed);
* the other end of each triple gives ``(query, entity)`` pairs: the nonzeros of ``t·OBJ``;
  ``torch.unique`` on the key ``query·n + entity`` sorts them query-major and drops duplicates;
* BFS semantics (``within``/``exact``) drop the pairs already visited (``torch.isin`` against the
  sorted visited keys of the batch, themselves only as large as the work done so far).

No tensor of the graph's size is allocated or touched per query; the CSR tensors are built once.
``kernel: spmm`` keeps the earlier engine (a sparse × dense product over the whole incidence matrix
per hop, ``(n, B)`` dense frontier), for comparison in the bench only: its time grows with the
graph (51× at 100× size on an H200, ../shared/gpu). For ``in`` the roles of head and tail swap;
``both`` takes the union. ``torch`` is imported lazily.
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import Sequence

import numpy as np

from kgreason.retrieval.base import Direction, GraphRetriever, QueryTimeout, Semantics
from kgreason.types import Subgraph

KERNELS = ("gather", "spmm")


class TorchRetriever(GraphRetriever):
    """k-hop retrieval with torch on CPU or CUDA, by gathering the frontier's CSR rows.

    Args:
        device: ``"cpu"`` or ``"cuda"`` (any torch device string).
        batch_size: maximum seed sets per batch in :meth:`retrieve_many`.
        kernel: ``gather`` (default: expand the active entities' CSR rows; cost follows the edges
            touched) or ``spmm`` (the earlier whole-matrix sparse × dense product per hop; cost
            grows with the graph; kept for the bench's side-by-side figures).
        layout: sparse layout of the ``spmm`` kernel's matrices: ``csr``, ``coo`` or ``auto`` (CSR
            on CUDA, COO on CPU: in the torch 2.13 CPU build a CSR × dense product measured ~80×
            slower than ``torch.sparse.mm`` on coalesced COO). Unused by ``gather``.
        (others): see :class:`~kgreason.retrieval.base.GraphRetriever`.

    >>> from kgreason.kg.store import KG
    >>> kg = KG.from_triples([("A", "r", "B"), ("B", "r", "C")])
    >>> TorchRetriever(kg).retrieve([0], 2).entities().tolist()
    [1, 2]
    """

    name = "torch"

    def __init__(self, kg, *, device: str = "cpu", batch_size: int = 64, kernel: str = "gather",
                 layout: str = "auto", **kw) -> None:
        super().__init__(kg, **kw)
        if layout not in ("auto", "csr", "coo"):
            raise ValueError(f"layout must be auto | csr | coo, got {layout!r}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {' | '.join(KERNELS)}, got {kernel!r}")
        if str(device).startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError(
                    f"TorchRetriever(device={device!r}): torch {torch.__version__} sees no CUDA device "
                    "(a CPU build, or no GPU). Use retriever=torch for the CPU engine, or install a CUDA "
                    "build of torch into .venv before `make setup` (README).")
        self.device = device
        self.layout = layout
        self.kernel = kernel
        self.batch_size = int(batch_size)

    @cached_property
    def _torch(self):
        import torch

        return torch

    # ------------------------------------------------------------------ device tensors (built once)
    def _kg_col(self, name: str):
        """``kg.heads`` / ``kg.rels`` / ``kg.tails`` as int64 tensors on the engine's device (cached)."""
        cache = self.__dict__.setdefault("_kg_cols", {})
        if name not in cache:
            cache[name] = self._torch.from_numpy(np.ascontiguousarray(getattr(self.kg, name), dtype=np.int64)).to(self.device)
        return cache[name]

    @cached_property
    def _rows(self):
        """Per direction: ``(indptr (n+1,), triple ids (m,), column of the far end)`` on the device."""
        torch = self._torch
        out = {}
        for d, csr, far in ((Direction.OUT, self.kg.out_csr, "tails"), (Direction.IN, self.kg.in_csr, "heads")):
            indptr, tids = csr
            out[d] = (torch.from_numpy(np.ascontiguousarray(indptr, dtype=np.int64)).to(self.device),
                      torch.from_numpy(np.ascontiguousarray(tids, dtype=np.int64)).to(self.device), far)
        return out

    def _dirs(self) -> list[Direction]:
        return [Direction.OUT, Direction.IN] if self.direction is Direction.BOTH else [self.direction]

    def _keep_rel(self, rel_mask):
        if rel_mask is None:
            return None
        return self._torch.from_numpy(rel_mask).to(self.device)

    # ------------------------------------------------------------------ the gather kernel
    def _expand(self, qidx, ent, keep):
        """``(query, entity)`` frontier pairs → the batch's ``(query, triple)`` and ``(query,
        far entity)`` pairs of one hop (unsorted, possibly repeated under ``both``)."""
        torch = self._torch
        qs, ts, fs = [], [], []
        for d in self._dirs():
            indptr, order, far = self._rows[d]
            start = indptr[ent]
            cnt = indptr[ent + 1] - start
            total = int(cnt.sum()) if len(cnt) else 0
            if total == 0:
                continue
            rep = torch.repeat_interleave(torch.arange(len(ent), device=self.device), cnt, output_size=total)
            first = torch.cumsum(cnt, 0) - cnt
            pos = torch.arange(total, device=self.device) - first[rep] + start[rep]
            tids = order[pos]
            q = qidx[rep]
            if keep is not None:
                ok = keep[self._kg_col("rels")[tids]]
                tids, q = tids[ok], q[ok]
            qs.append(q)
            ts.append(tids)
            fs.append(self._kg_col(far)[tids])
        if not qs:
            empty = torch.zeros(0, dtype=torch.int64, device=self.device)
            return empty, empty, empty
        return torch.cat(qs), torch.cat(ts), torch.cat(fs)

    def _hop(self, active, rel_mask, deadline):
        torch = self._torch
        if len(active) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        if self.kernel == "spmm":
            return self._hop_spmm(active, rel_mask)
        ent = torch.from_numpy(np.asarray(active, dtype=np.int64)).to(self.device)
        q = torch.zeros(len(ent), dtype=torch.int64, device=self.device)
        _, tids, far = self._expand(q, ent, self._keep_rel(rel_mask))
        return (torch.unique(tids).cpu().numpy(),
                torch.unique(far).to(torch.int32).cpu().numpy())

    # --------------------------------------------------------------- batched mode
    def retrieve_many(
        self, seed_sets: Sequence[Sequence[int]], hops: int, relations: Sequence[int] | None = None
    ) -> list[Subgraph]:
        """Batched k-hop retrieval: up to ``batch_size`` seed sets per batch, one gather per hop
        for the whole batch; results equal ``[self.retrieve(s, hops, relations) for s in seed_sets]``.

        The time limit applies to the batch as ``timeout_ms × B``; when it passes, every query of
        the batch keeps the hops completed so far and is marked ``timed_out``.
        """
        out: list[Subgraph] = []
        run = self._retrieve_batch if self.kernel == "gather" else self._retrieve_batch_spmm
        for i in range(0, len(seed_sets), max(1, self.batch_size)):
            out.extend(run(seed_sets[i:i + self.batch_size], hops, relations))
        return out

    def _retrieve_batch(self, seed_sets, hops, relations):
        torch = self._torch
        B, n, m = len(seed_sets), self.kg.n_entities, self.kg.n_triples
        if B == 0:
            return []
        deadline = None if self.timeout_ms is None else time.perf_counter() + B * self.timeout_ms / 1000.0
        seeds = [np.unique(np.asarray(s, dtype=np.int32)) for s in seed_sets]
        keep = self._keep_rel(self._rel_mask(relations))
        qidx = torch.from_numpy(np.repeat(np.arange(B, dtype=np.int64), [len(s) for s in seeds])).to(self.device)
        ent = torch.from_numpy(np.concatenate(seeds).astype(np.int64) if seeds else np.zeros(0, np.int64)).to(self.device)
        visited = qidx * n + ent  # sorted: query-major, each query's seeds ascending
        layers, tids_by_hop, triples_by_hop = _per_query(B), _per_query(B), _per_query(B)
        need_tids, timed_out, walk = self.max_paths > 0, False, self.semantics is Semantics.WALK
        for _ in range(hops):
            if deadline is not None and time.perf_counter() > deadline:
                timed_out = True
                break
            q, tids, far = self._expand(qidx, ent, keep)
            if need_tids or self.return_triples:
                tkeys = torch.unique(q * m + tids)  # sorted: query-major, triple ids ascending
                counts = torch.bincount(tkeys // m, minlength=B).cpu().numpy()
                self._add_hop_triples(tkeys % m, counts, need_tids, tids_by_hop, triples_by_hop)
            keys = torch.unique(q * n + far)
            if not walk:
                keys = keys[~torch.isin(keys, visited)]
                visited = torch.unique(torch.cat((visited, keys)))
            qidx, ent = keys // n, keys % n
            counts = torch.bincount(qidx, minlength=B).cpu().numpy()
            for j, part in enumerate(_split(ent.to(torch.int32).cpu().numpy(), counts)):
                layers[j].append(part)
        return self._subgraphs(seeds, layers, tids_by_hop, triples_by_hop, timed_out, deadline)

    # --------------------------------------------------------------- shared by both batch kernels
    def _add_hop_triples(self, tids, counts, need_tids: bool, tids_by_hop, triples_by_hop) -> None:
        """One hop's triple ids ``tids`` (query-major, each query's ascending; ``counts[j]`` of
        query ``j``) appended per query: the ids when paths are wanted, the triples when returned."""
        torch = self._torch
        if need_tids:
            for j, part in enumerate(_split(tids.cpu().numpy(), counts)):
                tids_by_hop[j].append(part)
        if self.return_triples:
            tri = torch.stack((self._kg_col("heads")[tids], self._kg_col("rels")[tids],
                               self._kg_col("tails")[tids]), dim=1).to(torch.int32)
            for j, part in enumerate(_split(tri.cpu().numpy(), counts)):
                triples_by_hop[j].append(part)

    def _subgraphs(self, seeds, layers, tids_by_hop, triples_by_hop, timed_out: bool, deadline) -> list[Subgraph]:
        """The batch's results, each query's paths enumerated within the batch's deadline."""
        results = []
        for j in range(len(seeds)):
            paths, truncated, t_out = (), False, timed_out
            if self.max_paths > 0 and not t_out and layers[j]:
                try:
                    paths, truncated = self._paths(seeds[j], layers[j], tids_by_hop[j], deadline)
                except QueryTimeout:
                    t_out = True
            results.append(Subgraph(seeds=seeds[j], entities_by_hop=layers[j], triples_by_hop=triples_by_hop[j],
                                    paths=paths, paths_truncated=truncated, timed_out=t_out))
        return results

    # --------------------------------------------------------------- the spmm kernel (bench only)
    def _sparse(self, rows: np.ndarray, cols: np.ndarray, shape):
        import scipy.sparse as sp

        torch = self._torch
        mat = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=shape)
        mat.sum_duplicates()
        layout = self.layout if self.layout != "auto" else ("coo" if str(self.device) == "cpu" else "csr")
        if layout == "coo":
            c = mat.tocoo()
            idx = torch.from_numpy(np.stack([c.row, c.col]).astype(np.int64))
            return torch.sparse_coo_tensor(idx, torch.from_numpy(c.data.astype(np.float32)), size=shape,
                                           device=self.device, check_invariants=False).coalesce()
        return torch.sparse_csr_tensor(
            torch.from_numpy(mat.indptr.astype(np.int64)), torch.from_numpy(mat.indices.astype(np.int64)),
            torch.from_numpy(mat.data.astype(np.float32)), size=shape, device=self.device, check_invariants=False,
        )

    @cached_property
    def _mats(self):
        kg = self.kg
        n, m = kg.n_entities, kg.n_triples
        t = np.arange(m)
        h, tl = kg.heads.astype(np.int64), kg.tails.astype(np.int64)
        return {Direction.OUT: (self._sparse(t, h, (m, n)), self._sparse(tl, t, (n, m))),   # SUBᵀ, OBJᵀ
                Direction.IN: (self._sparse(t, tl, (m, n)), self._sparse(h, t, (n, m)))}    # OBJ, SUB

    def _spmm_hop(self, Q, keep):
        """``Q``: ``(n, B)`` float32 0/1 → ``(T (m, B) bool, Qn (n, B) bool)``."""
        torch = self._torch
        T = Qn = None
        kcol = None if keep is None else keep[self._kg_col("rels")].unsqueeze(1)
        for d in self._dirs():
            start, end = self._mats[d]
            t = (start @ Q) > 0
            if kcol is not None:
                t = t & kcol
            q = (end @ t.to(torch.float32)) > 0
            T = t if T is None else (T | t)
            Qn = q if Qn is None else (Qn | q)
        return T, Qn

    def _hop_spmm(self, active, rel_mask):
        torch = self._torch
        Q = torch.zeros((self.kg.n_entities, 1), dtype=torch.float32, device=self.device)
        Q[torch.from_numpy(active.astype(np.int64)).to(self.device), 0] = 1.0
        T, Qn = self._spmm_hop(Q, self._keep_rel(rel_mask))
        return (torch.nonzero(T[:, 0]).flatten().cpu().numpy().astype(np.int64),
                torch.nonzero(Qn[:, 0]).flatten().cpu().numpy().astype(np.int32))

    def _retrieve_batch_spmm(self, seed_sets, hops, relations):
        torch = self._torch
        B, n = len(seed_sets), self.kg.n_entities
        if B == 0:
            return []
        deadline = None if self.timeout_ms is None else time.perf_counter() + B * self.timeout_ms / 1000.0
        seeds = [np.unique(np.asarray(s, dtype=np.int32)) for s in seed_sets]
        keep = self._keep_rel(self._rel_mask(relations))
        Q = torch.zeros((n, B), dtype=torch.float32, device=self.device)
        for j, s in enumerate(seeds):
            if len(s):
                Q[torch.from_numpy(s.astype(np.int64)).to(self.device), j] = 1.0
        visited = Q > 0
        layers, tids_by_hop, triples_by_hop = _per_query(B), _per_query(B), _per_query(B)
        need_tids, timed_out, walk = self.max_paths > 0, False, self.semantics is Semantics.WALK
        for _ in range(hops):
            if deadline is not None and time.perf_counter() > deadline:
                timed_out = True
                break
            T, Qn = self._spmm_hop(Q, keep)
            new = Qn if walk else (Qn & ~visited)
            visited |= new
            if need_tids or self.return_triples:
                tids, counts = _rows_by_query(torch, T, B)
                self._add_hop_triples(tids, counts, need_tids, tids_by_hop, triples_by_hop)
            ents, counts = _rows_by_query(torch, new, B)
            for j, part in enumerate(_split(ents.to(torch.int32).cpu().numpy(), counts)):
                layers[j].append(part)
            Q = new.to(torch.float32)
        return self._subgraphs(seeds, layers, tids_by_hop, triples_by_hop, timed_out, deadline)


def _rows_by_query(torch, M, B: int):
    """``M``: ``(rows, B)`` bool → (row ids of every query, query-major, ascending; per-query counts)."""
    nz = torch.nonzero(M.t())
    counts = torch.bincount(nz[:, 0], minlength=B).cpu().numpy()
    return nz[:, 1], counts


def _per_query(B: int) -> list[list[np.ndarray]]:
    """One empty list per query of a batch (its per-hop entities, triple ids or triples)."""
    return [[] for _ in range(B)]


def _split(rows: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """Views of ``rows`` per query (``counts[j]`` consecutive rows for query ``j``)."""
    return np.split(rows, np.cumsum(counts)[:-1])
