"""Chain-of-thought prompting without a KG (the "CoT" row of SGR Table 1, sgr.txt §4).

The prompt (``prompts/cot/answer.txt``, two worked examples) asks the model to reason step by
step and end with a line ``Answer: a1; a2``. :func:`parse_answers` reads that line; when it is
missing the last non-empty line is taken, so a terse model still gets scored.
"""

from __future__ import annotations

import re

from kgreason.llm.parsing import ParseResult
from kgreason.reasoners.base import Trace, load_prompt, render
from kgreason.types import ChatRequest, Example, Prediction

_ANSWER = re.compile(r"^\s*\**\s*(?:final\s+)?answers?\s*\**\s*[:：]\s*\**\s*(.*)$", re.I | re.M)
# prose forms small models use instead: "The answer (to this question) is: X", "The answers are X"
_ANSWER_PROSE = re.compile(
    r"\b(?:final\s+)?answers?(?:\s+to\s+(?:this|the)\s+question)?\s+(?:is|are)\s*[:：]?\s*(.+)$", re.I | re.M)


def parse_answers(text: str) -> ParseResult:
    """Answers from the last ``Answer: ...`` line (``;``/``|``-separated, or a JSON list).

    >>> parse_answers("Step 1 ...\\nAnswer: Paris; Lyon").value
    ['Paris', 'Lyon']
    >>> parse_answers("The answer to this question is: 2000.").value
    ['2000']
    """
    hits = _ANSWER.findall(text) or _ANSWER_PROSE.findall(text)
    ok = bool(hits)
    line = hits[-1] if hits else next((ln for ln in reversed(text.strip().splitlines()) if ln.strip()), "")
    line = line.strip().strip("*{}").strip()
    if line.startswith("["):
        import json

        try:
            vals = [str(v).strip() for v in json.loads(line)]
            return ParseResult(ok, [v for v in vals if v], "" if ok else "no 'Answer:' line")
        except (ValueError, TypeError):
            line = line.strip("[]")
    parts = [p.strip().strip("\"'").rstrip(".").strip() for p in re.split(r"\s*[;|]\s*", line)]
    parts = [p for p in parts if p and p.lower() not in ("unknown", "none", "n/a")]
    if not parts:
        return ParseResult(False, [], "empty answer")
    return ParseResult(ok, list(dict.fromkeys(parts)), "" if ok else "no 'Answer:' line")


class CoT:
    """Chain-of-thought QA from the model's own knowledge.

    Args:
        temperature: sampling temperature (0 = greedy, as in the paper's baselines).
        max_tokens: room for the reasoning plus the answer line.
        prompts_dir: folder under ``kgreason/reasoners/prompts``.
    """

    def __init__(self, *, kg=None, retriever=None, llm, temperature: float = 0.0,
                 max_tokens: int = 512, prompts_dir: str = "cot", embedder=None, graphdb=None) -> None:
        self.llm = llm
        self.temperature, self.max_tokens = temperature, max_tokens
        self.template = load_prompt(prompts_dir, "answer")

    def answer(self, example: Example) -> Prediction:
        t = Trace()
        req = ChatRequest.of(render(self.template, question=example.question),
                             temperature=self.temperature, max_tokens=self.max_tokens)
        comp = self.llm.generate([req])[0]
        res = parse_answers(comp.text)
        t.llm("answer", req, comp, parsed=res.value, parse_ok=res.ok)
        return t.finish(example, res.value or [], llm_calls=1)
