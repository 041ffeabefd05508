"""Reply parsers: every way a reasoner or judge reads an LLM reply lives here. Each parser
returns a :class:`ParseResult`; unparseable output is a failed result (counted as a parse
failure in the metrics), never an exception.

Generic: :func:`parse_json`, :func:`parse_list`, :func:`parse_score(s) <parse_scores>`,
:func:`parse_yes_no`. Reasoner formats: :func:`parse_answers` (``Answer: a; b`` lines: CoT,
RAG, ToG, ReKnoS), :func:`parse_answer_field` (one JSON/first-line answer: RAG-text, SubQRAG),
:func:`parse_candidate_scores` (ToG/ReKnoS pruning scores), :func:`parse_cypher`,
:func:`parse_schema`, :func:`parse_hypothesis` (SGR), :func:`parse_triple_answer` and
:func:`parse_first_line` (SubQRAG).

The re-ask loop reasoners use is :func:`kgreason.reasoners.base.ask`; :func:`with_reask` is the
same policy (same continuation, :func:`reask_request`) for callers without a trace (judges).
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
_FENCE_OPEN = re.compile(r"```(?:json)?\s*", re.I)


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


def truncated_json_list(text: str) -> list[str] | None:
    """The complete string/number items of a JSON array cut off before its ``]`` (a reply that
    ran into ``max_tokens``), or ``None`` when ``text`` holds no unclosed array. An item cut in the
    middle is dropped: it is not what the model meant to write."""
    m = _FENCE_OPEN.search(text)
    body = text[m.end():] if m else text
    start = body.find("[")
    if start < 0 or body[:start].strip() or _balanced(body, "[", "]"):
        return None
    dec, i, out = json.JSONDecoder(), start + 1, []
    while True:
        while i < len(body) and body[i] in " \t\r\n,":
            i += 1
        try:
            item, i = dec.raw_decode(body, i)
        except ValueError:
            return out
        if isinstance(item, (str, int, float)) and str(item).strip():
            out.append(str(item).strip())


def _clean_item(x: str) -> str:
    return x.strip().strip("[]").strip().strip("\"'").strip().rstrip(".").strip()


def parse_list(text: str) -> ParseResult:
    """A list of strings: a JSON array (text around it ignored; a cut-off array gives its
    complete items, noted in ``error`` on a successful result), else numbered/bulleted lines,
    else a ``;``/``,`` list (a final ``and``/``or`` after commas splits too). Repeats are dropped, first
    place kept (a small model loops on one item until ``max_tokens``)."""
    res = _parse_list(text)
    return ParseResult(res.ok, list(dict.fromkeys(res.value)), res.error) if res.value else res


def _parse_list(text: str) -> ParseResult:
    js = parse_json(text)
    if js.ok and isinstance(js.value, list):
        return ParseResult(True, [str(x).strip() for x in js.value if str(x).strip()])
    if js.ok and isinstance(js.value, dict):
        for v in js.value.values():
            if isinstance(v, list):
                return ParseResult(True, [str(x).strip() for x in v if str(x).strip()])
    cut = truncated_json_list(text)
    if cut is not None:
        if cut:
            return ParseResult(True, cut, f"JSON list cut off: kept its {len(cut)} complete items")
        return ParseResult(False, [], "JSON list cut off before its first complete item")
    lines = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", ln).strip() for ln in text.strip().splitlines()]
    lines = [ln for ln in lines if ln]
    if len(lines) > 1:
        return ParseResult(True, [c for c in (_clean_item(ln) for ln in lines) if c])
    if lines:
        items = [c for x in re.split(r"[;,]", lines[0]) for c in [_clean_item(x)] if c]
        if items and len(items) > 1:
            items[-1:] = _split_final_conjunction(items[-1])
        if items:
            return ParseResult(True, items)
    return ParseResult(False, [], "empty reply")


_NUM = re.compile(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?")
# "1." / "2:" / "3)" / "Candidate 4 -" opening a line: a list number, never a score
_LIST_NUMBER = re.compile(r"^\s*(?:[-*•]\s*)?(?:(?:candidate|relation|entity|option|item)\s*)?#?\d+\s*[.:)\-]?(?=\s)", re.I | re.M)
# the same, followed by the score on the line: "1: 0.5", "2. 0.9", "Candidate 2 (Score: 0.7)", "1) score = 0.1"
_INDEXED_SCORE = re.compile(
    r"^\s*(?:[-*•]\s*)?(?:(?:candidate|relation|entity|option|item)\s*)?#?(\d+)\s*[.:)\-]?\s*"
    r"(?:\(?\s*score\s*[:=]?\s*)?([-+]?\d*\.?\d+)\s*(%?)", re.I | re.M)


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
        vals = [float(x) for x in _NUM.findall(_LIST_NUMBER.sub("", text))]
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


REASK_MESSAGE = "Your previous reply could not be parsed ({error}). Reply again with only the requested format."


def reask_request(request: ChatRequest, reply: str, error: str, message: str = REASK_MESSAGE) -> ChatRequest:
    """``request`` continued with the unparseable ``reply`` and the correction ``message``
    (``{error}`` = the parser's error); sampling settings are kept, ``n`` becomes 1."""
    return ChatRequest(
        messages=request.messages + (Message("assistant", reply), Message("user", message.format(error=error))),
        temperature=request.temperature, top_p=request.top_p, max_tokens=request.max_tokens, n=1,
        stop=request.stop, seed=request.seed, logprobs=request.logprobs, sample_index=request.sample_index,
    )


def with_reask(llm, request: ChatRequest, parser: Callable[[str], ParseResult], max_reasks: int = 1,
               instruction: str = REASK_MESSAGE,
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
        req = reask_request(req, comp.text, res.error, instruction)
    return res, comps


# --------------------------------------------------------------------------- reasoner formats

def _split_final_conjunction(x: str) -> list[str]:
    """The last item of a comma list: ``"and C"`` → ``["C"]`` (Oxford comma), ``"B and C"`` →
    ``["B", "C"]``; else ``[x]``."""
    m = re.match(r"(?:and|or)\s+(.+)$", x, re.I)
    if m:
        return [m.group(1).strip()]
    halves = re.split(r"\s+(?:and|or)\s+", x)
    return [h.strip() for h in halves] if len(halves) == 2 and all(halves) else [x]


def split_prose_list(text: str) -> list[str]:
    """Names from an answer written as a list: ``;`` or ``|`` separated, else a comma list in
    prose (``A, B and C``, ``A, B, and C``). One comma without a conjunction is read as part of
    a name (``What's Up, Doc?``), and so is an ``and`` with no comma before it (``Pride and
    Prejudice``); a name with ``and`` that ends a comma list is split (``X, Romeo and Juliet`` →
    three names), the price of reading ``A, B and C``.

    >>> split_prose_list("At Long Last Love, A Short Film About Love, American Buffalo, and Black Venus")
    ['At Long Last Love', 'A Short Film About Love', 'American Buffalo', 'Black Venus']
    """
    if re.search(r"[;|]", text):
        parts = re.split(r"\s*[;|]\s*", text)
    else:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) == 2 and _split_final_conjunction(parts[1]) == [parts[1]]:
            parts = [text]
        elif len(parts) > 1:
            parts[-1:] = _split_final_conjunction(parts[-1])
    return [c for c in (_clean_item(p) for p in parts) if c]


# "The films directed by X are A, B" / "The answer is A": a lead-in that is a sentence (it has a
# lower-case word of 3+ letters and a lower-case verb), not a title such as "The Man Who Was Thursday"
_LEAD_IN = re.compile(r"^(?P<lead>(?:the|these|those|his|her|their|its|it|they)\b[^,;:]*?)\s+"
                      r"(?:is|are|was|were|include|includes|would be)\s*:?\s+(?P<rest>\S.*)$", re.I)


def strip_lead_in(text: str) -> str:
    """``text`` without a sentence lead-in such as ``The answer is`` / ``The films ... are``."""
    m = _LEAD_IN.match(text.strip())
    if not m:
        return text.strip()
    verb = text.strip()[len(m.group("lead")):].split()[0]
    if verb != verb.lower() or not re.search(r"(?:^|\s)[a-z]{3,}\b", m.group("lead")):
        return text.strip()
    return m.group("rest").strip()


# a KG relation identifier ("directed_by", "film.film.directed_by"): never an answer, even when a
# reply copies the prompt's "head | relation | tail" facts and the "|" split lands on it
_RELATION_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[._][a-z0-9]+)+$")

