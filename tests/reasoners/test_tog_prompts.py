"""ToG's prompts follow the structure of the authors' ``ToG/prompt_list.py`` (IDEA-FinAI/ToG,
formerly GasolSun36/ToG), in our own words and with our own worked examples:

* relation pruning (``extract_relation_prompt``): ONE worked example, a question, its topic
  entity, the candidate relations and the scored reply ``n. {relation (Score: s)}: why``;
* entity scoring (``score_entity_candidates_prompt``): ONE worked example, a question, the
  relation, the candidate entities and the reply ``Score: s1, s2, ...`` in list order;
* reasoning (``prompt_evaluate``): FIVE few-shot examples over knowledge triplets, each
  ``{Yes}`` / ``{No}`` with why, a ``{Yes}`` ending on its answer in braces;
* answer (``answer_prompt``): FIVE few-shot examples on the same questions, each ending with
  our ``Answer:`` line.

The examples live in an invented world (a package registry) whose relation names no evaluated
KG uses. The tests below rebuild that world, check that every example is exactly what our code
sends for it (so the example and the real prompt cannot drift apart) and that our parsers read
every example reply as the example means it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from kgreason.kg.store import KG
from kgreason.llm.parsing import parse_answers, parse_candidate_scores
from kgreason.llm.scripted import ScriptedLLM
from kgreason.reasoners.base import load_prompt
from kgreason.reasoners.tog import ToG, parse_evaluate_reply
from kgreason.types import Example

P = "registry.package."
# the invented world every worked example is drawn from (none of it is in an evaluated KG)
WORLD = [
    ("quillmark", P + "build_backend", "forgeplate"),
    ("quillmark", P + "depends_on", "inkwell-colour"),
    ("quillmark", P + "depends_on", "lattice-cache"),
    ("quillmark", P + "depends_on", "pytide-runner"),
    ("quillmark", P + "depends_on", "tomlette"),
    ("quillmark", P + "keyword", "markdown"),
    ("quillmark", P + "maintainer", "Odile Brandt"),
    ("quillmark", P + "published_on", "2021-06-14"),
    ("quillmark", P + "source_repository", "odile/quillmark"),
    ("ledgerline", P + "depends_on", "quillmark"),
    ("ledgerline", P + "depends_on", "tomlette"),
    ("ledgerline", P + "published_on", "2019-03-04"),
    ("tomlette", P + "maintainer", "Kasper Lund"),
    ("tomlette", P + "published_on", "2017-11-20"),
    ("inkwell-colour", P + "maintainer", "Mirela Tosic"),
    ("Odile Brandt", "registry.person.employer", "Larkspur Labs"),
    ("Kasper Lund", "registry.person.home_city", "Aarhus"),
]
# MetaQA's nine relations (metaqa/kb.txt), pinned so the check runs without the shared data
METAQA_RELATIONS = {"directed_by", "written_by", "starred_actors", "has_genre", "has_tags", "in_language",
                    "release_year", "has_imdb_rating", "has_imdb_votes"}


def _blocks(text: str) -> list[str]:
    """A prompt's blocks: the instruction, then one block per ``Q:`` (examples, then the query)."""
    return re.split(r"\n\n(?=Q: )", text.strip())


def _examples(step: str) -> tuple[list[str], str]:
    blocks = _blocks(load_prompt("tog", step))
    assert blocks[-1].startswith("Q: {question}"), f"{step}: the prompt ends with the question to answer"
    return blocks[1:-1], blocks[-1]


def _split(block: str) -> tuple[str, str]:
    """An example block: (what our code sends, up to and including ``A:``; the reply)."""
    head, sep, reply = block.partition("\nA: ")
    assert sep, f"no 'A: ' reply in example:\n{block}"
    return head + "\nA:", reply


def _listing(lines: list[str], header: str) -> list[str]:
    i = lines.index(header)
    out = []
    for k, ln in enumerate(lines[i + 1:], 1):
        m = re.fullmatch(rf"{k}\. (.+)", ln)
        if not m:
            break
        out.append(m.group(1))
    return out


def _world() -> KG:
    return KG.from_triples(WORLD)


def _sent(llm: ScriptedLLM, task: str) -> list[str]:
    return [r.messages[-1].content for r in llm.calls if r.messages[-1].content.startswith(task)]


# --------------------------------------------------------------------------- relation pruning

def test_relation_pruning_prompt_has_one_worked_example_scored_in_the_format_we_parse():
    examples, query = _examples("prune_relations")
    assert len(examples) == 1  # as extract_relation_prompt
    sent, reply = _split(examples[0])
    lines = sent.splitlines()
    assert lines[0].startswith("Q: ") and lines[1].startswith("Topic entity: ")
    names = _listing(lines, "Relations:")
    assert len(names) >= 5 and any(n.endswith(" (backward)") for n in names)
    written = re.findall(r"^\d+\. \{(.+?) \(Score: ([\d.]+)\)\}: \S", reply, re.M)
    assert len(written) == 3 == len(reply.splitlines())  # ToG's width, one line per relation
    assert any(n.endswith(" (backward)") for n, _ in written)
    assert abs(sum(float(s) for _, s in written) - 1.0) < 1e-9
    res = parse_candidate_scores(reply, names)
    assert res.ok
    assert res.value == [float(dict(written)[n]) if n in dict(written) else 0.0 for n in names]
    assert query.splitlines() == ["Q: {question}", "{context}", "Relations:", "{candidates}", "A:"]


