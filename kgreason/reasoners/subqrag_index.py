"""SubQRAG offline indexing (subqrag.txt §2.1, Eq. 1): an LLM reads each corpus passage and writes
``⟨h, r, t⟩`` triples; they are normalised, de-duplicated and compiled into a :class:`KG`.

The same validation is reused online by SubQRAG's dynamic graph update (§2.3, Eq. 4), so both
stages agree on what a well-formed triple is: there the read passages go to one extraction guided
by the sub-question (:func:`guided_extraction_request`, :func:`guided_triple_parser`), and a read
passage's offline extraction (:attr:`IndexResult.by_passage`) is read from the index.

Resumable and cached per passage::

    <index_dir>/<corpus_hash>/extractions.jsonl   # one row per finished passage (append + flush)
    <index_dir>/<corpus_hash>/kg/                 # KG.save of the de-duplicated triples
    <index_dir>/<corpus_hash>/provenance.json     # "h\\tr\\tt" -> [passage ids]
    <index_dir>/<corpus_hash>/cost.json           # calls, tokens, USD (summed Completion.usage)

``corpus_hash`` covers the passages, the model, the prompt and the reply parser's version
(:data:`PARSER_VERSION`: the log stores parsed triples), so changing any of them starts a
fresh index and an interrupted run re-uses every finished passage without repeating its call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from kgreason import progress
from kgreason.storage.embedstore import store_lock
from kgreason.kg.store import KG
from kgreason.llm.accounting import credit_cached, credit_paid, current_payer
from kgreason.llm.parsing import ParseResult, parse_json
from kgreason.reasoners.base import load_prompt, load_schema, render
from kgreason.textio import utf8_safe
from kgreason.types import ChatRequest, Usage, to_jsonable

logger = logging.getLogger(__name__)
_WS = re.compile(r"\s+")
Triple = tuple[str, str, str]


def normalise_text(s: str) -> str:
    """Collapse whitespace and strip surrounding punctuation/quotes (surface case is kept)."""
    return _WS.sub(" ", str(s)).strip().strip("\"'").strip()


def triple_key(t: Triple) -> tuple[str, str, str]:
    """De-duplication key: case-folded, whitespace-normalised (§2.1 "checks whether a newly
    generated triple already exists")."""
    return tuple(normalise_text(x).casefold() for x in t)  # type: ignore[return-value]


# bump when parse_triples reads replies differently: the extraction log stores parsed triples
# (3: the complete items of a list cut off at max_tokens are kept, also when cut after a comma;
# 4: a list broken by an unescaped quote keeps its items whose three strings are whole)
PARSER_VERSION = "4"

# one ["h", "r", "t"] item read without JSON: each string runs to the next '", "' (or '"]'), so a
# quote copied unescaped from the passage stays inside its string
_LOOSE_TRIPLE = re.compile(r'\[\s*"([^\n]*?)"\s*,\s*"([^\n]*?)"\s*,\s*"([^\n]*?)"\s*\](?=\s*(?:,|\]|$))')


def _loose_items(text: str) -> list[list[str]]:
    """The ``["h", "r", "t"]`` items of a list that does not load as JSON (a quote inside a string
    left unescaped: ``"Animorphs" series"``)."""
    return [list(m.groups()) for m in _LOOSE_TRIPLE.finditer(text)]


def _cut_off_items(text: str) -> list | None:
    """The complete items of a JSON list cut off before its closing ``]`` (a reply that ran into
    ``max_tokens``), or None when there is no such list. The item cut in the middle is dropped."""
    start = text.find("[")
    if start < 0:
        return None
    dec, i, out = json.JSONDecoder(), start + 1, []
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text):
            return out  # cut right after an item
        if text[i] == "]":
            return None  # closed (or empty): not a cut-off list
        try:
            item, i = dec.raw_decode(text, i)
        except ValueError:
            return out
        out.append(item)


