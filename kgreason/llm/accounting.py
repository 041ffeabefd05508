"""Token / latency / cost accounting for LLM calls.

Costs come from a price table in USD per **1M** tokens, one entry per model, given in the
backend's config (``conf/llm/openai.yaml`` → ``prices:``)::

    prices:
      gpt-4o-mini: {input: 0.15, output: 0.60}

A model missing from the table costs 0 (local models, or prices you did not enter); the run's
``llm/cost_usd`` is then a lower bound and a warning is logged once per model.

Usage flows: per call (:class:`~kgreason.types.Usage` on each Completion) → per example, by
purpose (:class:`MeteredLLM` adds every call to the example's :class:`Ledger`; the row's
``llm_usage``) → per run (:func:`ledger_metrics`: the ``llm/*`` and ``judge/*`` call keys of
``metrics.json``). ``Trace.llm`` still sums the calls a reasoner records into
``Prediction.usage`` (the row's ``usage``), its own view of the method.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from kgreason.llm.base import CacheMiss
from kgreason.types import ChatRequest, Usage, to_jsonable

log = logging.getLogger("kgreason.llm")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per 1M input (prompt) and output (completion) tokens; ``cached_input``: per 1M prompt
    tokens the provider served from its prompt cache (``usage.prompt_tokens_details.cached_tokens``;
    None = billed as ``input``)."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None


@dataclass
class PriceTable:
    """Model name → :class:`Price`. Lookup is exact first, then the longest table key that
    prefixes the model name (``gpt-4o-mini-2024-07-18`` uses ``gpt-4o-mini``)."""

    prices: dict[str, Price] = field(default_factory=dict)
    _warned: set[str] = field(default_factory=set)

    @staticmethod
    def of(table: Mapping[str, Any] | None) -> "PriceTable":
        out: dict[str, Price] = {}
        for model, p in (table or {}).items():
            if isinstance(p, Price):
                out[str(model)] = p
                continue
            try:
                cached = p.get("cached_input")
                out[str(model)] = Price(float(p.get("input", 0.0)), float(p.get("output", 0.0)),
                                        None if cached is None else float(cached))
            except (AttributeError, TypeError, ValueError) as e:
                raise ValueError(f"prices.{model}: expected {{input: USD/1M, output: USD/1M, cached_input: USD/1M "
                                 f"(optional)}}, got {p!r}") from e
        return PriceTable(out)

    def lookup(self, model: str) -> Price | None:
        if model in self.prices:
            return self.prices[model]
        keys = [k for k in self.prices if model.startswith(k)]
        return self.prices[max(keys, key=len)] if keys else None

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        """USD for one call; 0 (with a one-time warning) for a model not in the table.
        ``cached_tokens`` of the prompt tokens are priced at ``cached_input`` where the table gives it."""
        p = self.lookup(model)
        if p is None:
            if self.prices and model not in self._warned:
                self._warned.add(model)
                log.warning("no price for model %r in the price table: cost counted as 0", model)
            return 0.0
        cached = min(max(int(cached_tokens), 0), int(prompt_tokens)) if p.cached_input is not None else 0
        return ((prompt_tokens - cached) * p.input + cached * (p.cached_input or 0.0)
                + completion_tokens * p.output) / 1e6


def call_usage(prompt_tokens: int, completion_tokens: int, latency_s: float, cost_usd: float = 0.0,
               reasoning_tokens: int = 0, prompt_tokens_reused: int = 0, cpu_s: float = 0.0) -> Usage:
    """Usage of one backend call (``calls=1``). ``reasoning_tokens``: the part of
    ``completion_tokens`` a reasoning model spent reasoning (OpenAI counts and bills them as
    completion tokens, so the cost needs nothing more). ``prompt_tokens_reused``: the part of
    ``prompt_tokens`` a prefix cache held (not computed)."""
    return Usage(calls=1, prompt_tokens=int(prompt_tokens), completion_tokens=int(completion_tokens),
                 latency_s=float(latency_s), cost_usd=float(cost_usd), reasoning_tokens=int(reasoning_tokens),
                 prompt_tokens_reused=min(int(prompt_tokens_reused), int(prompt_tokens)), cpu_s=float(cpu_s))


def split_usage(total: Usage, n: int) -> list[Usage]:
    """Spread one batched call's usage over ``n`` requests (token counts exact by remainder,
    latency and cost shared equally) so that the sum over requests equals ``total``."""
    if n <= 0:
        return []
    out = []
    for i in range(n):
        def part(x: int) -> int:
            return x // n + (1 if i < x % n else 0)
        out.append(Usage(calls=part(total.calls), cache_hits=part(total.cache_hits),
                         prompt_tokens=part(total.prompt_tokens), completion_tokens=part(total.completion_tokens),
                         latency_s=total.latency_s / n, cost_usd=total.cost_usd / n,
                         reasoning_tokens=part(total.reasoning_tokens), sampled_calls=part(total.sampled_calls),
                         prompt_tokens_reused=part(total.prompt_tokens_reused), cpu_s=total.cpu_s / n))
    return out


class Stopwatch:
    """``with Stopwatch() as sw: ...; sw.s`` – elapsed seconds (perf_counter)."""

    def __enter__(self) -> "Stopwatch":
        self._t0 = time.perf_counter()
        self.s = 0.0
        return self

    def __exit__(self, *exc: Any) -> None:
        self.s = time.perf_counter() - self._t0


# ----------------------------------------------------------------------------- call ledger
# Every LLM call is counted at the LLM layer, not by the reasoners: ``run.build`` wraps each LLM
# it hands out in :class:`MeteredLLM`, and ``run.answer_and_score`` opens one :class:`Ledger` per
# example (:func:`example_ledger`, a context variable). A reasoner therefore cannot forget to
# count a call, a log-prob scoring call, an indexing call or a judge call.

PURPOSES = ("answer", "score", "index", "judge")
"""What a call was for: ``answer`` (the reasoner's generate calls), ``score`` (log-prob scoring
of candidates), ``index`` (offline indexing, e.g. SubQRAG §2.1 triple extraction, marked with
``with llm_purpose("index")``), ``judge`` (the LLM judge's calls)."""

STORES_KEY = "embedding_stores"
"""The key of ``prepare_usage.json`` that lists the KG embedding stores a run built before its
first example (form, rows, dtype, build_precision, build_s): counted as ``prepare/*`` metrics."""

_LEDGER: ContextVar["Ledger | None"] = ContextVar("kgreason_llm_ledger", default=None)
_PURPOSE: ContextVar[str | None] = ContextVar("kgreason_llm_purpose", default=None)
_SCORE_HIT: ContextVar[list | None] = ContextVar("kgreason_score_hit", default=None)
_SCORE_USAGE: ContextVar[list | None] = ContextVar("kgreason_score_usage", default=None)


class Ledger:
    """Summed :class:`Usage` per purpose (thread-safe).

    ``payer``: ``[run id, example id]`` of the example attempt this ledger counts (set
    by the run loop), written into every call-cache entry the attempt pays for; see
    :func:`claim_paid` for how a resumed run counts those entries.

    ``example_id`` (default: the payer's example id) and the per-purpose count of sampled
    requests made so far (:meth:`next_samples`) give each sampled request its
    :func:`sample_index`."""

    def __init__(self, payer: Sequence[str] | None = None, example_id: str | None = None) -> None:
        self.by_purpose: dict[str, Usage] = {}
        self._lock = threading.Lock()
        self.payer = [str(x) for x in payer] if payer else None
        self.example_id = str(example_id) if example_id is not None else (self.payer[1] if self.payer else None)
        self._claimed: set[str] = set()
        self._sampled: dict[str, int] = {}
        self.stores_built: list[dict[str, Any]] = []  # a prepare ledger's KG embedding-store builds (no LLM calls)

    def next_samples(self, purpose: str, n: int) -> int:
        """Reserve the next ``n`` sampled-request numbers of ``purpose`` in this example; returns
        the first. The numbers follow the order of the calls inside the example only."""
        with self._lock:
            start = self._sampled.get(purpose, 0)
            self._sampled[purpose] = start + int(n)
            return start

    def claim(self, key: str) -> bool:
        """True the first time ``key`` is claimed in this ledger."""
        with self._lock:
            if key in self._claimed:
                return False
            self._claimed.add(key)
            return True

    def add(self, purpose: str, usage: Usage) -> None:
        with self._lock:
            self.by_purpose[purpose] = self.by_purpose.get(purpose, Usage()) + usage

    def total(self) -> Usage:
        return Usage.total(self.by_purpose.values())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {p: to_jsonable(u) for p, u in sorted(self.by_purpose.items())}
        if self.stores_built:
            out[STORES_KEY] = list(self.stores_built)
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any] | None) -> "Ledger":
        led = Ledger()
        for p, u in (d or {}).items():
            if p == STORES_KEY:
                led.stores_built = [dict(x) for x in u or ()]
                continue
            led.add(p, Usage(**{k: v for k, v in u.items() if k in Usage.__slots__}))
        return led


