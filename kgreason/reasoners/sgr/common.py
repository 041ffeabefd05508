"""What every SGR component shares (shared/papers/sgr.txt §3): the model call with SGR's settings,
entity labels, ``P_θ`` of a candidate list from prompt log-probs (Eq. 13, 18/21, 29), and the
weighted vote of a path family (:func:`vote`: Eq. 14 over §3.3's paths, Eq. 31 over §3.5's).

:class:`SGRKit` is a mixin: :class:`~kgreason.reasoners.sgr.reasoner.SGR` sets the attributes it
reads (``kg``, ``llm``, ``prompts``, ``max_tokens``) in its constructor.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from kgreason.llm.base import ScoringUnsupported
from kgreason.llm.parsing import ParseResult
from kgreason.reasoners.base import Trace, render
from kgreason.types import ChatRequest, Example, Message


def prompt_form(purpose: str) -> str:
    """The prompt a call purpose uses: ``step_p1_t0`` → ``step``, ``hypothesis_p2_t1`` →
    ``hypothesis``; other purposes are their prompt's name."""
    return re.sub(r"_p\d+_t\d+$", "", purpose)


def max_tokens_table(value, prompts: Sequence[str]) -> dict[str, int]:
    """``max_tokens`` as a table ``{prompt: cap, "default": cap}``: an int is every prompt's cap; a
    mapping names prompts (``default`` for the rest, 512 when absent). An unknown prompt name or a
    cap below 1 is refused in one line."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        table = {"default": int(value)}
    elif hasattr(value, "items"):
        table = {str(k): int(v) for k, v in value.items()}
        table.setdefault("default", 512)
    else:
        raise ValueError(f"SGR: max_tokens must be a number or a mapping prompt -> number, got {value!r}")
    unknown = sorted(set(table) - set(prompts) - {"default"})
    if unknown:
        raise ValueError(f"SGR: max_tokens names unknown prompts {unknown}; known: {sorted(prompts)} and 'default'")
    bad = {k: v for k, v in table.items() if v < 1}
    if bad:
        raise ValueError(f"SGR: max_tokens must be at least 1, got {bad}")
    return table


def vote(answers: Sequence[str], weights: Sequence[float], mode: str = "confidence") -> list[tuple[str, float]]:
    """Eq. 14 / Eq. 31: ``score(a) = Σ_i w_i I(a_i = a)`` (``majority``: every ``w_i = 1``). Empty
    answers do not vote. Returns ``[(answer, score)]`` best first; ties keep first-appearance order."""
    tot: dict[str, float] = {}
    for a, w in zip(answers, weights):
        if not a:
            continue
        tot[a] = tot.get(a, 0.0) + (1.0 if mode == "majority" else float(w))
    order = {a: i for i, a in reversed(list(enumerate(answers)))}
    return sorted(tot.items(), key=lambda kv: (-kv[1], order[kv[0]]))


@dataclass
class PathVote:
    """One path family and its aggregation: §3.3's stepwise paths with ``α_i`` (Eq. 13) and Eq. 14,
    or §3.5's collaborative paths with ``β_i`` (Eq. 29) and Eq. 31."""

    answers: list[str]
    weights: list[float]
    ranking: list[tuple[str, float]] = field(default_factory=list)
    p_theta_source: str | None = None

    @property
    def answer(self) -> str | None:
        """The family's answer (the top of its vote), None when no path answered."""
        return self.ranking[0][0] if self.ranking else None


class SGRKit:
    """Helpers of every component mixin (one place for the model call and ``P_θ``)."""

    def _ask(self, t: Trace, purpose: str, prompt: str, parser, *, temperature: float = 0.0,
             sample_index: int = 0, seed: int | None = None) -> ParseResult:
        """One call of prompt ``form(purpose)`` (``step_p1_t0`` → ``step``): its reply cap
        (``max_tokens``, per prompt) and the schema of its reply form (sent with
        ``llm.structured_output=true`` only)."""
        form = prompt_form(purpose)
        req = ChatRequest.of(prompt, temperature=temperature, sample_index=sample_index, seed=seed,
                             max_tokens=self.max_tokens_of(form), json_schema=self.schemas.get(form))
        return self.ask(t, purpose, req, parser)

    def max_tokens_of(self, form: str) -> int:
        return int(self.max_tokens.get(form, self.max_tokens["default"]))

    def _label(self, i: int) -> str:
        return self.kg.entity_label(int(i))

    def _verbalise(self, triples: np.ndarray) -> list[str]:
        return [self.kg.verbalise(tr) for tr in triples]

    def _p_theta(self, prompt: str, candidates: list[str]) -> list[float] | None:
        """Softmax-normalised ``llm.score`` over ``candidates``; None when unsupported."""
        try:
            lp = self.llm.score((Message("user", prompt),), candidates)
        except (ScoringUnsupported, NotImplementedError, AttributeError):
            return None
        lp = np.asarray(lp, dtype=np.float64)
        p = np.exp(lp - lp.max())
        return (p / p.sum()).tolist()

    def path_p_theta(self, example: Example, answers: list[str], paths_txt: list[str]) -> tuple[list[float], str]:
        """``P_θ(a_i | q, p_i)`` of Eq. 13 and Eq. 29 per path: ``llm.score`` softmax-normalised over
        the distinct answers when the backend scores, else ``a_i``'s frequency over the M paths.
        Returns ``(values, "logprobs" | "frequency")``."""
        distinct = list(dict.fromkeys(a for a in answers if a))
        scored = None
        if distinct:
            scored = []
            for i, a in enumerate(answers):
                prompt = render(self.prompts["answer"], question=example.question, path=paths_txt[i] or "(none)")
                p = self._p_theta(prompt, distinct)
                if p is None:
                    scored = None
                    break
                scored.append(p[distinct.index(a)] if a else 0.0)
        if scored is not None and distinct:
            return scored, "logprobs"
        freq = Counter(a for a in answers if a)
        return [freq[a] / len(answers) if a else 0.0 for a in answers], "frequency"
