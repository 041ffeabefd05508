"""Persistent LLM call cache: :class:`CachedLLM`, an LLM wrapper that keeps every reply in a
:class:`~kgreason.storage.llm_calls.CallStore` (a directory of append-only shards,
:mod:`kgreason.storage.callstore`), with its keys, its accounting of hits, a run's call log and
the start-up check of the store. The store itself is on the ground floor (``kgreason/storage/``);
this wrapper is on the LLM floor (docs/architecture.md).

* **Key** – ``sha256`` of canonical JSON (``sort_keys=True``, compact separators) of
  ``{backend, model, settings, method, request}``: everything that shapes a reply.
  ``request`` holds every field of the :class:`~kgreason.types.ChatRequest` (messages,
  temperature, top_p, max_tokens, n, stop, seed, logprobs, sample_index) for ``generate`` and
  ``{messages, candidates}`` for ``score``. ``settings`` (:func:`backend_settings`) holds the
  backend's reply-shaping configuration: its endpoint (``base_url``, without the user and
  password of a URL with credentials), extra request body
  fields (``extra_body``), the scoring route, the input truncation, and whatever the backend
  declares in ``cache_identity()`` (the scripted test double: its whole rule table). Two setups
  that differ in any of these never share an entry. API keys are never part of the key and
  are never written.
* **Values** – JSON rows (texts, token_logprobs, the original usage), never pickles.
* **Sampled calls are cached too**: resuming a run must not repeat paid calls;
  ``sample_index``/``seed`` keep distinct samples distinct. The metering layer
  (:func:`~kgreason.llm.accounting.seeded`) gives every request at temperature > 0 the run's seed
  and a per-example sample index, and takes the seed off requests at temperature 0: a seed
  sweep draws new samples and shares its greedy calls (docs/llm.md, "Seeds and sampled calls").
  Each stored reply records its ``sampling`` settings (temperature, seed, sample_index), so a
  cache can be audited per seed.
* **Modes** – ``readwrite`` (default), ``readonly`` (replay: a miss, or a store with nothing to
  read opened by :func:`open_store`, raises :class:`~kgreason.llm.base.CacheMiss`), ``off`` (no
  file is opened).
* **Concurrency** – ``<llm_cache.dir>/llm_calls/`` holds one append-only shard per writing
  process (host, pid): processes on one host or on many (a shared filesystem) share the
  directory without locks; a lookup that misses reads what the other shards gained since
  (:mod:`kgreason.storage.callstore`). An old ``llm_calls.sqlite`` is migrated into the shard
  directory on first ``readwrite`` open and read in place by ``readonly``.
* **Call log** – a :class:`CachedLLM` given ``call_log`` (the run loop passes
  ``<run dir>/calls.jsonl``) appends one line per distinct key it served or stored
  (``{"key", "method", "example"}``): the entries ``kgreason bundle export`` packs with the run.

Accounting of hits (what ``metrics.json`` shows): a hit has ``cached=True`` and usage
``calls=0, cache_hits=1, latency_s=0, cost_usd=0`` while the **token counts of the original
call are kept** (reasoning tokens included) – ``llm/calls_per_question`` (calls + hits) and
``llm/tokens_per_question`` describe the method and must not change when a run is replayed,
whereas ``llm/calls`` and ``llm/cost_usd`` describe what this run spent.

Resume: each entry records who paid for it (``paid_by``: the run dir's id (fingerprint.json) and the
example id). A hit on an entry this run paid for the example now being answered (an attempt
killed before its row was written) counts as that run's call, with the original usage, once
per attempt (:func:`~kgreason.llm.accounting.claim_paid`): a resumed run's ``llm/*`` equal an
uninterrupted run's.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from pathlib import Path
from typing import Any, Sequence

from kgreason.llm.accounting import (claim_paid, current_payer, last_score_usage, mark_score_cached,
                                     report_score_usage)
from kgreason.llm.base import CacheMiss
from kgreason.secrets import strip_url_credentials
from kgreason.storage.callstore import LEGACY_SHARD
from kgreason.storage.llm_calls import DB_NAME, SHARD_DIR, CallStore
from kgreason.types import ChatRequest, Completion, Message, Usage, to_jsonable

MODES = ("readwrite", "readonly", "off")


#: request fields added after caches were written: left out of the key at their default, so the
#: keys of every request that does not use them are those of earlier versions
KEY_OPTIONAL_FIELDS = {"json_schema": None}


def request_json(req: ChatRequest) -> dict[str, Any]:
    """Every answer-changing field of a request, as plain JSON (a field of
    :data:`KEY_OPTIONAL_FIELDS` only when it is not at its default)."""
    d = to_jsonable(req)
    d["messages"] = [{"role": m.role, "content": m.content} for m in req.messages]
    for k, default in KEY_OPTIONAL_FIELDS.items():
        if d.get(k, default) == default:
            d.pop(k, None)
    return d


# attributes of a backend object that change what it replies (read when present)
REPLY_SHAPING_ATTRS = ("base_url", "extra_body", "score_endpoint", "route", "max_input_tokens")


def backend_settings(llm: Any) -> dict[str, Any]:
    """The backend's reply-shaping settings for the cache key: ``llm.cache_identity()`` when the
    backend defines it, plus each attribute of :data:`REPLY_SHAPING_ATTRS` it has."""
    fn = getattr(llm, "cache_identity", None)
    out: dict[str, Any] = dict(fn()) if callable(fn) else {}
    for a in REPLY_SHAPING_ATTRS:
        if a not in out and hasattr(llm, a):
            out[a] = to_jsonable(getattr(llm, a))
    if isinstance(out.get("base_url"), str):  # credentials do not shape a reply (and a bundle strips them)
        out["base_url"] = strip_url_credentials(out["base_url"])
    return out


def cache_key(backend: str, model: str, method: str, request: Any, settings: Any = None) -> str:
    """sha256 hex of canonical JSON ``{backend, model, settings, method, request}``."""
    payload = {"backend": backend, "model": model, "settings": to_jsonable(settings or {}), "method": method,
               "request": to_jsonable(request)}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    # surrogatepass: the same bytes as UTF-8 for any real text, and a key (not a crash) for a
    # request holding a lone surrogate (issue 57 M2)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def open_store(dir: str | Path, mode: str = "readwrite") -> CallStore:
    """The run's call store (:meth:`CallStore.open`); a ``readonly`` store with nothing to read
    raises :class:`~kgreason.llm.base.CacheMiss` (a replay with no replies is an LLM cache miss)."""
    return CallStore.open(dir, mode=mode, missing_error=CacheMiss)


class CallLog:
    """``<run dir>/calls.jsonl``: one line per distinct cache key a run served or stored."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def add(self, key: str, method: str) -> None:
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            payer = current_payer()
            line = json.dumps({"key": key, "method": method, "example": payer[1] if payer else None},
                              ensure_ascii=True) + "\n"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="ascii") as f:
                f.write(line)


