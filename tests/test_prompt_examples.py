"""Prompt worked examples copy no evaluated question, template or relation name (issue 29, item 3).

A worked example built on a benchmark's own question template and relation names tunes the
prompt to that benchmark: the model is shown the answer pattern of the questions it is scored on
(the validation table once used "which books share the author of …" with MetaQA's
``written_by``). Every prompt file under ``kgreason/reasoners/prompts/`` and every judge rubric
is checked as a whole (instructions and examples alike, ``{placeholders}`` removed: stricter
than cutting out the example, and it needs no per-file parser):

(a) **No evaluated question.** No question of an evaluated sample occurs in it (normalised:
    lower case, punctuation and brackets dropped, spaces collapsed).
(b) **No evaluated template.** A question's *template* is the question with its topic entities
    masked: MetaQA's ``[bracketed]`` entity, the dataset's topic-entity names where a record
    gives them (``topic_entity``, ``q_entity``, the embedded world's ``topic_names``), and any run
    of capitalised words after the first word (the names of HotpotQA / 2Wiki / MuSiQue
    questions, which name no topic field). The worked examples'
    questions are read out of the prompt (a line opening with ``Q:``, a quoted string of 3+
    words, a line ending in ``?``). One copies a template when
    - it holds one of the template's unmasked runs of ``NGRAM`` = 5 words: the question frames
      that carry a template are 4-6 words long ("what is the capital of", "what are the films
      that are directed by"); 4-word runs are shared by unrelated questions ("what is the name",
      "who is the author"), while a shared 5-word run is a shared question frame; or
    - for a template whose every unmasked run is shorter than that ("who directed <e>", "which
      films did <e> direct"), it *is* the template, each mask standing for 1-6 words.
(c) **No evaluated KG's relation names.** No relation identifier of an evaluated KG (names with
    ``_`` or ``.``: MetaQA's vocabulary, the embedded KG's, Freebase's (FB15k-237, the RoG
    subgraphs), UMLS ``RELA`` values, the DDXPlus KG's; for Freebase-style ``domain.type.rel``
    also the ``domain.type`` super-relation and an ``rel`` with ``_``) appears as a token.
    Examples use a made-up domain; the dataset's naming reaches the model through the candidate
    lists only.
(d) **No common evaluated question shape** (issue 43, item 3). A question's *shape* is its
    template (entity words masked, as in (b)) with the relation and content words masked too:
    only wh-words, auxiliaries, articles, "same / also / other / both" stay, every preposition
    reads ``P`` and each run of other words one ``_`` ("which films share the same director of
    [X]" and "which bridges span the same river as Lowmarsh Bridge" are both
    ``which _ the same _ P _``). A sample's *most common templates* are the shapes of at least
    ``COMMON_SHARE`` (1 %) of its questions, and of at least 3 of them; no worked example's
    question may have one (the paper's own examples excepted, as in (b)).

Questions and relations come from the embedded world (generated in-process), ``tests/assets``
and, when present, every sample under ``$KGREASON_DATA`` or ``../shared/data`` (that part skips
cleanly when the samples are absent).
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import REPO

NGRAM = 5
COMMON_SHARE = 0.01  # a shape this share of a sample's questions (and >= 3 of them) is one of its common templates
WH = {"which", "what", "who", "whom", "whose", "where", "when", "how", "why"}
FRAME = WH | {"is", "are", "was", "were", "did", "does", "do", "has", "have", "had", "the", "a", "an",
              "same", "also", "other", "both"}
PREPOSITIONS = {"of", "as", "by", "in", "on", "at", "to", "from", "for", "with", "into", "about", "than",
                "under", "over", "through", "between", "after", "before"}
SLOT = r"(?: \S+){1,6}"  # a masked entity inside one segment: 1-6 words
MASK = "\x00"
PROMPTS = sorted((REPO / "kgreason" / "reasoners" / "prompts").rglob("*.txt"))
RUBRICS = sorted(p for p in (REPO / "kgreason" / "judges" / "rubrics").rglob("*") if p.is_file())
FILES = PROMPTS + RUBRICS
# MetaQA's relation vocabulary as the shared sample's PROVENANCE.md lists it (kb.txt adds its own
# when present): checked even where the sample is absent
METAQA_RELATIONS = {"directed_by", "written_by", "starred_actors", "release_year", "in_language", "has_tags",
                    "has_genre", "has_imdb_votes", "has_imdb_rating"}
# examples the paper itself gives are kept verbatim (a template they share is the paper's own
# choice, not one tuned on our questions); each is checked against the paper text when present
PAPER_EXAMPLES = {
    "what is the profession of the husband of the author of harry potter": "subqrag.txt Fig. 1 (original question)",
    "who wrote harry potter": "subqrag.txt Fig. 1 (sub-question 1)",
    "who is 1 s husband": "subqrag.txt Fig. 1 (sub-question 2)",
    "what is 2 s profession": "subqrag.txt Fig. 1 (sub-question 3)",
}


def _rel(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


def _shared() -> Path | None:
    p = Path(os.environ.get("KGREASON_DATA", REPO.parent / "shared" / "data"))
    return p if p.is_dir() else None


def norm(text: str) -> str:
    """Lower case; every run of non-word characters (punctuation, brackets) one space."""
    return " ".join(re.sub(r"[^\w\x00]+", " ", text.lower()).split())


def prompt_text(p: Path) -> str:
    """The prompt as the model reads it, without its ``{placeholder}`` fields."""
    return re.sub(r"\{[a-z_]+\}", " ", p.read_text(encoding="utf-8"))


def example_questions(text: str) -> list[str]:
    """The worked examples' questions, normalised: the rest of a line opening with ``Q:`` (or
    ``Question:``), every quoted string of 3+ words, and every line ending in ``?``."""
    found = re.findall(r"^\s*(?:Q|Question)\s*:\s*(.+)$", text, flags=re.M)
    # a quoted question may wrap onto the next line of the prompt
    found += [" ".join(q.split()) for q in re.findall(r'"([^"]+)"', text) if 3 <= len(q.split()) <= 30]
    found += re.findall(r"^(.+\?)\s*$", text, flags=re.M)
    return [q for q in dict.fromkeys(norm(x) for x in found) if q]


# ------------------------------------------------------------------ evaluated questions
def _topic_names(rec: dict) -> list[str]:
    out: list[str] = []
    for key in ("topic_entity", "q_entity", "topic_names"):
        v = rec.get(key)
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            out += [x for x in v.values() if isinstance(x, str)]
        elif isinstance(v, (list, tuple)):
            out += [x for x in v if isinstance(x, str)]
    return out


def _question(rec: dict) -> str | None:
    for key in ("question", "question_text", "RawQuestion", "ProcessedQuestion"):
        if isinstance(rec.get(key), str):
            return rec[key]
    return None


def _records(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(x) for x in text.splitlines() if x.strip()]
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("Questions", data.get("data", []))
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


@lru_cache(maxsize=1)
def evaluated_questions() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(source, question, topic names) of every evaluated sample this checkout can see."""
    from kgreason.kg.embedded import make_world

    out = [("embedded world", q.question, tuple(q.topic_names) or tuple(q.topic_entities))
           for q in make_world(0).questions]
    files = sorted((REPO / "tests" / "assets").rglob("*.json*"))
    shared = _shared()
    if shared is not None:
        files += sorted(shared.rglob("*.json")) + sorted(shared.rglob("*.jsonl"))
    for f in files:
        for rec in _records(f):
            q = _question(rec)
            if q:
                out.append((f.name, q, tuple(_topic_names(rec))))
    return tuple(out)