@contextmanager
def example_ledger(payer: Sequence[str] | None = None, example_id: str | None = None) -> Iterator[Ledger]:
    """Count every LLM call made inside the block (this thread/context) into a fresh ledger;
    ``payer`` = ``[run id, example id]`` (see :func:`claim_paid`); ``example_id`` (default: the
    payer's) seeds the sample indices of the block's sampled requests (:func:`sample_index`)."""
    led = Ledger(payer, example_id)
    token = _LEDGER.set(led)
    try:
        yield led
    finally:
        _LEDGER.reset(token)


@contextmanager
def llm_purpose(name: str) -> Iterator[None]:
    """Label the generate calls made inside the block (e.g. ``index``)."""
    if name not in PURPOSES:
        raise ValueError(f"llm_purpose: expected one of {PURPOSES}, got {name!r}")
    token = _PURPOSE.set(name)
    try:
        yield
    finally:
        _PURPOSE.reset(token)


def current_payer() -> list[str] | None:
    """``[run id, example id]`` of the example being answered (None outside one)."""
    led = _LEDGER.get()
    return list(led.payer) if led is not None and led.payer else None


def claim_paid(key: str, paid_by: Any) -> bool:
    """Resume accounting (docs/llm.md, "Resume and the call count"): should a call-cache hit
    count as a call of this run? Yes when the entry was paid for by this run (the same run dir:
    its ``run_id`` in fingerprint.json) for the example now being answered, and this attempt at the example has not
    counted that entry yet. So an example killed half-way, whose calls were cached but whose
    row was never written, counts the same calls on resume as an uninterrupted run does; a
    request repeated inside one attempt stays a hit, as it is in an uninterrupted run.

    The call cache also calls this (with ``paid_by`` = the current payer) for every miss it
    sends to the backend, so a later identical request in the same attempt is a hit."""
    led = _LEDGER.get()
    if led is None or led.payer is None or not isinstance(paid_by, (list, tuple)):
        return False
    if [str(x) for x in paid_by] != led.payer:
        return False
    return led.claim(key)