def _is_generate_entry(v: Any) -> bool:
    """A stored ``generate`` reply has a list of strings under ``texts`` (and optional usage)."""
    return (isinstance(v, dict) and isinstance(v.get("texts"), list) and all(isinstance(x, str) for x in v["texts"])
            and isinstance(v.get("usage", {}), dict))


def check_cache(cache_cfg: Any) -> None:
    """Open the run's call cache once at start-up, so a damaged file stops the run before the
    first example with the file named (:class:`~kgreason.storage.callstore.StoreCorrupt`), instead of
    failing every example on its own."""
    if cache_cfg is None or str(cache_cfg.get("mode", "off")) == "off":
        return
    root = Path(os.path.expanduser(str(cache_cfg.get("dir"))))
    legacy_pending = (root / DB_NAME).exists() and not (root / SHARD_DIR / LEGACY_SHARD).exists()
    if not legacy_pending and (str(cache_cfg.get("mode")) == "readwrite" or (root / SHARD_DIR).is_dir()):
        # nothing to check (shards cannot be damaged as a whole: a damaged line is skipped), and
        # nothing is written before the run is known to start
        return
    store = open_store(cache_cfg.get("dir"), mode=str(cache_cfg.get("mode")))
    store.close()


def _hit_usage(stored: dict[str, Any]) -> Usage:
    u = stored.get("usage") or {}
    return Usage(cache_hits=1, prompt_tokens=int(u.get("prompt_tokens", 0)),
                 completion_tokens=int(u.get("completion_tokens", 0)),
                 reasoning_tokens=int(u.get("reasoning_tokens", 0)),
                 usage_unknown=int(u.get("usage_unknown", 0)), replies_cut=int(u.get("replies_cut", 0)),
                 replies_cleaned=int(u.get("replies_cleaned", 0)),
                 prompt_tokens_reused=int(u.get("prompt_tokens_reused", 0)))


def _paid_usage(stored: dict[str, Any]) -> Usage:
    """The usage the call had when this run paid for it (see ``claim_paid``)."""
    u = stored.get("usage") or {}
    try:
        return Usage(**{k: v for k, v in u.items() if k in Usage.__slots__})
    except (TypeError, ValueError):
        return _hit_usage(stored)