def template(question: str, topics: tuple[str, ...]) -> str:
    """The question with its topic entities masked (``MASK``), normalised."""
    q = re.sub(r"\[[^\]]*\]", f" {MASK} ", question)  # MetaQA's [topic]
    for name in sorted((t for t in topics if t and not re.fullmatch(r"[mg]\.\w+", t)), key=len, reverse=True):
        q = re.sub(re.escape(name), f" {MASK} ", q, flags=re.I)
    words = q.split()
    # capitalised names after the first word (multi-hop questions name no topic field)
    words = words[:1] + [MASK if re.match(r"[A-Z0-9]", w) else w for w in words[1:]]
    return norm(" ".join(words))


@lru_cache(maxsize=1)
def template_index():
    """({5-gram: an example question}, {short template regex: an example question})."""
    grams: dict[str, str] = {}
    short: dict[str, str] = {}
    for src, q, topics in evaluated_questions():
        t = template(q, topics)
        runs = [r.split() for r in t.split(MASK)]
        for run in runs:
            for i in range(len(run) - NGRAM + 1):
                grams.setdefault(" ".join(run[i:i + NGRAM]), f"{src}: {q}")
        if MASK in t and max(len(r) for r in runs) < NGRAM and sum(len(r) for r in runs) >= 2:
            # the whole template, each mask 1-6 words, must span the whole example question
            pat = SLOT.join(re.escape("".join(f" {w}" for w in r)) for r in runs)
            short.setdefault(pat, f"{src}: {q}")
    return grams, [(re.compile(rf"^{p}$"), q) for p, q in short.items()]


