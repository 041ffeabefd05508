"""ScriptedLLM: a deterministic test double that answers from a rule table.

Each rule is ``{pattern: regex, reply: str | [str, ...]}``, matched with ``re.search`` against
the last user message (or the whole prompt with ``match_on: prompt``). The first matching rule
wins; a list reply is consumed in order across calls (the last item repeats). Replies may use
``{0}``, ``{1}``… for the regex groups. Unmatched prompts get ``default``.

It is for control-flow tests only: never the default of a run or a benchmark.
"""

from __future__ import annotations

import re
import time
from typing import Any, Mapping, Sequence

from kgreason.llm.accounting import report_score_usage
from kgreason.llm.base import ScoringUnsupported
from kgreason.types import ChatRequest, Completion, Message, Usage


class ScriptedLLM:
    backend = "scripted"

    def __init__(
        self,
        rules: Sequence[Mapping[str, Any]] = (),
        default: str = "",
        model: str = "scripted",
        scores: Mapping[str, float] | None = None,
        match_on: str = "last_user",
        delay_s: float = 0.0,
    ) -> None:
        self.model = model
        self._rule_table = [{"pattern": str(r["pattern"]), "reply": r["reply"] if isinstance(r["reply"], str)
                             else list(r["reply"])} for r in rules]
        self.rules = [(re.compile(r["pattern"], re.S | re.I), r["reply"]) for r in rules]
        self._cursor = [0] * len(self.rules)
        self.default = default
        self.scores = dict(scores) if scores is not None else None
        self.match_on = match_on
        self.delay_s = float(delay_s)  # sleep per request: a slow backend, for interruption tests
        self.calls: list[ChatRequest] = []  # every request seen, for assertions

    def cache_identity(self) -> dict[str, Any]:
        """Everything that shapes this double's replies, for the call cache key: two scripted
        setups with different rules, default, scores or matching never share cached replies."""
        return {"rules": self._rule_table, "default": self.default, "scores": self.scores,
                "match_on": self.match_on}

    def _text(self, messages: Sequence[Message]) -> str:
        if self.match_on == "prompt":
            return "\n".join(m.content for m in messages)
        users = [m.content for m in messages if m.role == "user"]
        return users[-1] if users else ""

    def _reply(self, text: str) -> str:
        for i, (pat, reply) in enumerate(self.rules):
            m = pat.search(text)
            if m:
                if isinstance(reply, (list, tuple)) and not isinstance(reply, str):
                    out = reply[min(self._cursor[i], len(reply) - 1)]
                    self._cursor[i] += 1
                else:
                    out = reply
                groups = m.groups()
                return out.format(*groups) if groups else out
        return self.default

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        out = []
        for req in requests:
            if self.delay_s:
                time.sleep(self.delay_s)
            self.calls.append(req)
            text = self._text(req.messages)
            replies = tuple(self._reply(text) for _ in range(req.n))
            prompt_tokens = sum(len(m.content.split()) for m in req.messages)
            out.append(Completion(
                texts=replies,
                usage=Usage(calls=1, prompt_tokens=prompt_tokens,
                            completion_tokens=sum(len(r.split()) for r in replies)),
            ))
        return out

    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]:
        if self.scores is None:
            raise ScoringUnsupported("ScriptedLLM has no `scores` table")
        # what it "read", counted as generate counts tokens (whitespace words): the prompt once and
        # each candidate's words, as a backend that evaluates the prompt once reports it
        report_score_usage(sum(len(m.content.split()) for m in prompt) + sum(len(c.split()) for c in candidates))
        return [float(self.scores.get(c, -100.0)) for c in candidates]
