"""Numba backend of the LogosKG engine (logoskg.txt §3.3, Table 2 "LogosKG (Numba)").

One hop is the sparse product ``t = q·SUB`` followed by ``q' = t·OBJ`` (Eq. 4–5) in the boolean
semiring, written as a compiled loop over the KG's CSR index (``kg.out_csr`` groups triple ids
by head, ``kg.in_csr`` by tail): for every active entity, walk its triple slice, keep the
triples whose relation is allowed, and record the entity at the other end.

Cost follows the edges a query touches (issue 22), never the size of the graph:

* the whole hop loop — relation filter, direction, de-duplication, visited marking and the
  per-hop entity and triple lists — runs in :func:`_run_hops`;
* "visited" and "seen this hop" are **generation stamps** in two ``int32`` arrays of
  ``n_entities`` slots, allocated once per thread and per retriever (:class:`_Scratch`): a
  query takes fresh generation numbers instead of clearing anything, so nothing graph-sized
  is allocated, cleared or scanned per query;
* outputs live in buffers sized by the work (grown by doubling, then copied out at their
  final length), and each hop's ids are sorted in place: ``O(r log r)`` for ``r`` ids, or, for
  a hop that reaches at least 1/32 of all ids, one pass over a per-thread byte map
  (:func:`_sort_ids`) — a cost that hop's own work already exceeds.

Threads: the kernels are ``nogil``; each thread has its own scratch (``threading.local``), so
concurrent queries neither race nor serialise on one buffer. Kernels are
``@njit(cache=True)``: the first call in a fresh environment compiles (a few seconds) and later
processes load the cached machine code.
"""

from __future__ import annotations

import threading
import time
from functools import cached_property
from typing import Sequence

import numpy as np

from kgreason.retrieval.base import Direction, GraphRetriever, Semantics
from kgreason.types import Subgraph

try:  # numba is a core dependency; keep the import error readable if it is missing
    from numba import njit
except ImportError as e:  # pragma: no cover
    raise ImportError("NumbaRetriever needs numba (pip install numba)") from e

#: generation numbers are int32 stamps; a thread's scratch is re-zeroed before they overflow
_GEN_LIMIT = 2**31 - 1024


@njit(cache=True, nogil=True)
def _grow(buf, need):  # pragma: no cover - jitted
    """``buf`` itself when it holds ``need`` items, else a copy with at least twice the room."""
    if need <= buf.shape[0]:
        return buf
    new = np.empty(max(need, 2 * buf.shape[0]), dtype=buf.dtype)
    new[:buf.shape[0]] = buf
    return new


@njit(cache=True, nogil=True)
def _sort_ids(buf, s, e, bits, space):  # pragma: no cover - jitted
    """Sort the unique ids ``buf[s:e]`` (all in ``[0, space)``) in place.

    A run shorter than ``space / 32`` is sorted (``O(r log r)``). A longer one is written as
    marks into the all-zero byte map ``bits`` and read back in order, clearing each mark again
    (``O(space)``, which a run that long already pays for). ``bits`` is allocated here the first
    time a long run needs it and returned so the thread keeps it; small queries never touch it.
    """
    r = e - s
    if r < 2:
        return bits
    if r * 32 < space:
        buf[s:e].sort()
        return bits
    if bits.shape[0] < space:
        bits = np.zeros(space, dtype=np.uint8)
    for i in range(s, e):
        bits[buf[i]] = 1
    w = s
    for j in range(space):
        if bits[j]:
            bits[j] = 0
            buf[w] = j
            w += 1
    return bits