def shape(question: str, topics: tuple[str, ...] = ()) -> str:
    """The question's structure: :func:`template` with every word outside ``FRAME`` masked,
    prepositions as ``P``, each run of masked words one ``_``."""
    out: list[str] = []
    for w in template(question, topics).replace(MASK, " _ ").split():
        w = w if w in FRAME else ("P" if w in PREPOSITIONS else "_")
        if not (w == "_" and out and out[-1] == "_"):
            out.append(w)
    return " ".join(out)


@lru_cache(maxsize=1)
def common_shapes() -> dict[str, str]:
    """{shape: "<sample>: <n> of <N> questions, e.g. <question>"} over every sample's most common
    templates (a shape of >= ``COMMON_SHARE`` of its questions and >= 3 of them)."""
    by: dict[str, dict[str, list[str]]] = {}
    for src, q, topics in evaluated_questions():
        by.setdefault(src, {}).setdefault(shape(q, topics), []).append(q)
    out: dict[str, str] = {}
    for src, shapes in by.items():
        n = sum(len(v) for v in shapes.values())
        for sh, qs in shapes.items():
            if len(qs) >= 3 and len(qs) >= COMMON_SHARE * n:
                out.setdefault(sh, f"{src}: {len(qs)} of {n} questions, e.g. {qs[0]!r}")
    return out


def find_common_shape(text: str) -> str | None:
    common = common_shapes()
    for seg in example_questions(text):
        if seg in PAPER_EXAMPLES:
            continue
        sh = shape(seg)
        if sh in common:
            return f"{seg!r} has the shape {sh!r} ({common[sh]})"
    return None


# ------------------------------------------------------------------ evaluated relation names
def _identifiers(name: str) -> set[str]:
    name = name.strip()
    # Freebase "/a/b/c./d/e/f" (a CVT path) is two relations, a.b.c and d.e.f
    parts = [p.strip("/").replace("/", ".") for p in re.split(r"\./", name)] if "/" in name else [name]
    parts = [p for p in parts if p]
    out: set[str] = set()
    for p in parts:
        segs = p.split(".")
        if len(segs) >= 3:
            out |= {p, ".".join(segs[:2])}
            if "_" in segs[-1]:
                out.add(segs[-1])
        elif "_" in p or "." in p:
            out.add(p)
    return out


@lru_cache(maxsize=1)
def evaluated_relations() -> dict[str, str]:
    """{relation identifier: the KG it comes from}."""
    from kgreason.data.ddxplus import load_ddxplus_kg
    from kgreason.kg.embedded import make_world

    rels: dict[str, str] = {}

    def add(names, src):
        for n in names:
            for i in _identifiers(str(n)):
                rels.setdefault(i, src)

    add(METAQA_RELATIONS, "MetaQA (PROVENANCE.md)")
    add(make_world(0).kg.relation_names, "embedded KG")
    a = REPO / "tests" / "assets"
    add(load_ddxplus_kg(a / "ddxplus" / "release_conditions.json", a / "ddxplus" / "release_evidences.json").relation_names,
        "DDXPlus KG")
    add({r for line in (a / "rog_subgraphs.jsonl").read_text().splitlines() if line.strip()
         for _, r, _ in json.loads(line).get("graph", [])}, "RoG subgraphs (Freebase)")
    add({row[7] for row in csv.reader((a / "umls" / "MRREL.RRF").open(), delimiter="|") if len(row) > 7 and row[7]},
        "UMLS MRREL")
    shared = _shared()
    if shared is not None:
        kb = shared / "metaqa" / "kb.txt"
        if kb.exists():
            add({ln.split("|")[1] for ln in kb.read_text(encoding="utf-8").splitlines() if ln.count("|") == 2}, "MetaQA kb.txt")
        r2t = shared / "freebase_fb15k237" / "relation2text.txt"
        if r2t.exists():
            add({ln.split("\t")[0] for ln in r2t.read_text(encoding="utf-8").splitlines() if ln}, "Freebase FB15k-237")
        for f in (shared / "umls_semnet").glob("train.txt"):
            add({ln.split("\t")[1] for ln in f.read_text(encoding="utf-8").splitlines() if ln.count("\t") == 2}, "UMLS semnet")
    return rels


