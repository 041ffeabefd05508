"""Multi-hop document QA: HotpotQA, MuSiQue, 2WikiMultiHopQA.

Each example carries its own paragraphs as ``corpus`` (``(title, text)``) and the gold
supporting titles as ``supporting``. When a separate corpus file is given (HippoRAG's
``<dataset>_corpus.json``: ``[{"title", "text"}, ...]``), the returned ExampleSet also has a
``corpus`` attribute holding the full passage list (the retrieval pool of the 1,000-question
HippoRAG/SubQRAG protocol).

**The passage pool** (``pool``, recorded as ``es.pool``; read by
:func:`kgreason.reasoners.rag_text.dataset_pool`): ``protocol`` (default) is the corpus file plus
the paragraphs of every question of the protocol sample, the questions after ``sample`` and
before ``limit`` (``es.pool_questions``), so the pool does not depend on how many of them a run
answers or which split it takes. SubQRAG §3.1: "using the same retrieval corpus and sampling
1,000 questions". The shared samples hold fewer questions than 1,000 (HotpotQA 500, MuSiQue
200, 2Wiki 200): there the pool is every question of the file. ``questions_run`` is kgreason's
behaviour before issue 57: the paragraphs of the questions run only (it shrinks with ``limit``).

Formats (detected per record):

* HotpotQA official: ``_id, question, answer, supporting_facts [[title, sent]], context
  [[title, [sent, ...]]], type, level`` (the HF ``hotpot_qa`` columnar variant too);
* IRCoT processed: ``question_id, question_text, answers_objects[{spans}], contexts[{title,
  paragraph_text, is_supporting}]``;
* MuSiQue official: ``id, question, answer, answer_aliases, paragraphs[{idx, title,
  paragraph_text, is_supporting}], question_decomposition, answerable``;
* 2WikiMultiHopQA official: HotpotQA's fields + ``evidences [[s, r, o]]`` and ``type``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kgreason.data.base import DataError, ExampleSet
from kgreason.data.kgqa import answer_strings, build_set, hub_records, need, read_records, uniq
from kgreason.types import Example


def read_corpus(path: str | Path) -> list[tuple[str, str]]:
    """HippoRAG corpus file ``[{"title", "text"}, ...]`` → ``[(title, text)]``."""
    recs = read_records(path)
    out = []
    for i, r in enumerate(recs):
        if "title" not in r or "text" not in r:
            raise DataError(f"{path}: record {i}: expected fields 'title' and 'text'")
        out.append((str(r["title"]), str(r["text"])))
    return out


def _context(ctx: Any, where: str) -> tuple[tuple[str, str], ...]:
    """Official ``[[title, [sentences]]]`` or HF ``{"title": [...], "sentences": [[...]]}``."""
    if isinstance(ctx, dict):
        ctx = list(zip(ctx.get("title", []), ctx.get("sentences", [])))
    if not isinstance(ctx, list):
        raise DataError(f"{where}: field 'context' must be a list of [title, [sentences]]")
    out = []
    for j, item in enumerate(ctx):
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[1], (list, tuple, str)):
            raise DataError(f"{where}: context[{j}]: expected [title, [sentence, ...]]")
        sents = item[1] if isinstance(item[1], str) else " ".join(str(x).strip() for x in item[1])
        out.append((str(item[0]), sents.strip()))
    return tuple(out)


def _supporting_titles(sf: Any, where: str) -> tuple[str, ...]:
    if isinstance(sf, dict):  # HF columnar
        return uniq(sf.get("title", []))
    if not isinstance(sf, list):
        raise DataError(f"{where}: field 'supporting_facts' must be a list of [title, sent_id]")
    titles = []
    for j, s in enumerate(sf):
        if not isinstance(s, (list, tuple)) or len(s) < 1:
            raise DataError(f"{where}: supporting_facts[{j}]: expected [title, sent_id]")
        titles.append(str(s[0]))
    return uniq(titles)


def parse_ircot(rec: dict, where: str) -> Example:
    qid = str(need(rec, "question_id", where))
    ans: list[str] = []
    for j, ao in enumerate(need(rec, "answers_objects", where, list)):
        if not isinstance(ao, dict) or "spans" not in ao:
            raise DataError(f"{where}: answers_objects[{j}]: expected {{spans: [...]}}")
        ans += answer_strings(ao["spans"], where, f"answers_objects[{j}].spans")
        if ao.get("number"):
            ans.append(str(ao["number"]))
    if not uniq(ans):
        raise DataError(f"{where}: no answer spans")
    corpus, supp = [], []
    for j, c in enumerate(need(rec, "contexts", where, list)):
        if not isinstance(c, dict) or "title" not in c or "paragraph_text" not in c:
            raise DataError(f"{where}: contexts[{j}]: expected {{title, paragraph_text, is_supporting}}")
        corpus.append((str(c["title"]), str(c["paragraph_text"]).strip()))
        if c.get("is_supporting"):
            supp.append(str(c["title"]))
    return Example(id=qid, question=str(need(rec, "question_text", where, str)), answers=uniq(ans),
                   answer_groups=(uniq(ans),), supporting=uniq(supp), corpus=tuple(corpus))


def parse_hotpot(rec: dict, where: str) -> Example:
    """HotpotQA / 2Wiki official record (also IRCoT, detected)."""
    if "question_text" in rec:
        return parse_ircot(rec, where)
    qid = str(rec.get("_id", rec.get("id", "")) or "")
    if not qid:
        raise DataError(f"{where}: missing field '_id'")
    answer = answer_strings(need(rec, "answer", where), where, "answer", single=True)[0]
    extra: dict[str, Any] = {k: rec[k] for k in ("type", "level") if k in rec}
    if "evidences" in rec:  # 2Wiki: [subject, relation, object] triples
        extra["evidences"] = [list(e) for e in rec["evidences"]]
    for k in ("answer_id", "entity_ids"):
        if k in rec:
            extra[k] = rec[k]
    corpus = _context(rec["context"], where) if "context" in rec else ()
    supp = _supporting_titles(need(rec, "supporting_facts", where), where)
    return Example(id=qid, question=str(need(rec, "question", where, str)), answers=(str(answer),),
                   answer_groups=((str(answer),),), supporting=supp, corpus=corpus, extra=extra)


def _musique_hops(qid: str) -> int | None:
    m = re.match(r"(\d)hop", qid)
    return int(m.group(1)) if m else None


def parse_musique(rec: dict, where: str) -> Example:
    qid = str(need(rec, "id", where))
    answer = answer_strings(need(rec, "answer", where), where, "answer", single=True)[0]
    aliases = answer_strings(rec.get("answer_aliases") or [], where, "answer_aliases")
    corpus, supp = [], []
    for j, par in enumerate(need(rec, "paragraphs", where, list)):
        if not isinstance(par, dict) or "title" not in par or "paragraph_text" not in par:
            raise DataError(f"{where}: paragraphs[{j}]: expected {{idx, title, paragraph_text, is_supporting}}")
        corpus.append((str(par["title"]), str(par["paragraph_text"]).strip()))
        if par.get("is_supporting"):
            supp.append(str(par["title"]))
    decomp = rec.get("question_decomposition") or []
    ans = uniq([answer] + aliases)
    return Example(id=qid, question=str(need(rec, "question", where, str)), answers=ans, answer_groups=(ans,),
                   supporting=uniq(supp), corpus=tuple(corpus), hops=_musique_hops(qid),
                   extra={"answerable": bool(rec.get("answerable", True)),
                          "decomposition": [{"question": d.get("question"), "answer": d.get("answer")}
                                            for d in decomp if isinstance(d, dict)]})


POOLS = ("protocol", "questions_run")


def _build(name: str, recs, parse, src: str, *, limit, sample, sample_seed, corpus, pool) -> ExampleSet:
    """The question set (``sample`` then ``limit``, as :class:`ExampleSet`) with its pool: the
    corpus file as ``corpus`` and, for ``pool=protocol``, the questions the pool's paragraphs
    come from as ``pool_questions`` (every sampled question, before ``limit``)."""
    if pool not in POOLS:
        raise DataError(f"{name}: pool must be protocol or questions_run, got {pool!r}")
    es = build_set(name, recs, parse, src, limit=None, sample=sample, sample_seed=sample_seed)
    protocol = list(es.examples)
    if limit is not None:
        es.examples = es.examples[: int(limit)]
    es.pool = pool  # type: ignore[attr-defined]
    if pool == "protocol":
        es.pool_questions = protocol  # type: ignore[attr-defined]
    if corpus is not None:
        es.corpus = read_corpus(corpus)  # type: ignore[attr-defined]
    return es


def _records(name, path, split, source, hub_id, hub_name):
    if source == "hub":
        return hub_records(hub_id, split, hub_name), f"hub:{hub_id}[{split}]"
    if source != "local":
        raise DataError(f"{name}: source must be 'local' or 'hub', got {source!r}")
    if path is None:
        raise DataError(f"{name}: path is required with source='local'")
    return read_records(path), str(path)


def load_hotpotqa(path: str | None = None, split: str = "validation", limit: int | None = None,
                  sample: int | None = None, sample_seed: int = 0, source: str = "local",
                  corpus: str | None = None, hub_id: str = "hotpot_qa",
                  hub_name: str = "distractor", pool: str = "protocol") -> ExampleSet:
    """HotpotQA (official / IRCoT / HippoRAG question file + ``corpus``); ``pool``: module docstring."""
    recs, src = _records("hotpotqa", path, split, source, hub_id, hub_name)
    return _build("hotpotqa", recs, parse_hotpot, src, limit=limit, sample=sample, sample_seed=sample_seed,
                  corpus=corpus, pool=pool)


def load_musique(path: str | None = None, split: str = "validation", limit: int | None = None,
                 sample: int | None = None, sample_seed: int = 0, source: str = "local",
                 corpus: str | None = None, answerable_only: bool = True,
                 hub_id: str = "dgslibisey/MuSiQue", hub_name: str | None = None,
                 pool: str = "protocol") -> ExampleSet:
    """MuSiQue-Ans official JSONL (``answerable_only`` drops MuSiQue-Full's unanswerable twins);
    ``pool``: module docstring."""
    recs, src = _records("musique", path, split, source, hub_id, hub_name)

    def parse(rec, where):
        ex = parse_musique(rec, where)
        return ex if (ex.extra["answerable"] or not answerable_only) else None

    return _build("musique", recs, parse, src, limit=limit, sample=sample, sample_seed=sample_seed,
                  corpus=corpus, pool=pool)


def load_twowiki(path: str | None = None, split: str = "validation", limit: int | None = None,
                 sample: int | None = None, sample_seed: int = 0, source: str = "local",
                 corpus: str | None = None, hub_id: str = "xanhho/2WikiMultihopQA",
                 hub_name: str | None = None, pool: str = "protocol") -> ExampleSet:
    """2WikiMultiHopQA official (records without ``context`` keep an empty per-example corpus);
    ``pool``: module docstring (the pool is HippoRAG's corpus file and the sample's paragraphs)."""
    recs, src = _records("twowiki", path, split, source, hub_id, hub_name)
    return _build("twowiki", recs, parse_hotpot, src, limit=limit, sample=sample, sample_seed=sample_seed,
                  corpus=corpus, pool=pool)


__all__ = ["POOLS", "load_hotpotqa", "load_musique", "load_twowiki", "read_corpus", "parse_hotpot",
           "parse_ircot", "parse_musique"]