def parse_triples(text: str) -> tuple[list[Triple], int]:
    """``(well-formed triples, n_rejected)`` from an LLM reply: a JSON list of 3-item lists or of
    ``{"head","relation","tail"}`` objects. Items that are not three non-empty strings are rejected.
    A list cut off at the token limit keeps its complete items (the cut-off counts as one rejected):
    Qwen2.5-Coder-1.5B filled its 512 tokens on long passages (docs/subqrag.md). A list broken by
    a quote copied unescaped into a string keeps the items whose three strings can be read."""
    items = _outer_list(text)
    if items is None:
        res = parse_json(text)
        if not res.ok:  # keep what can be read: a cut-off list's whole items, or loose items
            cut = _cut_off_items(text) or []
            loose = _loose_items(text)
            items = loose if len(loose) > len(cut) else cut
            if not items:
                return [], 1
            good, bad = parse_triples(json.dumps(items))
            return good, bad + 1
        items = res.value
    if isinstance(items, dict):
        items = next((v for v in items.values() if isinstance(v, list)), [])
    if not isinstance(items, list):
        return [], 1
    out, bad = [], 0
    for it in items:
        if isinstance(it, dict):
            it = [it.get("head", it.get("h")), it.get("relation", it.get("r")), it.get("tail", it.get("t"))]
        if not isinstance(it, (list, tuple)) or len(it) != 3 or not all(isinstance(x, (str, int, float)) for x in it):
            bad += 1
            continue
        t = tuple(normalise_text(x) for x in it)
        if not all(t) or t[0].casefold() == t[2].casefold():
            bad += 1
            continue
        out.append(t)  # type: ignore[arg-type]
    return out, bad


def _outer_list(text: str):
    """The outermost ``[...]`` of the reply as JSON (parse_json prefers the first ``{...}``, which
    would return only the first triple of a list of objects)."""
    i, j = text.find("["), text.rfind("]")
    if i < 0 or j <= i:
        return None
    for cand in (text[i : j + 1], re.sub(r",\s*([}\]])", r"\1", text[i : j + 1])):
        try:
            v = json.loads(cand)
            return v if isinstance(v, list) else None
        except json.JSONDecodeError:
            continue
    return None


def grounded(t: Triple, passage: str, title: str = "") -> bool:
    """True when the head and tail mentions occur in the passage (or its title), case-insensitive:
    the validation step of §2.3 that keeps hallucinated entities out of the graph."""
    text = (title + " " + passage).casefold()
    text = _WS.sub(" ", text)
    return t[0].casefold() in text and t[2].casefold() in text


def extraction_request(title: str, passage: str, max_tokens: int = 512) -> ChatRequest:
    return ChatRequest.of(render(load_prompt("subqrag", "extract"), title=title, passage=passage),
                          max_tokens=max_tokens, json_schema=load_schema("subqrag", "extract"))


def triple_parser(title: str, passage: str, *, validate: bool = True):
    """Reply → ``ParseResult((valid triples, n_rejected))`` for one passage: :func:`parse_triples`,
    then (``validate``) :func:`grounded`. Failed when nothing usable came back and something was
    rejected (an unparseable reply). Shared by offline indexing and the online update (Eq. 4)."""
    def parse(text: str) -> ParseResult:
        triples, bad = parse_triples(text)
        ungrounded: list[Triple] = []
        if validate:
            keep = [t for t in triples if grounded(t, passage, title)]
            ungrounded = [t for t in triples if t not in keep]
            bad += len(ungrounded)
            triples = keep
        ok = bool(triples) or bad == 0
        if ok:
            return ParseResult(True, (triples, bad))
        if ungrounded and bad == len(ungrounded):
            # Well-formed triples, none of whose head and tail both occur in the passage: say so
            # rather than blame the JSON (e.g. a name spelt differently from the passage).
            seen = _WS.sub(" ", (title + " " + passage).casefold())
            names = ", ".join(sorted({x for t in ungrounded for x in (t[0], t[2]) if x.casefold() not in seen}))
            return ParseResult(False, (triples, bad),
                               f"{len(ungrounded)} triple(s) name entities the passage does not contain: {names}")
        return ParseResult(False, (triples, bad), "expected a JSON list of [head, relation, tail]")

    return parse


def guided_extraction_request(subquestion: str, passages: Sequence[tuple[str, str]], max_tokens: int = 512) -> ChatRequest:
    """The online update's extraction (§2.3, Eq. 4): the sub-question the graph could not answer
    and the passages the fallback read (``[j] title: text``), so the model writes the facts that
    bear on it (prompts/subqrag/update_extract.txt)."""
    listing = "\n".join(f"[{j}] {title}: {text}" for j, (title, text) in enumerate(passages))
    return ChatRequest.of(render(load_prompt("subqrag", "update_extract"), subquestion=subquestion, passages=listing),
                          max_tokens=max_tokens, json_schema=load_schema("subqrag", "update_extract"))