@njit(cache=True, nogil=True)
def _run_hops(ptr_o, far_o, rel_o, ord_o, ptr_i, far_i, rel_i, ord_i, do_out, do_in,
              rel_mask, use_mask, walk, keep_t, vis, act, ebits, tbits, gq, gen, E, eoff, T, toff, h0, h1):  # pragma: no cover - jitted
    """Run hops ``h0+1 .. h1`` of one query; layer ``h`` is ``E[eoff[h]:eoff[h+1]]``.

    Args:
        ptr_*, far_*, rel_*, ord_*: per direction (``o`` = out: keyed by head, ``i`` = in: keyed
            by tail) the CSR offsets, the entity at the other end of each CSR position, its
            relation and its triple id. ``do_out``/``do_in`` select the directions.
        rel_mask, use_mask: allowed relations (used when ``use_mask``).
        walk: walk semantics (no visited set; each hop's reached set is ``q^(h)``).
        keep_t: write the activated triple ids into ``T``; when False only their count is kept
            (``toff``), which is all a query without triples or paths needs.
        vis, act: this thread's ``(n,)`` int32 stamp arrays. ``vis[e] == gen`` marks a visited
            entity (within/exact); per hop, ``act[e] == g`` marks an active one and, under
            walk, ``vis[e] == g`` one already reached this hop.
        gq: this query's visited stamp; gen: the next unused generation number.
        E, T: entity (int32) and triple-id (int64) buffers; ``eoff``/``toff`` (int64) offsets:
            hop ``h``'s triples are ``T[toff[h-1]:toff[h]]`` (``toff[0] = 0``).
    Returns:
        ``(E, T, ebits, tbits)``: the (possibly regrown) buffers and byte maps (see
        :func:`_sort_ids`; ``ebits``/``tbits`` are this thread's, length 0 until first needed).
    """
    both = do_out and do_in
    for h in range(h0, h1):
        s, e = eoff[h], eoff[h + 1]
        g = gen
        gen += 1
        bound = 0
        for i in range(s, e):
            a = E[i]
            if both:
                act[a] = g
            if do_out:
                bound += ptr_o[a + 1] - ptr_o[a]
            if do_in:
                bound += ptr_i[a + 1] - ptr_i[a]
        ne = e
        nt = toff[h]
        E = _grow(E, ne + bound)
        if keep_t:
            T = _grow(T, nt + bound)
        stamp = g if walk else gq
        if do_out:
            for i in range(s, e):
                a = E[i]
                for p in range(ptr_o[a], ptr_o[a + 1]):
                    if use_mask and not rel_mask[rel_o[p]]:
                        continue
                    if keep_t:
                        T[nt] = ord_o[p]
                    nt += 1
                    b = far_o[p]
                    if vis[b] != stamp:
                        vis[b] = stamp
                        E[ne] = b
                        ne += 1
        if do_in:
            for i in range(s, e):
                a = E[i]
                for p in range(ptr_i[a], ptr_i[a + 1]):
                    if use_mask and not rel_mask[rel_i[p]]:
                        continue
                    b = far_i[p]
                    # a triple whose head is active too was already listed by the out pass
                    if not (both and act[b] == g):
                        if keep_t:
                            T[nt] = ord_i[p]
                        nt += 1
                    if vis[b] != stamp:
                        vis[b] = stamp
                        E[ne] = b
                        ne += 1
        ebits = _sort_ids(E, e, ne, ebits, vis.shape[0])
        if keep_t:
            tbits = _sort_ids(T, toff[h], nt, tbits, ord_o.shape[0])
        eoff[h + 2] = ne
        toff[h + 1] = nt
    return E, T, ebits, tbits


@njit(cache=True, nogil=True)
def _start(vis, gen, seeds, E):  # pragma: no cover - jitted
    """Sorted unique seeds into ``E[0:ns]`` stamped visited with ``gen``; returns ``ns``."""
    ns = 0
    for i in range(seeds.shape[0]):
        x = seeds[i]
        if vis[x] != gen:
            vis[x] = gen
            E[ns] = x
            ns += 1
    E[:ns].sort()
    return ns


@njit(cache=True, nogil=True)
def _gather(tids, heads, rels, tails, out):  # pragma: no cover - jitted
    """``out[i] = (heads[t], rels[t], tails[t])`` for ``t = tids[i]``: one pass, no temporaries."""
    for i in range(tids.shape[0]):
        t = tids[i]
        out[i, 0] = heads[t]
        out[i, 1] = rels[t]
        out[i, 2] = tails[t]


