"""Rankings by score that feed a prompt: computed once, recorded with the example, and served
back to a replay (issue 71).

A ranking by embedding similarity (RAG's facts, RagText's passages, ToG's embedding pruning,
LogosKG-Dx's candidates) comes from float arithmetic: a store built on another machine, with
another batch size or thread count, gives cosines that differ in the 7th decimal, and two
candidates whose scores are that close swap places. Rounding the scores does not cure it (a
score near a rounding boundary rounds both ways: the chance that a ranking changes stays the
same). What a run ranked is therefore recorded, and a replay uses the record:

* :func:`ranked` is the one helper such a ranking goes through: the candidates in the caller's
  canonical order (their ``keys``: the texts or ids a prompt shows), their scores (an array, or
  a function that computes them), and the cut (``k`` best, ``tau`` threshold). The order is the
  stable sort by score, best first, an exact tie going to the earlier candidate (the canonical
  tie order of :mod:`kgreason.reasoners.base`).
* Inside :func:`example` (the run loop enters it around each example), every call is recorded:
  ``{"site", "n", "keys" (a digest of the candidate keys), "order", "scores"}``; the run loop
  writes the list into the example's row (``rankings``).
* Under :func:`serving` (``kgreason bundle replay``), the ``i``-th call of a site in an example
  is answered from the bundle's record for it when the candidates are the same (their digest):

  - ``verify=True`` (a full replay): the scores are computed as well. The same order → the
    record's scores are returned (so a trace that prints them prints the bundle's digits). Another
    order that the recomputed scores give too within :data:`FLOAT_TOL` (every kept candidate's
    score within it of the record's, nothing left out scoring above the cut by more) → a
    **float-level difference**: the record is used and the difference is reported as such,
    never as a miss. A larger difference → the recomputed ranking is used (the method changed:
    the replay then reports what the new ranking asked).
  - ``verify=False`` (recorded-rankings mode, CI's replays): the record is used and nothing is
    computed, so no KG embedding store has to be built.

  Candidates that differ from the record (another digest), or a site the record lacks, are
  ranked as in a run.

Ground floor: imports nothing from kgreason.
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

#: the largest score difference read as float noise: float32 cosines of MiniLM vectors computed
#: with another batch composition or thread count differ by up to about 1e-6 (docs/validation.md)
FLOAT_TOL = 1e-5
#: for records that kept only rounded scores (a bundle's trace from before rankings were
#: recorded: 4 decimals): the rounding (5e-5) and the noise
ROUNDED_TOL = 1e-4
#: a record read back from an older trace (``kept_keys``: the keys it kept, in order, and their
#: scores) carries its own ``tol`` (:data:`ROUNDED_TOL` where the trace rounded the scores)


def keys_digest(keys: Sequence[Any]) -> str:
    """12 hex digits of SHA-256 over the candidate keys, in order."""
    h = hashlib.sha256()
    for k in keys:
        b = str(k).encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:12]


def stable_order(scores: np.ndarray, k: int | None = None, tau: float | None = None) -> np.ndarray:
    """Indices of the best scores, best first, an exact tie to the lower index; the ``k`` first
    (all when None), then only those scoring ``>= tau`` (when set)."""
    s = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-s, kind="stable")
    if k is not None:
        order = order[: max(int(k), 0)]
    if tau is not None:
        order = order[s[order] >= float(tau)]
    return order.astype(np.int64, copy=False)


def agrees(scores: np.ndarray, order: Sequence[int], recorded_scores: Sequence[float], *, k: int | None,
           tau: float | None, tol: float) -> bool:
    """Whether ``order`` (a recorded ranking, with its scores) is the ranking ``scores`` give up to
    ``tol``: each kept candidate scores within ``tol`` of its record, the kept ones descend within
    ``2 tol``, and no candidate left out scores above the cut (the last kept score, or ``tau``)
    by more than ``2 tol``."""
    s = np.asarray(scores, dtype=np.float64)
    idx = np.asarray(order, dtype=np.int64)
    if len(idx) != len(recorded_scores) or (len(idx) and (idx.min() < 0 or idx.max() >= len(s))):
        return False
    if len(set(idx.tolist())) != len(idx):
        return False
    got = s[idx]
    if len(idx) and np.max(np.abs(got - np.asarray(recorded_scores, dtype=np.float64))) > tol:
        return False
    if len(idx) > 1 and np.any(got[1:] > got[:-1] + 2 * tol):
        return False
    rest = np.ones(len(s), dtype=bool)
    rest[idx] = False
    if not rest.any():
        return True
    best_left = float(s[rest].max())
    full = k is None or len(idx) >= int(k)
    if tau is not None and best_left >= float(tau) + 2 * tol and (k is None or len(idx) < int(k)):
        return False  # a candidate over the threshold was left out while there was room
    if len(idx) and full and best_left > float(got[-1]) + 2 * tol:
        return False
    if not len(idx) and tau is None and (k is None or int(k) > 0):
        return False
    return True


@dataclass
class _Example:
    """One example's rankings: what it recorded, and (in a replay) what the bundle recorded."""

    example_id: str
    log: list[dict] = field(default_factory=list)
    recorded: list[dict] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)


