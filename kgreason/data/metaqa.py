"""MetaQA (Zhang et al. 2018) 1/2/3-hop questions over the WikiMovies KB (``kg=metaqa``).

Formats:

* official ``qa_{train,dev,test}.txt``: ``question<TAB>answer1|answer2|...``, the topic entity in
  square brackets, e.g. ``what movies did [Temple Grandin] star in\\tClaire Danes``;
* JSON Lines (the shared sample): ``{"id", "question", "topic_entity", "answers"}``, question
  still bracketed.

Topic entities are KG names (``load_metaqa_kb`` uses names as ids). The brackets are removed
from the question unless ``keep_brackets=True``.
"""

from __future__ import annotations

import re
from pathlib import Path

from kgreason.data.base import DataError, ExampleSet
from kgreason.data.kgqa import answer_strings, origin_of, read_records, uniq
from kgreason.textio import InputFileError, read_text
from kgreason.types import Example

_BRACKET = re.compile(r"\[([^\[\]]+)\]")


def parse_question(q: str, where: str) -> tuple[str, str]:
    """``(question without brackets, topic entity)``; exactly one ``[...]`` is expected."""
    found = _BRACKET.findall(q)
    if len(found) != 1:
        raise DataError(f"{where}: expected exactly one [topic entity] in the question, found {len(found)}: {q!r}")
    return _BRACKET.sub(r"\1", q).strip(), found[0].strip()


def _hops_from(path: Path, hops: int | None) -> int | None:
    if hops is not None:
        return int(hops)
    m = re.search(r"([123])[-_]?hop", str(path))
    return int(m.group(1)) if m else None


def load_metaqa(path: str, split: str = "test", hops: int | None = None, limit: int | None = None,
                sample: int | None = None, sample_seed: int = 0, source: str = "local",
                keep_brackets: bool = False) -> ExampleSet:
    """MetaQA questions. ``hops`` defaults to the number in the file path (``2-hop/qa_test.txt``,
    ``2hop_test_sample1000.jsonl``); ``split`` names the ids of official-format files."""
    if source != "local":
        raise DataError("metaqa: only source='local' is supported (MetaQA is not on the hub in its "
                        "official format); see docs/data.md")
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    h = _hops_from(p, hops)
    items: list[Example] = []
    origins: list[str] = []
    if p.suffix in (".jsonl", ".json"):
        for i, rec in enumerate(read_records(p)):
            where = f"{p}: record {i}"
            origins.append(origin_of(rec, str(p), i))
            if "question" not in rec or "answers" not in rec:
                raise DataError(f"{where}: expected fields 'question' and 'answers'")
            q, topic = parse_question(str(rec["question"]), where)
            if rec.get("topic_entity") and rec["topic_entity"] != topic:
                raise DataError(f"{where}: topic_entity {rec['topic_entity']!r} differs from bracketed {topic!r}")
            ans = answer_strings(rec["answers"], where, "answers")
            if len(ans) == 1 and "|" in ans[0]:  # official format's "a|b" kept in one string
                ans = ans[0].split("|")
            ans = uniq(a.strip() for a in ans)
            if not ans:
                raise DataError(f"{where}: no answers")
            items.append(Example(id=str(rec.get("id", f"{h}hop-{split}-{i}")),
                                 question=str(rec["question"]) if keep_brackets else q, answers=ans,
                                 answer_groups=tuple((a,) for a in ans), topic_entities=(topic,),
                                 topic_names=(topic,), hops=h))
    else:
        try:
            text = read_text(p)
        except InputFileError as e:
            raise DataError(str(e)) from None
        if not text.strip():
            raise DataError(f"{p}: empty file; expected 'question<TAB>answer|answer' lines")
        for line_no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            parts = line.split("\t")
            where = f"{p}:{line_no}"
            if len(parts) != 2:
                raise DataError(f"{where}: expected 'question<TAB>answer1|answer2', got {len(parts)} field(s)")
            q, topic = parse_question(parts[0], where)
            ans = uniq(a.strip() for a in parts[1].split("|"))
            if not ans:
                raise DataError(f"{where}: no answers")
            origins.append(where)
            items.append(Example(id=f"{h}hop-{split}-{line_no - 1}", question=parts[0] if keep_brackets else q,
                                 answers=ans, answer_groups=tuple((a,) for a in ans), topic_entities=(topic,),
                                 topic_names=(topic,), hops=h))
    return ExampleSet(f"metaqa-{h}hop" if h else "metaqa", items, sample=sample, limit=limit,
                      sample_seed=sample_seed, origins=origins)


__all__ = ["load_metaqa", "parse_question"]
