"""KGQA datasets over Freebase: ComplexWebQuestions, WebQSP, GrailQA (and WebQuestions).

Formats read (detected per record):

* **ToG JSON** (IDEA-FinAI/ToG ``data/*.json``): ``topic_entity: {mid: name}`` plus
  ``answer`` (CWQ: one name), ``answers`` (WebQuestions: names) or ``answer: [{answer_type,
  answer_argument, entity_name}]`` (GrailQA).
* **WebQSP official** (``{"Questions": [...]}`` or a list of questions): ``Parses[]`` with
  ``TopicEntityMid/Name``, ``InferentialChain`` and ``Answers[{AnswerArgument, EntityName}]``.
* **RoG** (``rmanluo/RoG-{webqsp,cwq}`` on the Hugging Face hub, also a local JSONL):
  ``id, question, answer: [names], q_entity: [names], a_entity, graph``.

Topic entities are Freebase MIDs in ToG form (``m.03_dwn``) — ``kg=freebase_slice`` writes
MIDs the same way — or names for RoG (its graphs use names).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

from kgreason.data.base import DataError, ExampleSet
from kgreason.textio import InputFileError, read_text
from kgreason.types import Example


# ----------------------------------------------------------------------------- shared readers


#: key read_records adds to a JSON Lines record: its line number (for messages that say where)
LINE_KEY = "_line"
#: record fields the parsers take an example's id from, in the order they try them
ID_FIELDS = ("ID", "qid", "id", "QuestionId", "question_id", "_id")


def origin_of(rec: dict, src: str, i: int) -> str:
    """``<file>:<line>`` for a JSON Lines record, else ``<file>: record <i>``."""
    line = rec.get(LINE_KEY)
    return f"{src}:{line}" if isinstance(line, int) else f"{src}: record {i}"


def read_records(path: str | Path) -> list[dict]:
    """Read a JSON list (or ``{"Questions"|"data": [...]}``) or JSON Lines file of objects.

    Raises:
        DataError: missing/empty file, invalid JSON (with line), non-object records.
    """
    p = Path(path)
    try:
        text = read_text(p)
    except InputFileError as e:
        raise DataError(str(e)) from None
    if not text.strip():
        raise DataError(f"{p}: empty file; expected a JSON list or JSON Lines")
    stripped = text.lstrip()
    records: Any
    if stripped.startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{p}:{e.lineno}: invalid JSON ({e.msg})") from None
    else:
        try:
            records = json.loads(text)  # one object (e.g. WebQSP's {"Questions": [...]})
        except json.JSONDecodeError:
            records = None
        if isinstance(records, dict):
            for key in ("Questions", "data", "questions"):
                if isinstance(records.get(key), list):
                    records = records[key]
                    break
            else:
                records = [records]
        else:
            records = []
            for line_no, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                    if isinstance(records[-1], dict):
                        records[-1][LINE_KEY] = line_no
                except json.JSONDecodeError as e:
                    raise DataError(f"{p}:{line_no}: expected one JSON object per line ({e.msg})") from None
    if not isinstance(records, list):
        raise DataError(f"{p}: expected a list of records")
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise DataError(f"{p}: record {i}: expected a JSON object, got {type(r).__name__}")
    if not records:
        raise DataError(f"{p}: no records")
    return records


def hub_records(hub_id: str, split: str, name: str | None = None) -> list[dict]:
    """Records of a Hugging Face dataset (lazy import; needs ``pip install datasets`` and network)."""
    try:
        from datasets import load_dataset
    except ImportError as e:  # pragma: no cover - optional extra
        raise ImportError("source='hub' needs the `datasets` package: pip install 'kgreason[hub]'") from e
    ds = load_dataset(hub_id, name, split=split)  # pragma: no cover - network
    return [dict(r) for r in ds]  # pragma: no cover


def need(rec: dict, key: str, where: str, typ: type | tuple = object) -> Any:
    """``rec[key]`` or a :class:`DataError` naming file/record/field."""
    if key not in rec:
        raise DataError(f"{where}: missing field {key!r}")
    v = rec[key]
    if typ is not object and not isinstance(v, typ):
        names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise DataError(f"{where}: field {key!r} must be {names}, got {type(v).__name__}")
    return v


_JSON_TYPE = {type(None): "null", dict: "an object", list: "a list", bool: "a boolean", int: "a number",
              float: "a number"}


def answer_strings(value: Any, where: str, field: str, *, single: bool = False) -> list[str]:
    """Gold answers from a record field: a string or (unless ``single``) a list of strings.

    Anything else — null, a number, an object, a nested list, an empty string (empty items of a
    list are dropped; a record left with no answer fails where it is parsed) — is a
    :class:`DataError` naming the record, the field and the item, never a gold string such as
    ``"None"`` or ``"{'a': 1}"`` that no prediction can match.
    """
    def one(v: Any, name: str, in_list: bool = False) -> str:
        if not isinstance(v, str):
            got = _JSON_TYPE.get(type(v), type(v).__name__)
            raise DataError(f"{where}: field {name} is {got}; expected a string "
                            "(write numbers and dates as strings, e.g. \"1994\")")
        if not v.strip() and not in_list:  # an empty item of a list is dropped (WebQuestions has some)
            raise DataError(f"{where}: field {name} is an empty string; expected an answer")
        for ch, what in (("\ufeff", "a byte-order mark (U+FEFF)"), ("\x00", "a NUL character")):
            if ch in v:
                raise DataError(f"{where}: field {name} holds {what}, which no prediction can match")
        return v

    if isinstance(value, str):
        return [one(value, repr(field))]
    if single or not isinstance(value, list):
        got = _JSON_TYPE.get(type(value), type(value).__name__)
        want = "a string" if single else "a string or a list of strings"
        raise DataError(f"{where}: field {field!r} is {got}; expected {want}")
    return [a for j, v in enumerate(value) if (a := one(v, f"{field!r}[{j}]", in_list=True)).strip()]


def uniq(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for s in items if s))


def build_set(name: str, records: list[dict], parse: Callable[[dict, str], Example | None], src: str,
              *, limit: int | None, sample: int | None, sample_seed: int) -> ExampleSet:
    out, origins, fields = [], [], []
    for i, rec in enumerate(records):
        ex = parse(dict(rec, _index=i), f"{src}: record {i}")
        if ex is not None:
            out.append(ex)
            origins.append(origin_of(rec, src, i))
            fields.append(next((k for k in ID_FIELDS if k in rec and str(rec[k]) == ex.id), "id"))
    return ExampleSet(name, out, sample=sample, limit=limit, sample_seed=sample_seed, origins=origins,
                      id_field=fields)


def _load(name: str, path, split, limit, sample, sample_seed, source, hub_id, hub_name, parse) -> ExampleSet:
    if source == "hub":
        records, src = hub_records(hub_id, split, hub_name), f"hub:{hub_id}[{split}]"
    elif source == "local":
        if path is None:
            raise DataError(f"{name}: path is required with source='local'")
        records, src = read_records(path), str(path)
    else:
        raise DataError(f"{name}: source must be 'local' or 'hub', got {source!r}")
    return build_set(name, records, parse, src, limit=limit, sample=sample, sample_seed=sample_seed)


# ----------------------------------------------------------------------------- record parsers


def _topic(rec: dict, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    te = rec.get("topic_entity") or {}
    if not isinstance(te, dict):
        raise DataError(f"{where}: field 'topic_entity' must be an object {{mid: name}}")
    return tuple(te), tuple(str(v) for v in te.values())


def parse_rog(rec: dict, where: str) -> Example:
    """RoG record: names throughout (``q_entity`` are the topic entity names of its graph)."""
    qid = str(need(rec, "id", where))
    ans = answer_strings(need(rec, "answer", where), where, "answer")
    q_ent = [str(e) for e in need(rec, "q_entity", where, list)]
    return Example(id=qid, question=str(need(rec, "question", where, str)), answers=uniq(ans),
                   answer_groups=tuple((a,) for a in uniq(ans)), topic_entities=tuple(q_ent),
                   topic_names=tuple(q_ent), extra={"a_entity": list(rec.get("a_entity") or [])})


def parse_tog(rec: dict, where: str) -> Example:
    """ToG record for CWQ (``ID``/``answer`` str), WebQuestions (``answers`` list) or GrailQA
    (``qid``/``answer`` list of objects)."""
    if "graph" in rec or "q_entity" in rec:
        return parse_rog(rec, where)
    if "Parses" in rec:
        return parse_webqsp_official(rec, where)
    qid = rec.get("ID", rec.get("qid", rec.get("id", rec.get("QuestionId"))))
    if qid is None and "url" in rec:  # WebQuestions has no id (urls repeat): use the position
        qid = f"q{rec.get('_index', 0)}"
    if qid is None:
        raise DataError(f"{where}: expected an id field (ID | qid | id | QuestionId)")
    question = rec.get("question", rec.get("RawQuestion"))
    if not isinstance(question, str) or not question:
        raise DataError(f"{where}: missing or empty field 'question'")
    mids, names = _topic(rec, where)
    groups: list[tuple[str, ...]] = []
    extra: dict[str, Any] = {}
    if "answers" in rec:
        groups = [(x,) for x in answer_strings(need(rec, "answers", where, list), where, "answers")]
    elif "answer" in rec:
        a = rec["answer"]
        if isinstance(a, str):
            groups = [tuple(answer_strings(a, where, "answer"))]
        elif isinstance(a, list):
            for j, x in enumerate(a):
                if isinstance(x, str):
                    groups.append(tuple(answer_strings(x, where, f"answer[{j}]", single=True)))
                elif isinstance(x, dict) and "answer_argument" in x:
                    arg = answer_strings(x["answer_argument"], where, f"answer[{j}].answer_argument", single=True)
                    name = x.get("entity_name")
                    names = answer_strings(name, where, f"answer[{j}].entity_name", single=True) if name else []
                    groups.append(uniq(names + arg))
                else:
                    raise DataError(f"{where}: answer[{j}]: expected a string or "
                                    "{answer_type, answer_argument, entity_name}")
        else:
            answer_strings(a, where, "answer")  # raises: names what the field holds
        for k in ("level", "function", "num_edge", "compositionality_type", "sparql", "s_expression"):
            if k in rec:
                extra[k] = rec[k]
    else:
        raise DataError(f"{where}: missing field 'answer' (or 'answers')")
    if not groups:
        raise DataError(f"{where}: no gold answers")
    return Example(id=str(qid), question=question, answers=uniq(a for g in groups for a in g),
                   answer_groups=tuple(groups), topic_entities=mids, topic_names=names, extra=extra)


def parse_webqsp_official(rec: dict, where: str) -> Example:
    """WebQSP official record: answers = union over parses, one answer group per distinct answer
    (aliases: EntityName and the MID); gold paths = each parse's InferentialChain."""
    qid = str(need(rec, "QuestionId", where))
    question = rec.get("RawQuestion") or rec.get("ProcessedQuestion")
    if not question:
        raise DataError(f"{where}: missing field 'RawQuestion'")
    parses = need(rec, "Parses", where, list)
    groups: dict[str, tuple[str, ...]] = {}
    mids, names, paths = [], [], []
    for j, parse in enumerate(parses):
        w = f"{where}: Parses[{j}]"
        if not isinstance(parse, dict):
            raise DataError(f"{w}: expected an object")
        if parse.get("TopicEntityMid"):
            mids.append(parse["TopicEntityMid"])
            names.append(parse.get("TopicEntityName") or parse["TopicEntityMid"])
        if parse.get("InferentialChain"):
            paths.append(tuple(parse["InferentialChain"]))
        for k, a in enumerate(need(parse, "Answers", w, list)):
            if not isinstance(a, dict) or "AnswerArgument" not in a:
                raise DataError(f"{w}: Answers[{k}]: expected {{AnswerType, AnswerArgument, EntityName}}")
            arg = str(a["AnswerArgument"])
            groups.setdefault(arg, uniq([str(a.get("EntityName") or ""), arg]))
    if not mids and isinstance(rec.get("topic_entity"), dict):
        mids, names = map(list, _topic(rec, where))
    return Example(id=qid, question=question, answers=uniq(a for g in groups.values() for a in g),
                   answer_groups=tuple(groups.values()), topic_entities=uniq(mids), topic_names=tuple(names[: len(uniq(mids))]),
                   gold_paths=tuple(dict.fromkeys(paths)), extra={"n_parses": len(parses)})


