"""Issue 30 item 6: static instructions and worked examples come before the per-question parts of
every prompt, so a server's prompt cache (llama.cpp's ``cache_prompt``, vLLM's prefix caching)
can reuse them across questions. Measured as the share of a prompt's fixed text that precedes its
first per-question field; a prompt whose instructions or examples follow the question fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FILES = sorted((REPO / "kgreason" / "reasoners" / "prompts").glob("*/*.txt")) + \
    sorted((REPO / "kgreason" / "judges" / "rubrics").glob("*.txt"))
#: fields fixed for a whole run (a setting), not per question: they may come anywhere
RUN_CONSTANT = {"keep", "max_diagnoses", "limit", "what"}
FIELD = re.compile(r"(?<!\{)\{([a-z_]+)\}(?!\})")
MIN_PREFIX_SHARE = 0.5
#: prompts whose question block comes first on purpose: a follow-up prompt of the same question opens
#: with the same block, so its call reuses the whole earlier prompt but the instructions (issue 70:
#: SGR's Refine, Eq. 22, follows a Cypher call, Eq. 16, of the same question); checked below
SHARED_QUESTION_BLOCK = {"sgr/cypher.txt": "sgr/refine.txt", "sgr/refine.txt": "sgr/cypher.txt"}


def prefix_share(text: str) -> float:
    """The share of the prompt's fixed text (fields removed) before its first per-question field."""
    fields = [m for m in FIELD.finditer(text) if m.group(1) not in RUN_CONSTANT]
    static = FIELD.sub("", text)
    if not fields or not static.strip():
        return 1.0
    return len(FIELD.sub("", text[: fields[0].start()])) / len(static)


def test_the_measure_tells_a_question_first_prompt_from_an_instructions_first_one():
    late = "Question: {question}\n\n" + "Answer with one name, no explanation, no punctuation at all. " * 3
    early = "Answer with one name, no explanation, no punctuation at all. " * 3 + "\n\nQuestion: {question}\n"
    assert prefix_share(late) < MIN_PREFIX_SHARE <= prefix_share(early)
    assert prefix_share("Pick the {keep} best of:\n{question}") == 1.0


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(REPO).as_posix().split("prompts/")[-1])
def test_fixed_text_comes_before_the_question(path):
    name = path.relative_to(REPO).as_posix().split("prompts/")[-1]
    if name in SHARED_QUESTION_BLOCK:
        pytest.skip(f"{name} shares its question block with {SHARED_QUESTION_BLOCK[name]} "
                    "(test_a_question_first_prompt_shares_its_block)")
    share = prefix_share(path.read_text(encoding="utf-8"))
    assert share >= MIN_PREFIX_SHARE, (f"{path.name}: only {share:.0%} of its fixed text precedes the first "
                                       "per-question field; put instructions and examples first")


@pytest.mark.parametrize("name", sorted(SHARED_QUESTION_BLOCK))
def test_a_question_first_prompt_shares_its_block(name):
    """The exemption holds only while the two prompts open with the same text through the last
    per-question field they share (so the second call reuses the first's state)."""
    root = REPO / "kgreason" / "reasoners" / "prompts"
    a = (root / name).read_text(encoding="utf-8")
    b = (root / SHARED_QUESTION_BLOCK[name]).read_text(encoding="utf-8")
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    shared = a[:n]
    assert {m.group(1) for m in FIELD.finditer(shared)} >= {"question", "topics", "constraints", "schema"}, shared