PREPARE_ID = "<prepare>"
"""The example id of the run-level set-up's payer (``[run id, PREPARE_ID]``): the calls a
reasoner makes in ``prepare`` (SubQRAG's corpus index) before the first example."""


def credit_paid(key: str, paid_by: Any, usage: Usage) -> bool:
    """Resume accounting for a call recorded outside the call cache (SubQRAG's extraction log
    keeps each finished passage, so a resumed run reads it back instead of calling): when the
    record was paid for by the current payer and ``key`` is not yet claimed in this attempt, add
    its ``usage`` to the current ledger under the current purpose, as an uninterrupted run counted
    it (:func:`claim_paid`). Returns whether it was counted."""
    if not claim_paid(key, paid_by):
        return False
    led = _LEDGER.get()
    if led is not None:
        led.add(_PURPOSE.get() or "answer", usage)
    return True


def credit_cached(usage: Usage) -> None:
    """Count one request answered from a record kept outside the call cache and paid by another
    run (SubQRAG's ``extractions.jsonl`` read by a second run dir) as the call cache counts a hit:
    ``cache_hits=1`` with the record's token counts, under the current purpose. The method's calls
    and tokens per question then do not depend on whether the record was on disk."""
    led = _LEDGER.get()
    if led is not None:
        led.add(_PURPOSE.get() or "answer", Usage(cache_hits=1, prompt_tokens=usage.prompt_tokens,
                                                  completion_tokens=usage.completion_tokens,
                                                  reasoning_tokens=usage.reasoning_tokens,
                                                  prompt_tokens_reused=usage.prompt_tokens_reused))


def mark_score_cached() -> None:
    """Called by the call cache when a ``score`` call is answered from the cache."""
    flag = _SCORE_HIT.get()
    if flag is not None:
        flag[0] = True


def report_score_usage(prompt_tokens: int, prompt_tokens_reused: int = 0, cpu_s: float = 0.0) -> None:
    """Called by a backend's ``score`` (and by the call cache when it replays a stored one): the
    tokens the scoring call read (its prompt and every candidate's tokens) and how many of them a
    cached prefix held. The metering layer adds them to the call's usage (``llm/score/prompt_tokens``,
    tokens per question); a ``score`` outside a metered call reports into nothing."""
    box = _SCORE_USAGE.get()
    if box is not None:
        box[0] = (int(prompt_tokens), min(int(prompt_tokens_reused), int(prompt_tokens)), float(cpu_s))


