"""Token / latency / cost accounting for LLM calls.

Costs come from a price table in USD per **1M** tokens, one entry per model, given in the
backend's config (``conf/llm/openai.yaml`` → ``prices:``)::

    prices:
      gpt-4o-mini: {input: 0.15, output: 0.60}

A model missing from the table costs 0 (local models, or prices you did not enter); the run's
``llm/cost_usd`` is then a lower bound and a warning is logged once per model.

Usage flows: per call (:class:`~kgreason.types.Usage` on each Completion) → per example
(``Trace.llm`` sums it into ``Prediction.usage``) → per run (``run.summarise`` sums the
``llm/*`` keys into ``metrics.json``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from kgreason.types import Usage

log = logging.getLogger("kgreason.llm")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per 1M input (prompt) and output (completion) tokens."""

    input: float = 0.0
    output: float = 0.0


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
                out[str(model)] = Price(float(p.get("input", 0.0)), float(p.get("output", 0.0)))
            except (AttributeError, TypeError, ValueError) as e:
                raise ValueError(f"prices.{model}: expected {{input: USD/1M, output: USD/1M}}, got {p!r}") from e
        return PriceTable(out)

    def lookup(self, model: str) -> Price | None:
        if model in self.prices:
            return self.prices[model]
        keys = [k for k in self.prices if model.startswith(k)]
        return self.prices[max(keys, key=len)] if keys else None

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """USD for one call; 0 (with a one-time warning) for a model not in the table."""
        p = self.lookup(model)
        if p is None:
            if self.prices and model not in self._warned:
                self._warned.add(model)
                log.warning("no price for model %r in the price table: cost counted as 0", model)
            return 0.0
        return (prompt_tokens * p.input + completion_tokens * p.output) / 1e6


def call_usage(prompt_tokens: int, completion_tokens: int, latency_s: float, cost_usd: float = 0.0) -> Usage:
    """Usage of one backend call (``calls=1``)."""
    return Usage(calls=1, prompt_tokens=int(prompt_tokens), completion_tokens=int(completion_tokens),
                 latency_s=float(latency_s), cost_usd=float(cost_usd))


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
                         latency_s=total.latency_s / n, cost_usd=total.cost_usd / n))
    return out


class Stopwatch:
    """``with Stopwatch() as sw: ...; sw.s`` – elapsed seconds (perf_counter)."""

    def __enter__(self) -> "Stopwatch":
        self._t0 = time.perf_counter()
        self.s = 0.0
        return self

    def __exit__(self, *exc: Any) -> None:
        self.s = time.perf_counter() - self._t0