_ANSWER_PREFIX = re.compile(r"^\s*\**\s*(?:final\s+)?answers?\s*\**\s*[:：]\s*\**\s*", re.I)

_ANSWER = re.compile(r"^\s*\**\s*(?:final\s+)?answers?\s*\**\s*[:：]\s*\**\s*(.*)$", re.I | re.M)
# the answer line written at the end of the last sentence: "... directed by X. Answer: X"
_ANSWER_INLINE = re.compile(r"[.!?]\s+\**(?:final\s+)?answers?\**\s*[:：]\s*\**\s*(\S.*)$", re.I | re.M)
_ABSTAIN = ("unknown", "none", "n/a")
_PLACEHOLDER = re.compile(r"^<[^<>]*>$")  # the prompt's "<answer>" copied back
# prose forms small models use instead: "The answer (to this question) is: X", "The answers are X"
_ANSWER_PROSE = re.compile(
    r"\b(?:final\s+)?answers?(?:\s+to\s+(?:this|the)\s+question)?\s+(?:is|are)\s*[:：]?\s*(.+)$", re.I | re.M)


def parse_answers(text: str) -> ParseResult:
    """Answers from the last ``Answer: ...`` line (``;``/``|``-separated, a JSON list, or a
    list in prose, :func:`split_prose_list`; a repeated ``Answer:`` prefix and a sentence
    lead-in such as ``The films ... are`` are dropped).

    The answer line may also close the last sentence (``... by X. Answer: X``). An answer line that
    is only ``None`` / ``unknown`` / ``n/a`` is read as an abstention: ``ok`` with no answers.
    When no such line (or prose form) exists, a reply of one line made only of names (``Thriller``,
    ``A Single Shot; Hitchcock``) is read as the answer line. Otherwise the last non-empty line is
    read and the result is marked failed while still carrying those answers, so a terse model
    gets scored; copied ``head | relation | tail`` facts are never a bare answer.

    >>> parse_answers("Step 1 ...\\nAnswer: Paris; Lyon").value
    ['Paris', 'Lyon']
    >>> parse_answers("The answer to this question is: 2000.").value
    ['2000']
    """
    hits = _ANSWER.findall(text) or _ANSWER_INLINE.findall(text) or _ANSWER_PROSE.findall(text)
    ok = bool(hits)
    line = hits[-1] if hits else next((ln for ln in reversed(text.strip().splitlines()) if ln.strip()), "")
    line = line.strip().strip("*{}").strip()
    if line.startswith("["):
        try:
            vals = [str(v).strip() for v in json.loads(line)]
            return ParseResult(ok, [v for v in vals if v], "" if ok else "no 'Answer:' line")
        except (ValueError, TypeError):
            line = line.strip("[]")
    # "Answer: A; Answer: B": the prefix repeated inside the line
    pieces = [_ANSWER_PREFIX.sub("", p) for p in re.split(r"\s*[;|]\s*", line)]
    parts = [x for p in pieces for x in split_prose_list(strip_lead_in(p))] if len(pieces) == 1 else \
        [_clean_item(_ANSWER_PREFIX.sub("", p)) for p in pieces]
    facts = any(_RELATION_NAME.match(p) for p in parts)
    if ok and parts and all(p.lower().rstrip(".") in _ABSTAIN for p in parts):
        return ParseResult(True, [], "the model declined to answer")  # read: an abstention, not unreadable
    parts = [p for p in parts if p and p.lower() not in _ABSTAIN and not _RELATION_NAME.match(p)
             and not _PLACEHOLDER.match(p)]
    if not parts:
        return ParseResult(False, [], "empty answer")
    if not ok:  # a one-line reply of names only is an answer line without its prefix
        ok = not facts and len(text.strip().splitlines()) == 1 and all(_looks_like_a_name(p) for p in parts)
    return ParseResult(ok, list(dict.fromkeys(parts)), "" if ok else "no 'Answer:' line")