def guided_triple_parser(passages: Sequence[tuple[str, str, str]], *, validate: bool = True):
    """Reply → ``ParseResult((triples, sources, n_rejected))`` for a guided extraction over
    ``(id, title, text)`` passages: :func:`parse_triples`, then (``validate``) the offline rule of
    :func:`triple_parser` applied per passage: a triple is kept when one read passage (its text or
    title) mentions its head and tail, and that passage (the first such) is its source. Without
    ``validate`` the source is the first passage. Repeats within the reply (by :func:`triple_key`)
    are kept once. Failed as :func:`triple_parser` fails."""
    def parse(text: str) -> ParseResult:
        triples, bad = parse_triples(text)
        out: list[Triple] = []
        sources: list[str] = []
        seen: set[tuple[str, str, str]] = set()
        ungrounded: list[Triple] = []
        for t in triples:
            src = next((pid for pid, title, body in passages if not validate or grounded(t, body, title)), None)
            if src is None:
                ungrounded.append(t)
                continue
            if triple_key(t) in seen:
                continue
            seen.add(triple_key(t))
            out.append(t)
            sources.append(src)
        bad += len(ungrounded)
        if out or bad == 0:
            return ParseResult(True, (out, sources, bad))
        if ungrounded and bad == len(ungrounded):
            return ParseResult(False, (out, sources, bad),
                               f"{len(ungrounded)} triple(s) name entities no read passage contains")
        return ParseResult(False, (out, sources, bad), "expected a JSON list of [head, relation, tail]")

    return parse


