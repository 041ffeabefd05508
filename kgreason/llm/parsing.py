"""Parsing helpers shared by the reasoners. Each returns a :class:`ParseResult`; unparseable
output is a failed result (counted as a parse failure in the metrics), never an exception.

``with_reask`` runs a bounded re-ask loop: on a failed parse it appends the bad reply and a
correction request to the conversation and asks again, at most ``max_reasks`` times.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from kgreason.types import ChatRequest, Completion, Message


@dataclass(frozen=True, slots=True)
class ParseResult:
    ok: bool
    value: Any = None
    error: str = ""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)


def _repair(s: str) -> str:
    s = s.strip()
    s = re.sub(r",\s*([}\]])", r"\1", s)  # trailing commas
    s = re.sub(r"(?<=[{,\s])'([^'\n]*?)'\s*:", r'"\1":', s)  # 'key': → "key":
    s = re.sub(r":\s*'([^'\n]*?)'(?=\s*[,}])", r': "\1"', s)  # : 'value' → : "value"
    s = re.sub(r"\bTrue\b", "true", s)
    s = re.sub(r"\bFalse\b", "false", s)
    s = re.sub(r"\bNone\b", "null", s)
    return s


def _balanced(text: str, open_ch: str, close_ch: str) -> list[str]:
    out, depth, start, in_str, esc = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch == open_ch:
            if depth == 0:
                start = i
            depth += 1
        elif ch == close_ch and depth:
            depth -= 1
            if depth == 0:
                out.append(text[start : i + 1])
    return out


def parse_json(text: str) -> ParseResult:
    """The first JSON object or array in ``text`` (code fences, trailing commas, single quotes
    and Python literals repaired)."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for cand in candidates:
        for block in _balanced(cand, "{", "}") + _balanced(cand, "[", "]") + [cand]:
            for attempt in (block, _repair(block)):
                try:
                    return ParseResult(True, json.loads(attempt))
                except (json.JSONDecodeError, ValueError):
                    continue
    return ParseResult(False, None, "no JSON object or array found")


def parse_list(text: str) -> ParseResult:
    """A list of strings: a JSON array, else numbered/bulleted lines, else a comma/semicolon list."""
    js = parse_json(text)
    if js.ok and isinstance(js.value, list):
        return ParseResult(True, [str(x).strip() for x in js.value if str(x).strip()])
    if js.ok and isinstance(js.value, dict):
        for v in js.value.values():
            if isinstance(v, list):
                return ParseResult(True, [str(x).strip() for x in v if str(x).strip()])
    lines = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", ln).strip() for ln in text.strip().splitlines()]
    lines = [ln for ln in lines if ln]
    if len(lines) > 1:
        return ParseResult(True, lines)
    if lines:
        items = [x.strip(" .") for x in re.split(r"[;,]", lines[0]) if x.strip(" .")]
        if items:
            return ParseResult(True, items)
    return ParseResult(False, [], "empty reply")


_NUM = re.compile(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?")


def parse_score(text: str, lo: float = 0.0, hi: float = 1.0) -> ParseResult:
    """The first number in ``text`` (percentages are divided by 100), clipped to ``[lo, hi]``."""
    m = _NUM.search(text)
    if not m:
        return ParseResult(False, None, "no number found")
    v = float(m.group())
    if text[m.end() : m.end() + 1] == "%":
        v /= 100.0
    return ParseResult(True, min(hi, max(lo, v)))


def parse_scores(text: str, n: int, lo: float = 0.0, hi: float = 1.0) -> ParseResult:
    """``n`` numbers, from a JSON list/dict or from the first ``n`` numbers in the text."""
    js = parse_json(text)
    vals: list[float] = []
    if js.ok and isinstance(js.value, list):
        vals = [float(x) for x in js.value if isinstance(x, (int, float))]
    elif js.ok and isinstance(js.value, dict):
        vals = [float(x) for x in js.value.values() if isinstance(x, (int, float))]
    if len(vals) < n:
        vals = [float(x) for x in _NUM.findall(text)]
    if len(vals) < n:
        return ParseResult(False, None, f"expected {n} scores, found {len(vals)}")
    return ParseResult(True, [min(hi, max(lo, v)) for v in vals[:n]])


def parse_yes_no(text: str) -> ParseResult:
    t = text.strip().lower()
    m = re.search(r"\b(yes|no|true|false|sufficient|insufficient)\b", t)
    if not m:
        return ParseResult(False, None, "no yes/no found")
    return ParseResult(True, m.group(1) in ("yes", "true", "sufficient"))


def with_reask(llm, request: ChatRequest, parser: Callable[[str], ParseResult], max_reasks: int = 1,
               instruction: str = "Your previous reply could not be parsed ({error}). Reply again with only the requested format.",
               on_call: Callable[[ChatRequest, Completion, ParseResult], None] | None = None) -> tuple[ParseResult, list[Completion]]:
    """Ask, parse, and re-ask up to ``max_reasks`` times on failure. ``on_call`` sees every call
    (reasoners pass ``Trace.llm`` through it)."""
    comps: list[Completion] = []
    req = request
    for attempt in range(max_reasks + 1):
        comp = llm.generate([req])[0]
        comps.append(comp)
        res = parser(comp.text)
        if on_call is not None:
            on_call(req, comp, res)
        if res.ok:
            return res, comps
        req = ChatRequest(
            messages=req.messages + (Message("assistant", comp.text), Message("user", instruction.format(error=res.error))),
            temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens, n=1, stop=req.stop,
            seed=req.seed, logprobs=req.logprobs, sample_index=req.sample_index,
        )
    return res, comps