@dataclass
class Served:
    """What a replay's rankings did: the bundle's records, and per example what happened to them."""

    recorded: Mapping[str, list[dict]]
    verify: bool
    notes: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, **kw: Any) -> None:
        with self.lock:
            self.notes.append(kw)

    def float_level(self) -> list[dict]:
        return [n for n in self.notes if n.get("what") == "float_level"]

    def summary(self) -> str:
        """One clause for a replay's line: the float-level differences (empty when none)."""
        fl = self.float_level()
        if not fl:
            return ""
        ex = sorted({n["example"] for n in fl})
        worst = max(n["max_diff"] for n in fl)
        swapped = [n for n in fl if n.get("swapped")]
        first = (swapped or fl)[0]
        return (f"float-level: {len(fl)} ranking{'s' if len(fl) != 1 else ''} of {len(ex)} example"
                f"{'s' if len(ex) != 1 else ''} recomputed with scores within {worst:.1e} of the bundle's, "
                f"{len(swapped)} of them in another order (first {first['site']} of example {first['example']}); "
                "the bundle's rankings were used")


_local = threading.local()
_served: Served | None = None
_served_lock = threading.Lock()


@contextmanager
def example(example_id: Any) -> Iterator[list[dict]]:
    """The scope of one example on this thread: yields the list its rankings are recorded into."""
    served = _served
    rec = list((served.recorded.get(str(example_id)) or []) if served is not None else [])
    ex = _Example(str(example_id), recorded=rec)
    prev = getattr(_local, "ex", None)
    _local.ex = ex
    try:
        yield ex.log
    finally:
        _local.ex = prev


@contextmanager
def serving(recorded: Mapping[str, list[dict]], *, verify: bool) -> Iterator[Served]:
    """A replay: rankings are answered from ``recorded`` (example id → that example's records, in
    call order), verified by recomputing when ``verify``."""
    global _served
    with _served_lock:
        if _served is not None:
            raise RuntimeError("ranking.serving is already active (one replay at a time)")
        _served = Served(recorded=dict(recorded), verify=bool(verify))
        s = _served
    try:
        yield s
    finally:
        with _served_lock:
            _served = None


def recorded_only() -> bool:
    """True in a replay that serves recorded rankings without computing them (nothing needs a
    KG embedding store built unless a ranking was not recorded)."""
    s = _served
    return s is not None and not s.verify


def _next_record(ex: _Example, site: str) -> dict | None:
    i = ex.seen.get(site, 0)
    ex.seen[site] = i + 1
    same = [r for r in ex.recorded if r.get("site") == site]
    return same[i] if i < len(same) else None