def test_the_relation_example_is_what_tog_sends_for_its_question():
    (block,), _ = _examples("prune_relations")
    sent, reply = _split(block)
    q = sent.splitlines()[0].removeprefix("Q: ")
    llm = ScriptedLLM(rules=[{"pattern": r"^TASK: score relations", "reply": reply},
                             {"pattern": r"^TASK: score entities", "reply": "Score: 1.0"},
                             {"pattern": r"^TASK: decide", "reply": "{Yes}"},
                             {"pattern": r"^TASK: answer", "reply": "Answer: Larkspur Labs"}])
    pred = ToG(kg=_world(), llm=llm, width=3, depth=1).answer(Example("ex", q, topic_entities=("quillmark",)))
    (prompt,) = _sent(llm, "TASK: score relations")
    assert _blocks(prompt)[-1] == sent
    kept = [s for s in pred.trace if s.kind == "prune"][0].data
    written = re.findall(r"\{(.+?) \(Score: ([\d.]+)\)\}", reply)
    assert kept["kept"] == [n for n, _ in written] and kept["scores"] == [float(s) for _, s in written]


# --------------------------------------------------------------------------- entity scoring

def test_entity_scoring_prompt_has_one_worked_example_scored_in_list_order():
    examples, query = _examples("score_entities")
    assert len(examples) == 1  # as score_entity_candidates_prompt
    sent, reply = _split(examples[0])
    lines = sent.splitlines()
    assert lines[0].startswith("Q: ") and lines[1].startswith("Relation: ")
    names = _listing(lines, "Entities:")
    assert len(names) >= 3
    first = reply.splitlines()[0]
    assert re.fullmatch(r"Score: \d\.\d+(?:, \d\.\d+)*", first) and len(reply.splitlines()) >= 2  # then why
    written = [float(x) for x in first.removeprefix("Score: ").split(", ")]
    assert len(written) == len(names) and abs(sum(written) - 1.0) < 1e-9
    res = parse_candidate_scores(reply, names)
    assert res.ok and res.value == written
    assert query.splitlines() == ["Q: {question}", "{context}", "Entities:", "{candidates}", "A:"]


def test_the_entity_example_is_what_tog_sends_for_its_question():
    (block,), _ = _examples("score_entities")
    sent, reply = _split(block)
    lines = sent.splitlines()
    q, rel = lines[0].removeprefix("Q: "), lines[1].removeprefix("Relation: ")
    llm = ScriptedLLM(rules=[{"pattern": r"^TASK: score relations", "reply": f"1. {{{rel} (Score: 1.0)}}: asked"},
                             {"pattern": r"^TASK: score entities", "reply": reply},
                             {"pattern": r"^TASK: decide", "reply": "{Yes}"},
                             {"pattern": r"^TASK: answer", "reply": "Answer: pytide-runner"}])
    pred = ToG(kg=_world(), llm=llm, width=3, depth=1).answer(Example("ex", q, topic_entities=("quillmark",)))
    (prompt,) = _sent(llm, "TASK: score entities")
    assert _blocks(prompt)[-1] == sent
    names = _listing(lines, "Entities:")
    best = names[int(np.argmax([float(x) for x in reply.splitlines()[0][7:].split(", ")]))]
    assert [s for s in pred.trace if s.kind == "beam"][0].data["kept"] == [best]


# --------------------------------------------------------------------------- reasoning and answer

def _path_lines(sent: str) -> list[str]:
    lines = sent.splitlines()
    return lines[lines.index("Knowledge triplets:") + 1: -1]


def _check_paths(kg: KG, lines: list[str]) -> None:
    """Every example triplet is a WORLD fact, written exactly as ``KG.verbalise`` writes it (what
    ToG sends: every triplet gathered so far, one per line)."""
    facts = set(WORLD)
    assert lines
    for line in lines:
        h, rel, t = line.split(" | ")
        assert (h, rel, t) in facts, f"not a fact of the example world: {line!r}"
        assert kg.verbalise((kg.entity_id(h), kg.relation_names.index(rel), kg.entity_id(t))) == line