# ------------------------------------------------------------------ the checks
def find_copied_question(text: str) -> str | None:
    t = f" {norm(text)} "
    for src, q, _ in evaluated_questions():
        nq = norm(q)
        if len(nq.split()) >= 3 and f" {nq} " in t:
            return f"{src}: {q}"
    return None


def find_copied_template(text: str) -> str | None:
    grams, short = template_index()
    for seg in example_questions(text):
        if seg in PAPER_EXAMPLES:
            continue
        words = seg.split()
        for i in range(len(words) - NGRAM + 1):
            g = " ".join(words[i:i + NGRAM])
            if g in grams:
                return f"{g!r} (from {grams[g]})"
        for rx, q in short:
            if rx.match(f" {seg}"):
                return f"{seg!r} (template of {q})"
    return None


def find_relation_names(text: str) -> list[str]:
    rels = evaluated_relations()
    toks = set(re.findall(r"[A-Za-z0-9_.]+", text))
    toks |= {t.rstrip(".") for t in toks}
    found = set()
    for tok in toks:
        for cand in {tok} | {".".join(tok.split(".")[:2])}:
            if cand in rels:
                found.add(f"{cand} ({rels[cand]})")
    return sorted(found)


CHECKS = {"question": find_copied_question, "template": find_copied_template, "shape": find_common_shape,
          "relations": lambda text: ", ".join(find_relation_names(text)) or None}


def _cases():
    for f in FILES:
        for check in CHECKS:
            short = _rel(f).split("prompts/")[-1]
            yield pytest.param(f, check, id=f"{short}:{check}")


@pytest.mark.parametrize("path, check", list(_cases()))
def test_prompt_copies_no_evaluated_question_template_or_relation(path, check):
    hit = CHECKS[check](prompt_text(path))
    assert hit is None, f"{_rel(path)}: worked example copies an evaluated {check}: {hit}"


# ------------------------------------------------------------------ the checks can fail
def test_checks_catch_the_copies_they_were_written_against():
    """The examples this test was written against fail it (so none of the checks is vacuous)."""
    assert find_copied_template("Q: Which films did Mara Stone direct?")  # embedded world template
    assert find_copied_template("Q: Who directed The Iron Harbor?")  # a short template, whole
    assert find_copied_template("Q: What is the capital of the country where the tower stands?")
    assert find_copied_question("Q: " + evaluated_questions()[0][1])
    assert "written_by (MetaQA (PROVENANCE.md))" in find_relation_names("Harbour Lights | written_by | Jane Moss")
    assert any(r.startswith("film.film ") for r in find_relation_names("1. film.film (backward): directed_by"))
    # issue 43: the bridges example had the shape of MetaQA 2-hop's "which films share the same
    # director of [X]" with the words swapped (caught once the shared samples are present)
    assert shape("which bridges span the same river as Lowmarsh Bridge") == shape("which films share the same director of [X]")
    # instruction prose and a made-up domain pass
    assert find_copied_template("Reply with only the query in a code block.") is None
    assert find_relation_names("Lowmarsh | flows_into | the Tarrow estuary") == []


def test_the_bridges_example_has_a_common_metaqa_shape(shared_data):
    """The known offender of issue 43 is one of MetaQA 2-hop's most common templates."""
    if not (shared_data / "metaqa" / "2hop_test_sample1000.jsonl").exists():
        pytest.skip("MetaQA sample absent")
    hit = find_common_shape('for "which bridges span the same river\nas Lowmarsh Bridge" (triples ...)')
    assert hit and "2hop_test_sample1000" in hit


def test_metaqa_templates_are_masked_at_the_bracket(shared_data):
    if not (shared_data / "metaqa" / "1hop_test_sample1000.jsonl").exists():
        pytest.skip("MetaQA sample absent")
    assert template("what does [Emraan Hashmi] star in", ()) == f"what does {MASK} star in"
    assert find_copied_template("Q: what does Kiri Vale star in") is not None


@pytest.mark.parametrize("question, cite", sorted(PAPER_EXAMPLES.items()))
def test_paper_examples_are_the_papers(question, cite):
    papers = REPO.parent / "shared" / "papers"
    paper = papers / cite.split()[0]
    if not paper.exists():
        pytest.skip(f"{paper} absent")
    assert question in norm(paper.read_text(encoding="utf-8")), f"{question!r} is not in {cite}"