def last_score_usage() -> tuple[int, int, float] | None:
    """What the innermost :func:`report_score_usage` reported in the current metered ``score``."""
    box = _SCORE_USAGE.get()
    return None if box is None else box[0]


def sample_index(example_id: str | None, purpose: str, order: int) -> int:
    """The sample index of the ``order``-th sampled request (0-based) of ``purpose`` inside one
    example: 31 bits of ``sha256(example id, purpose, order)``. It depends on nothing else, so
    the same call gets the same index whatever the worker count, a resume or the cache's content,
    and calls of different examples or purposes never share one."""
    blob = "\x1f".join(("" if example_id is None else str(example_id), purpose, str(int(order))))
    return int.from_bytes(hashlib.sha256(blob.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


def seeded(requests: Sequence[ChatRequest], seed: int, example_id: str | None, purpose: str,
           first: int) -> list[ChatRequest]:
    """``requests`` as the run sends them (docs/llm.md, "Seeds and sampled calls"):

    * temperature > 0: ``seed`` = the request's own (a reasoner's or judge's ``seed`` setting)
      or else the run's; ``sample_index`` = :func:`sample_index` of its order among the sampled
      requests of ``purpose`` in this example (``first`` is the order of the first one here);
    * temperature 0: no seed (``seed=None``), so the call is shared by every run seed.
    """
    out, j = [], int(first)
    for r in requests:
        if float(r.temperature) > 0:
            r = dataclasses.replace(r, seed=int(seed) if r.seed is None else int(r.seed),
                                    sample_index=sample_index(example_id, purpose, j))
            j += 1
        elif r.seed is not None:
            r = dataclasses.replace(r, seed=None)
        out.append(r)
    return out


class MeteredLLM:
    """Counts every call of the wrapped LLM into the current example's ledger (or, outside any
    example, into ``self.outside``). Same protocol as the LLM; other attributes pass through.

    ``generate``: the usage the backend (or the cache, for hits) reports on each completion, and
    ``sampled_calls`` = the requests made at temperature > 0. With ``seed`` (the run's seed;
    ``run.build`` always gives it) the requests are first :func:`seeded`: a sampled request carries
    the seed and its sample index to the call cache (its key) and the backend.
    ``score``: one call per ``score()`` invocation (a cache hit counts as ``cache_hits``) with the
    tokens the backend reported reading (:func:`report_score_usage`: the prompt and the candidates'
    tokens; a hit keeps the stored call's count; 0 where the backend or an older cache entry reports
    none). Scoring has no completion tokens.
    """

    def __init__(self, inner: Any, purpose: str = "answer", seed: int | None = None) -> None:
        if purpose not in PURPOSES:
            raise ValueError(f"MeteredLLM: purpose must be one of {PURPOSES}, got {purpose!r}")
        self.inner, self.purpose = inner, purpose
        self.seed = None if seed is None else int(seed)
        self.outside = Ledger()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _record(self, purpose: str, usage: Usage) -> None:
        (_LEDGER.get() or self.outside).add(purpose, usage)

    def generate(self, requests):
        requests = list(requests)
        purpose = self.purpose if self.purpose == "judge" else (_PURPOSE.get() or self.purpose)
        n_sampled = sum(float(r.temperature) > 0 for r in requests)
        if self.seed is not None:
            led = _LEDGER.get() or self.outside
            requests = seeded(requests, self.seed, led.example_id, purpose, led.next_samples(purpose, n_sampled))
        try:
            out = self.inner.generate(requests)
        except CacheMiss as e:  # a readonly replay: say which example and purpose missed
            raise _where(e, purpose) from None
        self._record(purpose, Usage.total(c.usage for c in out) + Usage(sampled_calls=n_sampled))
        return out

    def score(self, prompt, candidates):
        flag = [False]
        box: list = [None]
        token = _SCORE_HIT.set(flag)
        token_u = _SCORE_USAGE.set(box)
        t0 = time.perf_counter()
        try:
            scores = self.inner.score(prompt, candidates)
        except CacheMiss as e:
            raise _where(e, "judge" if self.purpose == "judge" else "score") from None
        finally:
            _SCORE_HIT.reset(token)
            _SCORE_USAGE.reset(token_u)
        pt, reused, cpu = box[0] if box[0] is not None else (0, 0, 0.0)
        usage = (Usage(cache_hits=1, prompt_tokens=pt, prompt_tokens_reused=reused) if flag[0]
                 else Usage(calls=1, latency_s=time.perf_counter() - t0, prompt_tokens=pt,
                            prompt_tokens_reused=reused, cpu_s=cpu))
        self._record("judge" if self.purpose == "judge" else "score", usage)
        return scores


def _where(e: Exception, purpose: str) -> Exception:
    """``e`` (a CacheMiss) with the example being answered and the call's purpose in its message."""
    led = _LEDGER.get()
    ex = led.example_id if led is not None and led.example_id is not None else "(before the first example)"
    return type(e)(f"{e} [example {ex}, purpose {purpose}]")


def ledger_metrics(ledgers: Iterable[Ledger], n_examples: int, outside: Ledger | None = None) -> dict[str, float]:
    """Run-level ``llm/*`` and ``judge/*`` call counts from per-example ledgers.

    * ``llm/prompt_tokens_reused`` / ``llm/prompt_tokens_computed``: the prompt tokens a backend's
      prefix cache held (llama.cpp's prefix and state cache, an API's ``cached_tokens``) and the rest,
      which it computed (a hit keeps its call's figures); scoring calls included;
    * ``llm/calls``, ``llm/cache_hits``, ``llm/prompt_tokens``, ``llm/completion_tokens``,
      ``llm/reasoning_tokens``, ``llm/cost_usd``: every LLM call of the run, all purposes, the
      judge included; ``llm/calls`` and ``llm/cost_usd`` are what this run sent and paid (a cache
      hit is in ``llm/cache_hits``, not in ``llm/calls``);
    * ``llm/<purpose>/<field>`` for each purpose that made calls;
    * ``llm/sampled_calls``: the requests made at temperature > 0, all purposes, cache hits
      included (0: no call sampled, so the run seed changed no LLM reply);
    * ``llm/calls_per_question``, ``llm/tokens_per_question``: the *method's* requests (answer +
      score + index; the judge is not part of the method) per example, **whether the backend or
      the call cache answered them** (calls + cache hits; a hit keeps the tokens of the call it
      replays), so the same config gives the same figures on a fresh cache, a warm one, with the
      cache off and after a resume;
    * ``llm/calls_usage_unknown``: calls and hits whose reply carried no token counts (their tokens
      and cost are not in the sums, which are then lower bounds); ``llm/replies_cut``: replies cut
      at the backend's ``max_reply_chars``; ``llm/replies_cleaned``: replies (and hits) in which
      the backend replaced lone UTF-16 surrogates with U+FFFD;
    * ``judge/calls``, ``judge/cache_hits``, ``judge/prompt_tokens``, ``judge/completion_tokens``,
      ``judge/reasoning_tokens``, ``judge/cost_usd``: the judge's share, also logged under ``judge/``.
    """
    per: dict[str, Usage] = {}
    for led in list(ledgers) + ([outside] if outside is not None else []):
        for p, u in led.by_purpose.items():
            per[p] = per.get(p, Usage()) + u
    total = Usage.total(per.values())
    method = Usage.total(u for p, u in per.items() if p != "judge")
    n = max(n_examples, 1)
    out: dict[str, float] = {}

    def put(prefix: str, u: Usage) -> None:
        out[f"{prefix}/calls"] = u.calls
        out[f"{prefix}/cache_hits"] = u.cache_hits
        out[f"{prefix}/prompt_tokens"] = u.prompt_tokens
        out[f"{prefix}/prompt_tokens_reused"] = u.prompt_tokens_reused
        out[f"{prefix}/prompt_tokens_computed"] = u.prompt_tokens - u.prompt_tokens_reused
        out[f"{prefix}/cpu_s"] = round(u.cpu_s, 3)
        out[f"{prefix}/completion_tokens"] = u.completion_tokens
        out[f"{prefix}/reasoning_tokens"] = u.reasoning_tokens
        out[f"{prefix}/cost_usd"] = round(u.cost_usd, 8)

    put("llm", total)
    for p in PURPOSES:
        if p in per:
            put(f"llm/{p}", per[p])
    # calls (and cache hits) whose reply had no token counts: left out of the token and cost sums above
    out["llm/calls_usage_unknown"] = total.usage_unknown
    out["llm/replies_cut"] = total.replies_cut  # replies cut at llm.max_reply_chars
    out["llm/replies_cleaned"] = total.replies_cleaned  # replies whose lone surrogates became U+FFFD
    out["llm/sampled_calls"] = total.sampled_calls
    out["llm/calls_per_question"] = (method.calls + method.cache_hits) / n
    out["llm/tokens_per_question"] = (method.prompt_tokens + method.completion_tokens) / n
    if "judge" in per:
        put("judge", per["judge"])
    return out
