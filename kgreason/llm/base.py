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


def complete(llm: LLM, request: ChatRequest) -> Completion:
    """Convenience: one request, one completion."""
    return llm.generate([request])[0]