_SENTENCE_WORD = re.compile(r"^(?:i|it|he|she|they|we|you|this|that|there)\b|\b(?:is|are|was|were|has|have|had|"
                            r"am|not|did|does|know|sure|sorry|think|believe|cannot|can't|don't)\b")


def _looks_like_a_name(part: str) -> bool:
    """A short answer item, not a sentence: at most 8 words, no pronoun opening and no
    lower-case verb such as ``is`` or ``think`` (a title like ``Life is Beautiful`` is then
    counted unparsed, though still scored)."""
    return len(part.split()) <= 8 and not _SENTENCE_WORD.search(part)


def parse_answer_field(text: str) -> ParseResult:
    """One answer string: the ``answer`` field of a JSON reply, else the first non-empty line
    (``Answer:`` prefix and a sentence lead-in such as ``The answer is`` dropped). Failed (value ``""``) when that is empty."""
    js = parse_json(text)
    if js.ok and isinstance(js.value, dict) and "answer" in js.value:
        ans = str(js.value["answer"]).strip()
    else:
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        ans = strip_lead_in(_ANSWER_PREFIX.sub("", lines[0])).rstrip(".").strip() if lines else ""
    return ParseResult(bool(ans), ans, "" if ans else "empty answer")


def parse_first_line(text: str) -> ParseResult:
    """The first line of the reply, stripped; failed when the reply is blank."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return ParseResult(bool(line), line, "" if line else "empty reply")


def parse_candidate_scores(text: str, names: list[str] | tuple[str, ...]) -> ParseResult:
    """One score in [0, 1] per candidate name.

    Name-keyed replies (``"film.film (backward): 0.8"``, ToG's ``"{name (Score: 0.8)}"``, or a
    JSON object) are read by name, unmentioned candidates scoring 0; otherwise the first
    ``len(names)`` numbers are taken in order (:func:`parse_scores`).

    >>> parse_candidate_scores("film.film (backward): 0.9; film.film: 0.2", ["film.film", "film.film (backward)"]).value
    [0.2, 0.9]
    """
    found: dict[int, float] = {}
    for i, name in enumerate(names):
        pat = re.compile(r"(?<![\w.~])" + re.escape(name) + r"\"?\s*(?:\(\s*score\s*[:=]?\s*|[:=]\s*)([-+]?\d*\.?\d+)", re.I)
        m = pat.search(text)
        if m:
            found[i] = min(1.0, max(0.0, float(m.group(1))))
    if found:
        return ParseResult(True, [found.get(i, 0.0) for i in range(len(names))])
    for m in _INDEXED_SCORE.finditer(text):
        k = int(m.group(1))
        if "." in m.group(1) or not 1 <= k <= len(names):
            found = {}
            break
        v = float(m.group(2)) / (100.0 if m.group(3) else 1.0)
        found.setdefault(k - 1, min(1.0, max(0.0, v)))
    if found:
        return ParseResult(True, [found.get(i, 0.0) for i in range(len(names))])
    return parse_scores(text, len(names))


_CYPHER_BLOCK = re.compile(r"```(?:cypher|sql)?\s*(.*?)```", re.S | re.I)
_CYPHER_START = re.compile(r"\b(MATCH|OPTIONAL\s+MATCH|WITH|UNWIND|RETURN|CALL)\b", re.I)


def parse_cypher(text: str) -> ParseResult:
    """The query in a fenced block, else the text from the first read clause on."""
    m = _CYPHER_BLOCK.search(text)
    q = m.group(1).strip() if m else ""
    if not q:
        s = _CYPHER_START.search(text)
        q = text[s.start():].strip() if s else ""
    return ParseResult(True, q) if q else ParseResult(False, None, "no Cypher query found")


def parse_schema(text: str) -> ParseResult:
    """``{"schema": [[v_i, r_i, v_j], ...], "answer": "?x"}`` (also accepts a bare list and
    dicts with head/relation/tail keys)."""
    js = parse_json(text)
    if not js.ok:
        return js
    val = js.value
    triples = val.get("schema") if isinstance(val, dict) else val
    if not isinstance(triples, list):
        return ParseResult(False, None, "expected a 'schema' list of [entity, relation, entity]")
    out = []
    for t in triples:
        if isinstance(t, dict):
            t = [t.get("head", t.get("subject")), t.get("relation"), t.get("tail", t.get("object"))]
        if isinstance(t, (list, tuple)) and len(t) == 3 and all(isinstance(x, str) and x.strip() for x in t):
            out.append(tuple(x.strip() for x in t))
    if not out:
        return ParseResult(False, None, "schema has no [entity, relation, entity] triple")
    ans = val.get("answer") if isinstance(val, dict) else None
    return ParseResult(True, {"schema": out, "answer": ans if isinstance(ans, str) else None})


_HYP_FIELD = re.compile(r'"hypothesis"\s*:\s*"((?:[^"\\]|\\.)*)"', re.S)
_ANS_FIELD = re.compile(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)"', re.S)
_CLAIM_JSON = re.compile(r'\[\s*"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\]')
_CLAIM_PIPE = re.compile(r"^\s*(?:[-*•]\s*)?([^|\n]+?)\s*\|\s*([^|\n]+?)\s*\|\s*([^|\n]+?)\s*$", re.M)
# the answer markers of a prose hypothesis, strongest first: "(answer: X)", "Current best answer
# entity: X" / "... is X", a line ending "the answer is X."
_HYP_ANSWER_PROSE = (
    re.compile(r"\(answer:\s*([^()\n]+)\)", re.I),
    re.compile(r"current best answer(?: entity)?\s*(?::|is)\s*\**([^\n]+?)\**\s*\.?\s*$", re.I | re.M),
    re.compile(r"\bthe answer is\s+\**([^\n(]+?)\**\s*\.?\s*$", re.I | re.M),
)
_HYP_LEAD = re.compile(r"^\s*(?:next\s+)?hypothesis\s*:\s*", re.I)


def _unescape(x: str) -> str:
    try:
        return json.loads(f'"{x}"')
    except ValueError:
        return x


def _hypothesis_value(hypothesis: str, claims: list, ans: Any) -> dict:
    if isinstance(ans, list):
        answers = [str(x).strip() for x in ans if x is not None and str(x).strip()]
    else:
        answers = split_prose_list(strip_lead_in(str(ans or "")))
    return {"hypothesis": hypothesis, "claims": claims, "answer": answers[0] if answers else "", "answers": answers}


def parse_hypothesis(text: str) -> ParseResult:
    """``{"hypothesis": str, "claims": [(h, r, t), ...], "answer": str, "answers": [str]}`` from
    a JSON object (claims that are not triples are dropped). ``answers`` is the answer as a list
    (a JSON list, or a list in prose split by :func:`split_prose_list`); ``answer`` is its first
    item, SGR's one answer ``a_i`` per path.

    Two replies a real model writes are read too (Qwen2.5-Coder-1.5B, docs/validation.md):
    JSON that does not load (a stray ``]``, cut off at the token limit) keeps the fields that
    are whole (``"hypothesis"``, the 3-string claims, ``"answer"``); and the same three parts in
    prose (``Next hypothesis: … (answer: X)``, evidence lines ``h | r | t``, ``Current best answer
    entity: X``, or a line ending ``… the answer is X.``). Without an answer it is still unreadable."""
    js = parse_json(text)
    if js.ok and isinstance(js.value, dict):
        v = js.value
        claims = [tuple(str(x).strip() for x in c) for c in v.get("claims", []) or []
                  if isinstance(c, (list, tuple)) and len(c) == 3]
        return ParseResult(True, _hypothesis_value(str(v.get("hypothesis", "")), claims, v.get("answer")))
    if '"answer"' in text:  # an object that does not load (or loads only in part): its whole fields
        ans = _ANS_FIELD.search(text)
        if ans:
            hyp = _HYP_FIELD.search(text)
            claims = [tuple(_unescape(x).strip() for x in m.groups()) for m in _CLAIM_JSON.finditer(text)]
            return ParseResult(True, _hypothesis_value(_unescape(hyp.group(1)) if hyp else "", claims,
                                                       _unescape(ans.group(1))))
    m = next((x for x in (p.search(text) for p in _HYP_ANSWER_PROSE) if x), None)
    if m and '"hypothesis"' not in text:  # prose: an explicit answer marker is required
        ans = m.group(1).strip().strip("*").strip()
        claims = [tuple(x.strip().strip("*") for x in c.groups()) for c in _CLAIM_PIPE.finditer(text)]
        first = _HYP_LEAD.sub("", text.strip()).split("\n", 1)[0]
        hyp = re.sub(r"\s*\(answer:[^()\n]*\)", "", first).strip()
        if ans:
            return ParseResult(True, _hypothesis_value(hyp, claims, ans))
    return ParseResult(False, None, "expected a JSON object with hypothesis/claims/answer")


def parse_triple_answer(text: str) -> ParseResult:
    """SubQRAG's answer-from-triples reply, a JSON object ``{"answer", "used", "sufficient"}``:
    value ``{"answer": raw answer or "", "used": [int indices], "sufficient": bool}``
    (``sufficient`` defaults to true; non-integer ``used`` items are dropped)."""
    js = parse_json(text)
    if not (js.ok and isinstance(js.value, dict)):
        return ParseResult(False, None, "expected a JSON object with answer/used/sufficient")
    v = js.value
    used: list[int] = []
    for j in v.get("used") or []:
        try:
            used.append(int(j))
        except (TypeError, ValueError):
            continue
    return ParseResult(True, {"answer": v.get("answer") or "", "used": used,
                              "sufficient": bool(v.get("sufficient", True))})
