"""Issue 70: every prompt that asks for JSON carries the schema of the form it asks for
(`prompts/<reasoner>/<step>.schema.json`), used when `llm.structured_output=true`. Each schema
accepts the worked examples its own prompt shows, and llama.cpp can turn it into a grammar."""

from __future__ import annotations

import json
import re
from importlib.resources import files

import pytest

from kgreason.reasoners.base import load_prompt, load_schema

PROMPTS = files("kgreason.reasoners").joinpath("prompts")
SCHEMAS = sorted((d.name, f.name.removesuffix(".schema.json")) for d in PROMPTS.iterdir() if d.is_dir()
                 for f in d.iterdir() if f.name.endswith(".schema.json"))


def _examples(text: str) -> list:
    """The JSON values a prompt shows (whole lines or inline after "e.g."), placeholders left out."""
    out, dec, end = [], json.JSONDecoder(), -1
    for m in re.finditer(r"[\[{]", text):
        if m.start() < end:
            continue  # inside a value already read
        try:
            value, end = dec.raw_decode(text, m.start())
        except ValueError:
            continue
        passage_marker = isinstance(value, list) and all(isinstance(x, int) for x in value)  # "[0] text"
        if "<" not in json.dumps(value) and value not in ([], {}) and not passage_marker:
            out.append(value)
    return out


def test_every_prompt_that_asks_for_json_has_a_schema_and_no_other_does():
    asks = set()
    for d in PROMPTS.iterdir():
        if not d.is_dir():
            continue
        for f in d.iterdir():
            if f.name.endswith(".txt") and re.search(r"\bJSON\b", f.read_text()) and "fewshot" not in f.name:
                asks.add((d.name, f.name.removesuffix(".txt")))
    assert asks - {(r, s) for r, s in SCHEMAS} == set()
    for r, s in SCHEMAS:
        load_prompt(r, s)  # a schema belongs to a prompt


@pytest.mark.parametrize("reasoner,step", SCHEMAS)
def test_a_schema_accepts_its_prompts_own_examples(reasoner, step):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(load_schema(reasoner, step))
    jsonschema.Draft202012Validator.check_schema(schema)
    for ex in _examples(load_prompt(reasoner, step)):
        if isinstance(ex, dict) and schema.get("type") == "array" or isinstance(ex, list) and schema.get("type") == "object":
            continue  # a JSON value quoted inside the instructions, not a reply
        jsonschema.validate(ex, schema)


@pytest.mark.parametrize("reasoner,step", SCHEMAS)
def test_a_schema_compiles_to_a_llamacpp_grammar(reasoner, step):
    pytest.importorskip("llama_cpp")
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    assert "root" in json_schema_to_gbnf(load_schema(reasoner, step))


def test_a_free_text_prompt_has_no_schema():
    assert load_schema("sgr", "cypher") is None and load_schema("tog", "reason") is None


def _key_orders(value) -> list[list[str]]:
    """The key order of every object in a JSON value (depth first)."""
    if isinstance(value, dict):
        return [list(value)] + [o for v in value.values() for o in _key_orders(v)]
    if isinstance(value, list):
        return [o for v in value for o in _key_orders(v)]
    return []


@pytest.mark.parametrize("reasoner,step", SCHEMAS)
def test_a_schema_keeps_the_field_order_its_prompt_shows(reasoner, step):
    """Structured output constrains the form, not the method (#70 item 3): a grammar writes an
    object's fields in the schema's order, so a schema whose keys were sorted would make SGR's
    hypothesis reply give its "answer" before the "hypothesis" that should lead to it, and its
    stepwise reply answer before it names the triple. The order sent is the order of the file and
    of every worked example in the prompt."""
    sent = json.loads(load_schema(reasoner, step))
    props = list(sent.get("properties", {}))
    on_disk = json.loads(PROMPTS.joinpath(reasoner, f"{step}.schema.json").read_text())
    assert props == list(on_disk.get("properties", {}))
    for ex in _examples(load_prompt(reasoner, step)):
        if isinstance(ex, dict) and set(ex) == set(props):
            assert list(ex) == props, f"{reasoner}/{step}: the example writes {list(ex)}, the schema {props}"


def test_the_grammar_writes_the_reasoning_field_before_the_answer():
    pytest.importorskip("llama_cpp")
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    for step, first in (("hypothesis", "hypothesis"), ("step", "triple")):
        root = next(line for line in json_schema_to_gbnf(load_schema("sgr", step)).splitlines()
                    if line.startswith("root ::="))
        assert root.index(f"{first}-kv") < root.index("answer-kv"), root