def _recorded_order(rec: dict, keys: Sequence[Any], digest: str) -> list[int] | None:
    """The record's ranking as indices into ``keys``, or None when the candidates are not the
    record's (another digest, another count, a kept key not among them)."""
    if "order" in rec:
        if rec.get("n") != len(keys) or rec.get("keys") != digest:
            return None
        return [int(i) for i in rec["order"]]
    kept = rec.get("kept_keys")  # a record read back from an older trace: the kept keys only
    if kept is None:
        return None
    where: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        where.setdefault(str(k), []).append(i)
    out = []
    for k in kept:
        slots = where.get(str(k))
        if not slots:
            return None
        out.append(slots.pop(0))
    return out


def ranked(site: str, keys: Sequence[Any], scores: np.ndarray | Callable[[], np.ndarray], *,
           k: int | None = None, tau: float | None = None,
           ident: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(kept indices into keys, their scores)``, best first: see the module's doc. ``keys`` are
    the candidates in the caller's canonical order (what a trace names them by); ``scores`` their
    scores or a function giving them (called only when needed); ``ident``: what the candidates'
    digest is taken over when the keys do not say all of it (a passage's text beside its title)."""
    n = len(keys)
    ex: _Example | None = getattr(_local, "ex", None)
    if ex is None:  # outside an example (a test, a set-up step): nothing to record or serve
        s = np.asarray(scores() if callable(scores) else scores, dtype=np.float64).reshape(-1)
        if len(s) != n:
            raise ValueError(f"ranking {site}: {len(s)} scores for {n} candidates")
        order = stable_order(s, k, tau)
        return order, s[order]
    digest = keys_digest(keys if ident is None else ident)
    served = _served
    rec = _next_record(ex, site) if served is not None else None
    rec_order = _recorded_order(rec, keys, digest) if rec is not None else None

    def compute() -> np.ndarray:
        s = scores() if callable(scores) else scores
        s = np.asarray(s, dtype=np.float64).reshape(-1)
        if len(s) != n:
            raise ValueError(f"ranking {site}: {len(s)} scores for {n} candidates")
        return s

    if rec is not None and rec_order is None and served is not None:
        served.note(what="candidates_differ", site=site, example=ex.example_id)
    if rec_order is not None and served is not None:
        rec_scores = [float(x) for x in rec.get("scores") or []]
        if len(rec_scores) != len(rec_order):
            rec_scores = []
        if not served.verify and rec_scores:
            out = np.asarray(rec_order, dtype=np.int64), np.asarray(rec_scores, dtype=np.float64)
            _log(ex, site, n, digest, *out)
            return out
        if rec_scores:
            s = compute()
            mine = stable_order(s, k, tau)
            tol = float(rec.get("tol") or FLOAT_TOL)
            diff = float(np.max(np.abs(s[rec_order] - np.asarray(rec_scores)))) if rec_order else 0.0
            same = mine.tolist() == rec_order
            if (same and diff <= tol) or agrees(s, rec_order, rec_scores, k=k, tau=tau, tol=tol):
                if diff > 0 or not same:
                    served.note(what="float_level", site=site, example=ex.example_id, max_diff=diff,
                                swapped=not same)
                out = np.asarray(rec_order, dtype=np.int64), np.asarray(rec_scores, dtype=np.float64)
                _log(ex, site, n, digest, *out)
                return out
            served.note(what="ranking_differs", site=site, example=ex.example_id, max_diff=diff)
            out = mine, s[mine]
            _log(ex, site, n, digest, *out)
            return out
    s = compute()
    order = stable_order(s, k, tau)
    out = order, s[order]
    _log(ex, site, n, digest, *out)
    return out


def _log(ex: _Example, site: str, n: int, digest: str, order: np.ndarray, scores: np.ndarray) -> None:
    ex.log.append({"site": site, "n": n, "keys": digest, "order": [int(i) for i in order],
                   "scores": [float(x) for x in scores]})


__all__ = ["ranked", "example", "serving", "recorded_only", "stable_order", "agrees", "keys_digest", "Served",
           "FLOAT_TOL", "ROUNDED_TOL"]