class _Scratch:
    """One thread's reusable query state: two ``(n,)`` int32 stamp arrays and the next generation."""

    __slots__ = ("vis", "act", "gen", "ebits", "tbits")

    def __init__(self, n: int) -> None:
        self.vis = np.zeros(max(n, 1), dtype=np.int32)
        self.act = np.zeros(max(n, 1), dtype=np.int32)
        self.gen = 1
        # byte maps for ordering very large hops (allocated by the kernel on first need)
        self.ebits = np.zeros(0, dtype=np.uint8)
        self.tbits = np.zeros(0, dtype=np.uint8)

    def take(self, count: int) -> int:
        """Reserve ``count`` generation numbers; re-zeroes the stamps once every ~2·10⁹."""
        if self.gen + count >= _GEN_LIMIT:
            self.vis[:] = 0
            self.act[:] = 0
            self.gen = 1
        g = self.gen
        self.gen += count
        return g


class NumbaRetriever(GraphRetriever):
    """k-hop retrieval with a Numba-compiled hop loop (same semantics as every engine).

    >>> from kgreason.kg.store import KG
    >>> kg = KG.from_triples([("A", "r", "B"), ("B", "r", "C")])
    >>> NumbaRetriever(kg).retrieve([0], 2).entities().tolist()
    [1, 2]
    """

    name = "numba"

    def __init__(self, kg, **kw) -> None:
        super().__init__(kg, **kw)
        self._local = threading.local()

    def _scratch(self) -> _Scratch:
        s = getattr(self._local, "s", None)
        if s is None:
            s = self._local.s = _Scratch(self.kg.n_entities)
        return s

    @cached_property
    def _arrays(self):
        """Per direction: CSR offsets, the far-end entity, relation and triple id of each CSR
        position (gathered once, so hops stream through memory)."""
        kg = self.kg
        out = {}
        for d, (ptr, order), far in ((Direction.OUT, kg.out_csr, kg.tails), (Direction.IN, kg.in_csr, kg.heads)):
            order = np.asarray(order)
            out[d] = (np.ascontiguousarray(ptr, dtype=np.int64),
                      np.ascontiguousarray(np.asarray(far)[order], dtype=np.int32),
                      np.ascontiguousarray(np.asarray(kg.rels)[order], dtype=np.int32),
                      np.ascontiguousarray(order, dtype=np.int64))
        return out

    # ------------------------------------------------------------------ the compiled query
    def retrieve(self, seeds: Sequence[int], hops: int, relations: Sequence[int] | None = None) -> Subgraph:
        """k-hop retrieval from ``seeds`` (module docstring of ``base`` for the semantics)."""
        deadline = None if self.timeout_ms is None else time.perf_counter() + self.timeout_ms / 1000.0
        return self._query(seeds, int(hops), self._rel_mask(relations), deadline)

    def retrieve_many(self, seed_sets: Sequence[Sequence[int]], hops: int,
                      relations: Sequence[int] | None = None) -> list[Subgraph]:
        """The same compiled loop over a batch, on this thread's scratch (each query keeps its
        own time limit)."""
        mask = self._rel_mask(relations)
        out = []
        for s in seed_sets:
            deadline = None if self.timeout_ms is None else time.perf_counter() + self.timeout_ms / 1000.0
            out.append(self._query(s, int(hops), mask, deadline))
        return out

    def _query(self, seeds, hops: int, rel_mask, deadline) -> Subgraph:
        n = self.kg.n_entities
        seeds_in = np.asarray(seeds, dtype=np.int64).reshape(-1)
        if len(seeds_in) and (seeds_in.min() < 0 or seeds_in.max() >= n):
            raise IndexError(f"seed ids must lie in [0, {n}); got {seeds_in.min()}..{seeds_in.max()}")
        sc = self._scratch()
        gen = sc.take(hops + 1)
        po, fo, ro, oo = self._arrays[Direction.OUT]
        pi, fi, ri, oi = self._arrays[Direction.IN]
        do_out = self.direction in (Direction.OUT, Direction.BOTH)
        do_in = self.direction in (Direction.IN, Direction.BOTH)
        walk = self.semantics is Semantics.WALK
        keep_t = self.return_triples or self.max_paths > 0
        use = rel_mask is not None
        mask = rel_mask if use else np.zeros(1, dtype=np.bool_)
        E = np.empty(max(16, 4 * len(seeds_in)), dtype=np.int32)
        T = np.empty(64, dtype=np.int64)
        eoff = np.zeros(hops + 2, dtype=np.int64)
        toff = np.zeros(hops + 1, dtype=np.int64)
        ns = _start(sc.vis, gen, seeds_in, E)
        eoff[1] = ns
        done, timed_out = 0, False
        # one compiled call for all hops without a limit; hop by hop (checking the clock) with one
        step = hops if deadline is None else 1
        while done < hops:
            if deadline is not None and time.perf_counter() > deadline:
                timed_out = True
                break
            h1 = min(hops, done + step)
            E, T, sc.ebits, sc.tbits = _run_hops(po, fo, ro, oo, pi, fi, ri, oi, do_out, do_in, mask, use, walk,
                                                 keep_t, sc.vis, sc.act, sc.ebits, sc.tbits, gen, gen + 1 + done,
                                                 E, eoff, T, toff, done, h1)
            done = h1
        E = E[:eoff[done + 1]].copy()
        seeds_arr = E[:ns]
        layers = [E[eoff[h + 1]:eoff[h + 2]] for h in range(done)]
        if keep_t:
            T = T[:toff[done]].copy()
            tids_by_hop = [T[toff[h]:toff[h + 1]] for h in range(done)]
        else:
            tids_by_hop = []
        return self._finish(seeds_arr, layers, tids_by_hop, deadline, timed_out)

    def _hop(self, active, rel_mask, deadline):
        """One hop (the base-class primitive), through the same compiled loop under walk rules."""
        po, fo, ro, oo = self._arrays[Direction.OUT]
        pi, fi, ri, oi = self._arrays[Direction.IN]
        sc = self._scratch()
        gen = sc.take(2)
        use = rel_mask is not None
        E = np.empty(max(16, len(active)), dtype=np.int32)
        E[:len(active)] = active
        eoff = np.array([0, len(active), 0], dtype=np.int64)
        toff = np.zeros(2, dtype=np.int64)
        E, T, sc.ebits, sc.tbits = _run_hops(
            po, fo, ro, oo, pi, fi, ri, oi, self.direction in (Direction.OUT, Direction.BOTH),
            self.direction in (Direction.IN, Direction.BOTH), rel_mask if use else np.zeros(1, dtype=np.bool_),
            use, True, True, sc.vis, sc.act, sc.ebits, sc.tbits, gen, gen + 1, E, eoff, np.empty(16, dtype=np.int64),
            toff, 0, 1)
        return T[:toff[1]].copy(), E[eoff[1]:eoff[2]].copy()

    def _triples(self, tids: np.ndarray) -> np.ndarray:
        out = np.empty((len(tids), 3), dtype=np.int32)
        if len(tids):
            _gather(np.ascontiguousarray(tids, dtype=np.int64), self._heads, self._rels, self._tails, out)
        return out

    @cached_property
    def _heads(self) -> np.ndarray:
        return np.ascontiguousarray(self.kg.heads, dtype=np.int32)

    @cached_property
    def _tails(self) -> np.ndarray:
        return np.ascontiguousarray(self.kg.tails, dtype=np.int32)

    @cached_property
    def _rels(self) -> np.ndarray:
        return np.ascontiguousarray(self.kg.rels, dtype=np.int32)