# ----------------------------------------------------------------------------- loaders


def load_cwq(path: str | None = None, split: str = "test", limit: int | None = None,
             sample: int | None = None, sample_seed: int = 0, source: str = "local",
             hub_id: str = "rmanluo/RoG-cwq") -> ExampleSet:
    """ComplexWebQuestions (ToG ``cwq.json``; or RoG JSONL / hub). Questions without answers raise."""
    return _load("cwq", path, split, limit, sample, sample_seed, source, hub_id, None, parse_tog)


def load_webqsp(path: str | None = None, split: str = "test", limit: int | None = None,
                sample: int | None = None, sample_seed: int = 0, source: str = "local",
                hub_id: str = "rmanluo/RoG-webqsp") -> ExampleSet:
    """WebQSP (official ``Parses`` format, ToG JSON, WebQuestions ToG JSON, or RoG)."""
    return _load("webqsp", path, split, limit, sample, sample_seed, source, hub_id, None, parse_tog)


def load_grailqa(path: str | None = None, split: str = "validation", limit: int | None = None,
                 sample: int | None = None, sample_seed: int = 0, source: str = "local",
                 hub_id: str = "grail_qa") -> ExampleSet:
    """GrailQA (ToG ``grailqa.json`` / official JSON: ``answer[{answer_argument, entity_name}]``)."""

    def parse(rec: dict, where: str) -> Example:
        if isinstance(rec.get("answer"), dict):  # HF grail_qa: columnar answer
            a = rec["answer"]
            rec = dict(rec, answer=[{"answer_argument": x, "entity_name": n}
                                    for x, n in zip(a.get("answer_argument", []), a.get("entity_name", []))])
        return parse_tog(rec, where)

    return _load("grailqa", path, split, limit, sample, sample_seed, source, hub_id, None, parse)


__all__ = ["read_records", "answer_strings", "hub_records", "load_cwq", "load_webqsp", "load_grailqa", "parse_tog",
           "parse_webqsp_official", "parse_rog"]