def test_reasoning_prompt_has_five_few_shot_yes_no_examples():
    examples, query = _examples("reason")
    assert len(examples) == 5  # as prompt_evaluate
    kg, verdicts = _world(), []
    for block in examples:
        sent, reply = _split(block)
        assert sent.splitlines()[1] == "Knowledge triplets:" and sent.endswith("\nA:")
        _check_paths(kg, _path_lines(sent))
        m = re.match(r"\{(Yes|No)\}\. \S", reply)
        assert m, f"an example reply opens with {{Yes}} or {{No}} and says why: {reply!r}"
        res = parse_evaluate_reply(reply)
        assert res.ok and res.value[0] == (m.group(1) == "Yes")
        if res.value[0]:  # a {Yes} example's reply carries its answer in braces: ToG reads it from there
            assert res.value[1] and not set(res.value[1]) & {"Yes", "No"}
        verdicts.append(m.group(1))
    assert verdicts == ["No", "Yes", "No", "Yes", "No"]  # ToG's order of verdicts
    assert query.splitlines() == ["Q: {question}", "Knowledge triplets:", "{paths}", "A:"]


def test_answer_prompt_has_five_few_shot_examples_ending_with_our_answer_line():
    examples, query = _examples("answer")
    assert len(examples) == 5  # as answer_prompt
    kg = _world()
    reason_qs = [b.splitlines()[0] for b in _examples("reason")[0]]
    assert [b.splitlines()[0] for b in examples] == reason_qs  # the same questions, as ToG
    for block in examples:
        sent, reply = _split(block)
        _check_paths(kg, _path_lines(sent))
        assert reply.splitlines()[-1].startswith("Answer: ") and len(reply.splitlines()) >= 2
        res = parse_answers(reply)
        assert res.ok and res.value, reply
    assert query.splitlines() == ["Q: {question}", "Knowledge triplets:", "{paths}", "A:"]


def test_reasoning_and_answer_prompts_are_what_tog_sends():
    kg = _world()
    llm = ScriptedLLM(rules=[{"pattern": r"^TASK: score relations", "reply": "1. {registry.package.maintainer (Score: 1.0)}: x"},
                             {"pattern": r"^TASK: decide", "reply": "{No}. not enough"},
                             {"pattern": r"^TASK: answer the question from", "reply": "Odile Brandt is the maintainer.\nAnswer: Odile Brandt"},
                             {"pattern": r"^TASK: answer", "reply": "Answer: x"}])
    q = "Who maintains quillmark?"
    ToG(kg=kg, llm=llm, width=3, depth=1, at_depth_limit="triplets").answer(Example("ex", q, topic_entities=("quillmark",)))
    want = f"Q: {q}\nKnowledge triplets:\nquillmark | registry.package.maintainer | Odile Brandt\nA:"
    for task in ("TASK: decide", "TASK: answer the question from"):
        (prompt,) = _sent(llm, task)
        assert _blocks(prompt)[-1] == want


# --------------------------------------------------------------------------- answer without knowledge

def test_answer_without_knowledge_prompt_has_six_step_by_step_examples():
    """The release's ``cot_prompt`` (``generate_without_explored_paths``: no topic entity, or
    ``{No}`` at depth D): SIX examples, each reply a ``First, ... Second, ...`` chain ending on
    its answer; ours end with our ``Answer:`` line. Its facts are general knowledge (the model has
    no triplets here), in our own questions (tests/test_prompt_examples.py checks none copies an
    evaluated question or template)."""
    examples, query = _examples("answer_without_knowledge")
    assert len(examples) == 6  # as cot_prompt
    for block in examples:
        sent, reply = _split(block)
        assert len(sent.splitlines()) == 2 and sent.startswith("Q: ")  # the question alone
        assert reply.startswith("First, ") and len(reply.splitlines()) == 2
        assert reply.splitlines()[-1].startswith("Answer: ")
        res = parse_answers(reply)
        assert res.ok and res.value, reply
    assert any(len(parse_answers(_split(b)[1]).value) > 1 for b in examples)  # one lists several answers
    assert query.splitlines() == ["Q: {question}", "A:"]
    assert load_prompt("tog", "answer_without_knowledge") != load_prompt("cot", "answer")


def test_the_answer_without_knowledge_prompt_is_what_tog_sends():
    llm = ScriptedLLM(rules=[{"pattern": r"^TASK: answer the question step by step", "reply": "First, x.\nAnswer: y"}])
    q = "Which city hosts the registry's yearly meeting?"
    pred = ToG(kg=_world(), llm=llm).answer(Example("ex", q, topic_entities=("nowhere",)))
    (req,) = llm.calls
    assert _blocks(req.messages[-1].content)[-1] == f"Q: {q}\nA:" and pred.answers == ("y",)


# --------------------------------------------------------------------------- unevaluated domain

@pytest.mark.parametrize("step", ["prune_relations", "score_entities", "reason", "answer"])
def test_worked_examples_use_no_relation_of_an_evaluated_kg(step, world):
    text = load_prompt("tog", step)
    used = set(re.findall(r"\b[a-z_]+(?:\.[a-z_]+)+\b", text))
    assert used and used <= {r for _, r, _ in WORLD}, used
    evaluated = set(world.kg.relation_names) | METAQA_RELATIONS
    for rel in used:
        assert not any(e in rel for e in evaluated), rel  # not even as a part of a name
    # MetaQA's question templates (the films of ... / which ... share ...) stay out too
    assert not re.search(r"\b(film|movie|director|actor|starred|genre|share)s?\b", text, re.I)