def corpus_hash(passages: Sequence[tuple[str, str, str]], model: str = "", prompt: str = "") -> str:
    """SHA-256 (16 hex) of ``(id, title, text)`` rows + model + prompt."""
    h = hashlib.sha256()
    h.update(json.dumps([model, prompt]).encode())
    for row in passages:
        h.update(json.dumps(list(row), ensure_ascii=False).encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()[:16]


@dataclass
class IndexResult:
    """What :func:`index_corpus` built. ``triples`` are de-duplicated, first-seen surface forms."""

    kg: KG
    triples: list[Triple]
    provenance: dict[Triple, list[str]]
    usage: Usage
    directory: Path
    calls_made: int = 0          # calls issued in THIS invocation (0 on a fully cached re-run)
    passages_cached: int = 0     # passages read back from extractions.jsonl
    rejected: int = 0
    extra: dict = field(default_factory=dict)
    # passage id -> its extraction, in reply order, as the canonical triples of ``triples``: what
    # the online update (Eq. 4) reads instead of asking the LLM again for an indexed passage
    by_passage: dict[str, list[Triple]] = field(default_factory=dict)


def _price_usd(usage: Usage, price_per_mtok: tuple[float, float] | None) -> float:
    if usage.cost_usd or not price_per_mtok:
        return usage.cost_usd
    return (usage.prompt_tokens * price_per_mtok[0] + usage.completion_tokens * price_per_mtok[1]) / 1e6


def _repair_tail(log: Path) -> None:
    """End the extraction log with a newline before anything is appended to it: a last line
    torn by a crash mid-write (no trailing newline) is cut off (that passage is redone), or, when
    it is a whole record that lost only its newline, given one. Appended to as it was, it would
    swallow the next record into an unreadable line (issue 57 L6)."""
    if not log.exists():
        return
    with open(log, "rb+") as f:
        size = f.seek(0, 2)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        keep, pos = 0, size
        while pos > 0:  # the last newline, read backwards in blocks (the log of a big corpus is large)
            start = max(0, pos - (1 << 16))
            f.seek(start)
            i = f.read(pos - start).rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            pos = start
        f.seek(keep)
        tail = f.read()
        try:
            whole = isinstance(json.loads(tail.decode("utf-8")).get("id"), str)
        except (ValueError, AttributeError):
            whole = False
        if whole:
            f.seek(size)
            f.write(b"\n")
            logger.warning("%s: its last record had no newline (a write stopped after it); one added", log)
        else:
            f.truncate(keep)
            logger.warning("%s: its last line was torn by an interrupted write (%d bytes, no newline); cut off, "
                           "and that passage is extracted again", log, size - keep)


def _read_extractions(log: Path) -> dict[str, dict]:
    """The per-passage extractions already made (a resumable log, one JSON object a line)."""
    done: dict[str, dict] = {}
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line from an interrupted write: that passage is redone
            done[rec["id"]] = rec
    return done


def _extract_missing(rows, done: dict[str, dict], log: Path, llm, *, validate: bool, max_tokens: int,
                     batch_size: int = 8) -> int:
    """Extract the passages not in ``done``, ``batch_size`` requests per ``generate`` call (one
    left-padded batch on a local model, concurrent requests on an HTTP backend), appending each
    passage to the log as its batch finishes."""
    made = 0
    todo = [r for r in rows if r[0] not in done]
    step = max(1, int(batch_size))
    with log.open("a", encoding="utf-8") as f, progress.bar(len(rows), "SubQRAG indexing", "passage",
                                                            initial=len(done), show_llm=True) as bar:
        for start in range(0, len(todo), step):
            chunk = todo[start:start + step]
            comps = llm.generate([extraction_request(title, text, max_tokens) for _pid, title, text in chunk])
            payer = current_payer()
            for (pid, title, text), comp in zip(chunk, comps):
                triples, bad = triple_parser(title, text, validate=validate)(comp.text).value
                rec = {"id": pid, "triples": [list(t) for t in triples], "rejected": bad,
                       "usage": to_jsonable(comp.usage), "paid_by": payer}
                f.write(utf8_safe(json.dumps(rec, ensure_ascii=False)) + "\n")
                done[pid] = rec
                made += 1
                bar.update(1, rejected=bad)
            f.flush()
    return made


def _collect(ids: Sequence[str], done: dict[str, dict]):
    """``(usage, rejected, triples, provenance, by_passage)`` over the passages' extraction rows:
    triples de-duplicated (first-seen surface form), each passage's own list in those forms."""
    usage, rejected = Usage(), 0
    seen: dict[tuple[str, str, str], Triple] = {}
    prov: dict[Triple, list[str]] = {}
    by_passage: dict[str, list[Triple]] = {}
    for pid in ids:
        rec = done[pid]
        usage = usage + Usage(**rec["usage"])
        rejected += rec.get("rejected", 0)
        mine = by_passage.setdefault(pid, [])
        for t in rec["triples"]:
            t = tuple(t)
            canon = seen.setdefault(triple_key(t), t)
            src = prov.setdefault(canon, [])
            if pid not in src:
                src.append(pid)
            if canon not in mine:
                mine.append(canon)
    return usage, rejected, list(seen.values()), prov, by_passage


def _index_key(rows: Sequence[tuple[str, str, str]], llm, max_tokens: int) -> str:
    """The index folder's name: the corpus, the model, the prompt and parser, and what shapes a reply."""
    # the model's resolved name (LazyLLM: the built variant, e.g. …@float32 / …@llamacpp), not
    # the config's: an index extracted by one variant is never read back by another
    resolved = getattr(llm, "resolved_model", None)
    model = resolved() if callable(resolved) else getattr(llm, "model", "")
    # the reply cap shapes what is extracted (a list cut at the cap loses its tail), so another cap is
    # another index; the default's key is unchanged, so indexes built before the cap was a setting stay valid
    # so does decoding under the reply's schema (llm.structured_output): an index keyed apart; off, the key
    # is the one indexes built before the option existed have
    structured = bool(getattr(llm, "structured_output", False))
    return corpus_hash(rows, model, load_prompt("subqrag", "extract") + PARSER_VERSION
                      + ("" if int(max_tokens) == 512 else f"\nmax_tokens={int(max_tokens)}")
                      + ("\nstructured_output" if structured else ""))


def index_corpus(passages: Sequence[tuple[str, str] | tuple[str, str, str]], llm, index_dir: str | Path, *,
                 name: str = "indexed", validate: bool = True, max_tokens: int = 512, batch_size: int = 8,
                 price_per_mtok: tuple[float, float] | None = None) -> IndexResult:
    """Extract triples from every passage (resumable), de-duplicate, save a KG + provenance.

    Args:
        passages: ``(title, text)`` (id = title) or ``(id, title, text)`` rows.
        llm: anything with ``generate`` and a ``model`` attribute.
        index_dir: root folder; the index lives in ``index_dir/<corpus_hash>/``.
        validate: drop triples whose head/tail does not occur in the passage.
        max_tokens: the reply cap of each extraction call (part of the index's key when not 512).
        batch_size: passages per ``generate`` call (same log as one at a time for a deterministic
            backend; a real model's left-padded batches can round differently, so greedy replies
            may differ slightly with the batch size).
        price_per_mtok: ``(prompt, completion)`` USD per million tokens, used only when the
            backend reports no ``cost_usd``.
    """
    rows = [(p[0], p[0], p[1]) if len(p) == 2 else tuple(p) for p in passages]
    ids = [r[0] for r in rows]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"index_corpus: passage ids must be unique; {dup!r} repeats")
    key = _index_key(rows, llm, max_tokens)
    d = Path(index_dir) / key
    d.mkdir(parents=True, exist_ok=True)
    # one indexer per corpus (a sweep over SubQRAG settings starts several at once): the others
    # wait, logging for whom, then read every passage it extracted instead of paying for it again
    with store_lock(d / "index.lock", f"SubQRAG index {d}"):
        _repair_tail(d / "extractions.jsonl")
        done = _read_extractions(d / "extractions.jsonl")
        cached = sum(1 for i in ids if i in done)
        for pid in ids:  # a resumed run counts the passages it paid for before the kill as calls, any
            if pid in done:  # other run's as cache hits, as the call cache does (docs/llm.md)
                paid = Usage(**done[pid]["usage"])
                if not credit_paid(f"index:{key}:{pid}", done[pid].get("paid_by"), paid):
                    credit_cached(paid)
        made = _extract_missing(rows, done, d / "extractions.jsonl", llm, validate=validate, max_tokens=max_tokens,
                                batch_size=batch_size)
        usage, rejected, triples, prov, by_passage = _collect(ids, done)
        kg = KG.from_triples(triples, name=name)
        kg.save(d / "kg")
        (d / "provenance.json").write_text(utf8_safe(json.dumps({"\t".join(t): v for t, v in prov.items()},
                                                                ensure_ascii=False)), encoding="utf-8")
        cost = {"passages": len(rows), "triples": len(triples), "rejected": rejected, "calls": usage.calls,
                "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                "cost_usd": _price_usd(usage, price_per_mtok), "calls_this_run": made}
        (d / "cost.json").write_text(json.dumps(cost, indent=1))
    return IndexResult(kg=kg, triples=triples, provenance=prov, usage=usage, directory=d,
                       calls_made=made, passages_cached=cached, rejected=rejected, extra=cost,
                       by_passage=by_passage)


def load_index(directory: str | Path) -> tuple[KG, dict[Triple, list[str]]]:
    """``(kg, provenance)`` from an index folder written by :func:`index_corpus`."""
    d = Path(directory)
    prov = {tuple(k.split("\t")): v for k, v in json.loads((d / "provenance.json").read_text()).items()}
    return KG.load(d / "kg", mmap=False), prov  # type: ignore[return-value]


def main(argv: Sequence[str] | None = None) -> None:  # pragma: no cover - thin CLI
    """``python -m kgreason.reasoners.subqrag_index CORPUS.jsonl INDEX_DIR [overrides...]``.

    The LLM comes from the run's config (``conf/llm/`` + ``llm_cache``), built by
    :func:`kgreason.llm.lazy.build_llm`, so offline indexing and a later run share one call
    cache: e.g. ``... llm=openai llm.model=gpt-4o-mini``.
    """
    import argparse

    from hydra import compose, initialize_config_dir

    from kgreason.llm.lazy import build_llm

    ap = argparse.ArgumentParser(description="SubQRAG offline indexing (subqrag.txt §2.1)")
    ap.add_argument("corpus", help="JSONL with title/text (and optional id)")
    ap.add_argument("index_dir")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of conf/config.yaml, e.g. llm=openai")
    a = ap.parse_args(argv)
    progress.tool_log()  # the indexing bar's lines every interval off a terminal
    rows = []
    for ln, line in enumerate(Path(a.corpus).read_text().splitlines(), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        if "text" not in r or "title" not in r:
            raise ValueError(f"{a.corpus}:{ln}: expected fields 'title' and 'text'")
        rows.append((str(r.get("id", r["title"])), r["title"], r["text"]))
    from kgreason.paths import config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=list(a.overrides))
    llm = build_llm(cfg.llm, cfg.get("llm_cache"))
    try:
        res = index_corpus(rows, llm, a.index_dir)
    finally:
        close = getattr(llm, "close", None)
        if callable(close):
            close()
    print(json.dumps(res.extra, indent=1))


if __name__ == "__main__":  # pragma: no cover
    main()