class CachedLLM:
    """Wraps any :class:`~kgreason.llm.base.LLM`; same protocol, explicit methods.

    Misses of one ``generate`` batch are sent to the inner backend as one batch (order kept).
    """

    def __init__(self, inner, store: CallStore, legacy_batched_keys: bool = False,
                 call_log: str | Path | None = None) -> None:
        self.inner, self.store = inner, store
        self.call_log = CallLog(call_log) if call_log is not None else None
        self.backend = str(getattr(inner, "backend", type(inner).__name__))
        self.model = str(getattr(inner, "model", "?"))
        self.settings = backend_settings(inner)
        # opt-in (llm_cache.legacy_batched_keys): also read the entries a batched in-process run
        # wrote before the batcher passed its model's settings on, keyed with none; a hit is
        # copied to this run's key. Such entries do not tell routes apart, hence opt-in.
        self._legacy = bool(legacy_batched_keys) and self.backend in ("local", "hf") and bool(self.settings)

    def _key(self, method: str, request: Any) -> str:
        return cache_key(self.backend, self.model, method, request, self.settings)

    def _get(self, key: str, method: str, request: Any):
        v = self.store.get(key)
        if v is None and self._legacy:
            v = self.store.get(cache_key(self.backend, self.model, method, request, {}))
            if v is not None and self.store.mode == "readwrite":
                self.store.put(key, v, backend=self.backend, model=self.model, method=method)
        return v

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        requests = list(requests)
        if self.store.mode == "off":
            return self.inner.generate(requests)
        reqs = [request_json(r) for r in requests]
        keys = [self._key("generate", r) for r in reqs]
        out: list[Completion | None] = [None] * len(requests)
        miss: list[int] = []
        for i, k in enumerate(keys):
            v = self._get(k, "generate", reqs[i])
            if not _is_generate_entry(v):  # absent, or of another shape: never used as a reply
                miss.append(i)
                continue
            if self.call_log is not None:
                self.call_log.add(k, "generate")
            lp = v.get("token_logprobs")
            usage = _paid_usage(v) if claim_paid(k, v.get("paid_by")) else _hit_usage(v)
            out[i] = Completion(texts=tuple(v["texts"]), usage=usage, cached=True,
                                token_logprobs=None if lp is None else tuple(tuple(x) for x in lp))
        if miss and self.store.mode == "readonly":
            raise CacheMiss(f"llm_cache.mode=readonly: {len(miss)} of {len(requests)} requests not in "
                            f"{self.store.path} (backend={self.backend}, model={self.model}); first missing key {keys[miss[0]]}")
        if miss:
            fresh = self.inner.generate([requests[i] for i in miss])
            if len(fresh) != len(miss):
                raise RuntimeError(f"{self.backend} returned {len(fresh)} completions for {len(miss)} requests")
            payer = current_payer()
            for i, c in zip(miss, fresh):
                out[i] = c
                if len(c.texts) < max(1, int(getattr(requests[i], "n", 1) or 1)):
                    continue  # not a whole reply (fewer texts than asked): returned, never stored
                claim_paid(keys[i], payer)  # counted now; a repeat in this attempt is a hit
                r = requests[i]
                self.store.put(keys[i], {"texts": list(c.texts), "token_logprobs": c.token_logprobs,
                                         "usage": to_jsonable(c.usage), "paid_by": payer,
                                         "sampling": {"temperature": r.temperature, "seed": r.seed,
                                                      "sample_index": r.sample_index}},
                               backend=self.backend, model=self.model, method="generate")
                if self.call_log is not None:
                    self.call_log.add(keys[i], "generate")
        return out  # type: ignore[return-value]

    def close(self) -> None:
        """Close the call store and the inner backend (when it has a ``close``); idempotent."""
        self.store.close()
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]:
        if self.store.mode == "off":
            return self.inner.score(prompt, candidates)
        req = {"messages": [{"role": m.role, "content": m.content} for m in prompt], "candidates": list(candidates)}
        key = self._key("score", req)
        v = self._get(key, "score", req)
        ok = (isinstance(v, dict) and isinstance(v.get("scores"), list) and len(v["scores"]) == len(candidates)
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v["scores"]))
        if ok:
            if self.call_log is not None:
                self.call_log.add(key, "score")
            if not claim_paid(key, v.get("paid_by")):
                mark_score_cached()  # the metering layer counts this call as a cache hit
            u = v.get("usage") if isinstance(v.get("usage"), dict) else {}
            report_score_usage(int(u.get("prompt_tokens", 0) or 0), int(u.get("prompt_tokens_reused", 0) or 0))  # no CPU spent
            return [float(x) for x in v["scores"]]
        if self.store.mode == "readonly":
            raise CacheMiss(f"llm_cache.mode=readonly: score call not in {self.store.path} "
                            f"(backend={self.backend}, model={self.model}); key {key}")
        scores = [float(x) for x in self.inner.score(prompt, candidates)]
        if len(scores) != len(candidates) or not all(math.isfinite(x) for x in scores):
            return scores  # not a whole reply (a score missing, NaN, inf): returned, never stored
        payer = current_payer()
        claim_paid(key, payer)
        read = last_score_usage()  # what the backend reported reading (None: it reports nothing)
        entry: dict[str, Any] = {"scores": scores, "paid_by": payer}
        if read is not None:
            entry["usage"] = {"prompt_tokens": read[0], "prompt_tokens_reused": read[1]}
        self.store.put(key, entry, backend=self.backend, model=self.model, method="score")
        if self.call_log is not None:
            self.call_log.add(key, "score")
        return scores
