"""Read-only guard for LLM-generated Cypher (SGR §3.4.1, Eq. 16–17: ``Exec(c_q, G)``).

The guard is the first of two layers; the second is the engine's own read-only mode (kuzu: a
``Database(read_only=True)``; FalkorDB: ``GRAPH.RO_QUERY``; Neo4j: ``execute_read``).

What :func:`check_read_only` does, in order:

1. Lex it: string literals (``'..'``/``".."`` with backslash escapes), backtick identifiers
   (```a``b```), line and block comments. Unterminated literals/comments are rejected.
2. NFKC-normalise the code between them (full-width ``ＣＲＥＡＴＥ`` becomes ``CREATE``). String
   literals and identifiers are data and stay exactly as written (``'8½ Women'`` must still find
   the entity named so; NFKC would turn it into ``'81⁄2 Women'``). If normalising the code
   would create a quote, backtick or comment marker that the raw text did not have, the query is
   rejected rather than re-read.
0. Before any of this, size limits: at most :data:`MAX_QUERY_CHARS` characters and a bracket
   nesting depth of :data:`MAX_NESTING` (deeper literals overflow the engine's parser stack; the
   sandbox of :mod:`kgreason.kg.sandbox` bounds whatever still gets through).
3. Reject any non-ASCII or control character outside string literals (homoglyphs such as a
   Cyrillic ``С``, zero-width spaces), any ``;`` except one trailing terminator (multiple
   statements), ``CALL {`` subqueries, and ``CALL`` of a procedure outside :data:`READ_PROCEDURES`.
4. Case-fold the word tokens outside literals and reject any in :data:`WRITE_KEYWORDS`
   (``CREATE MERGE DELETE DETACH SET REMOVE DROP LOAD FOREACH COPY ...``) or naming ``apoc``/
   ``dbms``. Comments are stripped twice, once replaced by a space and once by nothing, and both
   token streams are checked, so ``CRE/**/ATE`` is caught.
5. Require the statement to start with a read clause (``MATCH``, ``OPTIONAL``, ``WITH``,
   ``UNWIND``, ``RETURN``, or an allow-listed ``CALL``).

Keywords inside string literals and backticks (``WHERE n.name = 'SET'``) are data, not code, and
are accepted.

>>> check_read_only("MATCH (n:Entity) WHERE n.name = 'DELETE me' RETURN n.name")
"MATCH (n:Entity) WHERE n.name = 'DELETE me' RETURN n.name"
>>> check_read_only("MATCH (n) DETACH DELETE n")
Traceback (most recent call last):
...
kgreason.kg.cypher_guard.CypherRejected: write keyword 'detach' outside string literals
"""

from __future__ import annotations

import re
import unicodedata

WRITE_KEYWORDS = frozenset({
    "create", "merge", "delete", "detach", "set", "remove", "drop", "load", "foreach", "alter",
    "copy", "install", "attach", "detach", "export", "import", "checkpoint", "begin", "commit",
    "rollback", "truncate", "grant", "revoke", "deny", "rename", "terminate", "use", "periodic",
    "transactions",
})
FORBIDDEN_NAMESPACES = frozenset({"apoc", "dbms", "gds"})
READ_PROCEDURES = frozenset({
    # Neo4j built-ins that only read the catalogue
    "db.labels", "db.relationshiptypes", "db.propertykeys", "db.schema.nodetypeproperties",
    "db.schema.reltypeproperties", "db.schema.visualization", "db.indexes",
    # kuzu table functions (not current_setting: it hands the model the machine's home directory
    # and file search path, and no setting helps answer a question over the KG)
    "show_tables", "table_info", "show_connection", "db_version",
})
READ_STARTS = frozenset({"match", "optional", "with", "unwind", "return", "call"})

MAX_QUERY_CHARS = 8000
MAX_NESTING = 64

_WORD = re.compile(r"[a-z_][a-z0-9_]*")
_LIMIT_TAIL = re.compile(r"\bLIMIT\s+(\d+|\$\w+)\s*$", re.I)


