"""The LLM contract every backend implements.

``generate`` is batched and order-preserving; usage travels with each :class:`Completion`.
``score`` returns one log-probability per candidate continuation (SGR's P_θ(a | q, ...)), or
raises :class:`ScoringUnsupported` on backends that cannot give logprobs.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from kgreason.types import ChatRequest, Completion, Message


class LLMError(RuntimeError):
    """A backend failed after its retries; the message names the endpoint and last status."""


class ScoringUnsupported(LLMError):
    """The backend cannot return log-probabilities."""


class CacheMiss(LLMError):
    """A ``readonly`` cache (replay mode) was asked for a call it has not recorded."""


@runtime_checkable
class LLM(Protocol):
    backend: str
    model: str

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]: ...

    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]: ...


SEED_SPACE = 2**31
"""Seeds sent to a backend lie in ``[0, 2**31)``: llama.cpp takes a 32-bit seed, the others more."""


def backend_seed(req: ChatRequest, choice: int = 0) -> int | None:
    """The seed a backend sends for ``req`` (and its ``choice``-th sample when it draws the ``n``
    samples one by one): ``(seed + choice + 1_000_003 · sample_index) mod 2**31``, so two sampled
    calls that differ only in their sample index draw differently, and a call repeated with the
    same (seed, sample_index) draws the same where the backend is deterministic under a seed.
    None for a request without a seed or at temperature 0 (greedy: nothing to seed), so such a
    request is sent without one."""
    if req.seed is None or float(req.temperature) <= 0:
        return None
    return (int(req.seed) + int(choice) + 1_000_003 * int(req.sample_index)) % SEED_SPACE


def complete(llm: LLM, request: ChatRequest) -> Completion:
    """Convenience: one request, one completion."""
    return llm.generate([request])[0]