class CypherRejected(ValueError):
    """An LLM-generated query was refused by the read-only guard; ``reason`` says why."""

    def __init__(self, reason: str, query: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.query = query


def _lex(text: str) -> tuple[list[tuple[str, str]], bool]:
    """Split into ``(kind, text)`` pieces: ``code``, ``string``, ``ident`` (backticks), ``comment``.

    Returns the pieces and whether a comment was seen. Raises CypherRejected on unterminated
    literals or comments.
    """
    out: list[tuple[str, str]] = []
    i, n, buf, had_comment = 0, len(text), [], False

    def flush() -> None:
        if buf:
            out.append(("code", "".join(buf)))
            buf.clear()

    while i < n:
        ch = text[i]
        if ch in ("'", '"'):
            flush()
            j, esc = i + 1, False
            while j < n:
                c = text[j]
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == ch:
                    break
                j += 1
            if j >= n:
                raise CypherRejected("unterminated string literal")
            out.append(("string", text[i : j + 1]))
            i = j + 1
        elif ch == "`":
            flush()
            j = i + 1
            while True:
                k = text.find("`", j)
                if k < 0:
                    raise CypherRejected("unterminated backtick identifier")
                if k + 1 < n and text[k + 1] == "`":  # doubled backtick = escaped
                    j = k + 2
                    continue
                break
            out.append(("ident", text[i : k + 1]))
            i = k + 1
        elif text.startswith("//", i):
            flush()
            k = text.find("\n", i)
            k = n if k < 0 else k
            out.append(("comment", text[i:k]))
            had_comment = True
            i = k
        elif text.startswith("/*", i):
            flush()
            k = text.find("*/", i + 2)
            if k < 0:
                raise CypherRejected("unterminated block comment")
            out.append(("comment", text[i : k + 2]))
            had_comment = True
            i = k + 2
        else:
            buf.append(ch)
            i += 1
    flush()
    return out, had_comment


def _tokens(pieces: list[tuple[str, str]], comment_sep: str) -> list[str]:
    """Case-folded code text with literals/identifiers replaced by placeholders, then tokens."""
    parts = []
    for kind, txt in pieces:
        if kind == "code":
            parts.append(txt)
        elif kind == "comment":
            parts.append(comment_sep)
        else:
            parts.append(" \x00 ")  # a literal: never a keyword
    code = "".join(parts).casefold()
    return re.findall(r"[a-z_][a-z0-9_]*|[{}();.]|\x00", code)


def check_read_only(query: str) -> str:
    """Return the normalised query if it is a single read-only statement, else raise
    :class:`CypherRejected` with the reason (see the module docstring for the rules)."""
    if not isinstance(query, str) or not query.strip():
        raise CypherRejected("empty query", str(query))
    if len(query) > MAX_QUERY_CHARS:
        raise CypherRejected(f"query of {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted", query)
    try:
        raw_pieces, had_comment = _lex(query)
    except CypherRejected as e:
        raise CypherRejected(e.reason, query) from None
    pieces = [(kind, unicodedata.normalize("NFKC", txt) if kind == "code" else txt) for kind, txt in raw_pieces]
    for (kind, txt), (_, raw) in zip(pieces, raw_pieces):
        if kind == "code" and any(txt.count(m) != raw.count(m) for m in ("'", '"', "`", "//", "/*")):
            raise CypherRejected("a character outside string literals normalises to a quote, backtick or "
                                 "comment marker", query)
    depth = deepest = 0
    for kind, txt in pieces:
        if kind != "code":
            continue
        for c in txt:
            if c in "([{":
                depth += 1
                deepest = max(deepest, depth)
            elif c in ")]}":
                depth -= 1
    if deepest > MAX_NESTING:
        raise CypherRejected(f"brackets nested {deepest} deep; at most {MAX_NESTING} are accepted", query)
    for kind, txt in pieces:
        if kind == "code":
            bad = [c for c in txt if ord(c) > 126 or (ord(c) < 32 and c not in "\t\r\n")]
            if bad:
                raise CypherRejected(f"non-ASCII or control character {bad[0]!r} outside string literals", query)
        elif kind == "ident" and any(ord(c) < 32 for c in txt):
            raise CypherRejected("control character in identifier", query)
    # statement separators: only one trailing ';' is allowed
    code_idx = [k for k, (kind, _) in enumerate(pieces) if kind == "code"]
    for k in code_idx:
        txt = pieces[k][1]
        if ";" in txt:
            last_code = k == code_idx[-1] and all(pieces[j][0] == "comment" for j in range(k + 1, len(pieces)))
            stripped = txt.rstrip()
            if not (last_code and stripped.endswith(";") and ";" not in stripped[:-1]):
                raise CypherRejected("multiple statements (';' outside string literals)", query)
    streams = [_tokens(pieces, " ")]
    if had_comment:
        streams.append(_tokens(pieces, ""))
    for toks in streams:
        words = [t for t in toks if _WORD.fullmatch(t)]
        for w in words:
            if w in WRITE_KEYWORDS:
                raise CypherRejected(f"write keyword {w!r} outside string literals", query)
            if w in FORBIDDEN_NAMESPACES:
                raise CypherRejected(f"procedure namespace {w!r} is not allowed", query)
        for j, t in enumerate(toks):
            if t != "call":
                continue
            if j + 1 < len(toks) and toks[j + 1] == "{":
                raise CypherRejected("CALL { ... } subqueries are not allowed", query)
            name = []
            k = j + 1
            while k < len(toks) and (_WORD.fullmatch(toks[k]) or toks[k] == "."):
                name.append(toks[k])
                k += 1
            proc = "".join(name)
            if proc not in READ_PROCEDURES:
                raise CypherRejected(f"CALL of procedure {proc or '?'!r} is not in the read-only allowlist", query)
        if not words or words[0] not in READ_STARTS:
            raise CypherRejected(f"a read query must start with MATCH/OPTIONAL MATCH/WITH/UNWIND/RETURN, got {words[0] if words else '?'!r}", query)
    # the normalised text is what runs; strip comments and the trailing ';'
    text = "".join(" " if kind == "comment" else txt for kind, txt in pieces).strip()
    return text[:-1].rstrip() if text.endswith(";") else text


def enforce_limit(query: str, limit: int) -> str:
    """Clamp a trailing ``LIMIT n`` to ``limit`` (a ``LIMIT $param`` becomes ``LIMIT limit``) or
    append ``LIMIT limit``. The caller also caps the
    rows it fetches, so a query whose shape defeats this (``UNION``) is still bounded."""
    m = _LIMIT_TAIL.search(query)
    if m:
        g = m.group(1)
        n = int(limit) if g.startswith("$") else min(int(g), int(limit))
        return query[: m.start()] + f"LIMIT {n}"
    return f"{query.rstrip()} LIMIT {int(limit)}"


def query_limit(query: str) -> int | None:
    """The query's own trailing ``LIMIT n`` (None when it has none or a ``LIMIT $param``)."""
    m = _LIMIT_TAIL.search(query)
    return int(m.group(1)) if m and not m.group(1).startswith("$") else None


def set_limit(query: str, n: int) -> str:
    """``query`` with its trailing ``LIMIT`` replaced by (or ended with) ``LIMIT n``."""
    m = _LIMIT_TAIL.search(query)
    return (query[: m.start()] if m else query.rstrip() + " ") + f"LIMIT {int(n)}"


def masked_code(query: str) -> str:
    """``query`` with string literals, backtick names and comments blanked (same length), so that
    keywords and brackets are found only in code."""
    out, i, n = list(query), 0, len(query)
    while i < n:
        c = query[i]
        if c in "'\"`":
            j = i + 1
            while j < n and query[j] != c:
                j += 2 if query[j] == "\\" and c != "`" else 1
            for k in range(i, min(j + 1, n)):
                out[k] = "x"
            i = j + 1
        elif query.startswith("//", i):
            j = query.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif query.startswith("/*", i):
            j = query.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                out[k] = " "
            i = j
        else:
            i += 1
    return "".join(out)


_CLAUSE = re.compile(r"\b(RETURN|ORDER\s+BY|SKIP|LIMIT|UNION)\b", re.I)


def order_by_columns(query: str) -> str | None:
    """``query`` (no ``LIMIT`` of its own, or one at its end) with ``ORDER BY`` every column of
    its final ``RETURN`` (the alias when it has one) inserted before that ``LIMIT``, so a cut
    keeps the same rows whatever order the database stores them in; None when the query orders
    its rows itself, is a ``UNION`` or has no final ``RETURN`` to order by."""
    masked = masked_code(query)
    depth, top = 0, []
    for m in _CLAUSE.finditer(masked):
        depth = masked[: m.start()].count("(") + masked[: m.start()].count("[") + masked[: m.start()].count("{") \
            - masked[: m.start()].count(")") - masked[: m.start()].count("]") - masked[: m.start()].count("}")
        if depth == 0:
            top.append((m.group(1).upper().split()[0], m.start(), m.end()))
    if any(k == "UNION" for k, *_ in top):
        return None
    returns = [x for x in top if x[0] == "RETURN"]
    if not returns:
        return None
    _, _, r_end = returns[-1]
    after = [x for x in top if x[1] > r_end]
    if any(k == "ORDER" for k, *_ in after):
        return None
    stop = min((x[1] for x in after), default=len(query))
    items, start, level = [], r_end, 0
    body = masked[r_end:stop]
    for i, c in enumerate(body):
        level += c in "([{"
        level -= c in ")]}"
        if c == "," and level == 0:
            items.append((start, r_end + i))
            start = r_end + i + 1
    items.append((start, stop))
    cols = []
    for a, b in items:
        code, text = masked[a:b], query[a:b]
        code_s = re.sub(r"^\s*DISTINCT\b", "", code, flags=re.I)
        text = text[len(code) - len(code_s):] if len(code_s) != len(code) else text
        m = list(re.finditer(r"\bAS\s+", code_s, re.I))
        col = text[m[-1].end():] if m else text
        col = col.strip()
        if not col or col == "*":
            return None
        cols.append(col)
    head, tail = query[:stop].rstrip(), query[stop:]
    return f"{head} ORDER BY {', '.join(cols)}" + (f" {tail.strip()}" if tail.strip() else "")


__all__ = ["CypherRejected", "check_read_only", "enforce_limit", "query_limit", "set_limit", "order_by_columns",
           "WRITE_KEYWORDS", "READ_PROCEDURES", "MAX_QUERY_CHARS", "MAX_NESTING"]
