"""The PDSQI-9 judge against the published instrument (issue 43, item 4): the table in
docs/diagnosis.md maps each of our items to the instrument's published key and scale; this test
reads that table and checks it against the code's scales (``PDSQI_SCALES``), the rubric's anchors
(one per scale value, in ``judges/rubrics/pdsqi9.txt``) and the aggregation (the mean of the
rows marked "in Average", LogosKG Table 5's seven). And the judge reads the output under review
as the method wrote it, not a list numbered by us.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO
from kgreason.judges.pdsqi import BINARY, LIKERT, PDSQI_ATTRIBUTES, PDSQI_SCALES, TABLE5_DIMENSIONS, PDSQIJudge, load_rubric
from kgreason.llm.scripted import ScriptedLLM
from kgreason.types import Example, Prediction

# the instrument's published keys (pdsqi_prompt.py's output rule, epic-open-source/evaluation-instruments)
PUBLISHED_KEYS = ("citation", "accurate", "thorough", "useful", "organized", "comprehensible", "succinct",
                  "abstraction", "synthesized", "voice_summ", "voice_note")
SCALES = {"1-5": (LIKERT, False), "0/1": (BINARY, False), "1-5 or NA": (LIKERT, True)}
EX = Example(id="p1", question="A 40-year-old woman presents with cough and fever.", diagnoses=("Pneumonia",))


def _table() -> list[dict[str, str]]:
    text = (REPO / "docs" / "diagnosis.md").read_text(encoding="utf-8")
    lines = text[text.index("| our key | published key"):].splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for ln in lines[2:]:
        if not ln.startswith("| `"):
            break
        rows.append(dict(zip(head, (c.strip() for c in ln.strip().strip("|").split("|")))))
    return rows


def test_the_table_maps_every_item_to_the_published_instrument():
    rows = _table()
    ours = [r["our key"].strip("`") for r in rows]
    assert tuple(ours) == PDSQI_ATTRIBUTES
    assert tuple(r["published key"].strip("`") for r in rows) == PUBLISHED_KEYS
    for r in rows:
        assert SCALES[r["scale"]] == PDSQI_SCALES[r["our key"].strip("`")], r["our key"]
    averaged = {r["our key"].strip("`") for r in rows if r["in Average"].startswith("yes")}
    assert averaged == set(TABLE5_DIMENSIONS) and len(TABLE5_DIMENSIONS) == 7
    assert "be2bf79c3c189af93508fadd78c582ba8f875073" in (REPO / "docs" / "diagnosis.md").read_text(encoding="utf-8")


def test_the_rubric_gives_one_anchor_per_scale_value_for_every_item():
    text = load_rubric()
    for key, (allowed, na) in PDSQI_SCALES.items():
        scale = f"{allowed[0]}-{allowed[-1]}" if allowed == LIKERT else f"{allowed[0]} or {allowed[-1]}"
        m = re.search(rf"^{key} \(({re.escape(scale)}[^)]*)\): (.+)$", text, flags=re.M)
        assert m, f"rubric: no '{key} ({scale}...)' item line"
        assert ('"NA"' in m.group(1)) == na
        block = text[m.end():].split("\n")
        anchors = []
        for ln in block[1:]:
            a = re.match(r"^  (NA|\d) = \S", ln)
            if not a:
                break
            anchors.append(a.group(1))
        want = (["NA"] if na else []) + [str(v) for v in allowed]
        assert anchors == want, f"rubric {key}: anchors {anchors}, scale {want}"


def _reply(**over):
    s = {a: (3 if PDSQI_SCALES[a][0] == LIKERT else 0) for a in PDSQI_ATTRIBUTES}
    s["abstraction_needed"] = 1
    s.update(over)
    return json.dumps(s)


def test_the_average_is_the_mean_of_the_rows_the_table_marks():
    rows = _table()
    averaged = [r["our key"].strip("`") for r in rows if r["in Average"].startswith("yes")]
    vals = dict(zip(averaged, [5, 4, 2, 1, 3, 4, 2]))
    js = PDSQIJudge(llm=ScriptedLLM(default=_reply(**vals, cited=1, stigmatizing=1))).judge(EX, Prediction("p1", ("x",)))
    assert js.total == pytest.approx(sum(vals.values()) / 7)
    na = {**vals, "synthesized": "NA"}
    js2 = PDSQIJudge(llm=ScriptedLLM(default=_reply(**na, abstraction_needed=0))).judge(EX, Prediction("p1", ("x",)))
    assert js2.total == pytest.approx(sum(v for k, v in vals.items() if k != "synthesized") / 6)


def _seen(pred) -> str:
    llm = ScriptedLLM(default=_reply())
    PDSQIJudge(llm=llm).judge(EX, pred)
    prompt = llm.calls[0].messages[-1].content
    return prompt.split("as the method wrote it:\n", 1)[1].split("\n\nReply with only", 1)[0]


def test_the_judge_reads_the_output_as_the_method_wrote_it():
    cot = ("Cough with fever suggests a lower respiratory infection.\nFocal crackles point to the lung.\n"
           "Answer: Pneumonia; Bronchitis")
    assert _seen(Prediction("p1", ("Pneumonia", "Bronchitis"), extra={"output": cot})) == cot
    why = {"Pneumonia": "fever with a productive cough", "Bronchitis": "cough without consolidation"}
    assert _seen(Prediction("p1", ("Pneumonia", "Bronchitis"), extra={"reasoning": why})) == (
        "Pneumonia: fever with a productive cough\nBronchitis: cough without consolidation")
    # a method that gives a bare list: its list, in its order, no numbering added
    assert _seen(Prediction("p1", ("Pneumonia", "Bronchitis"))) == "Pneumonia\nBronchitis"


def test_cot_keeps_its_whole_reply_for_the_judge():
    from kgreason.reasoners.cot import CoT

    reply = "Fever and cough point to the lungs.\nAnswer: Pneumonia"
    pred = CoT(llm=ScriptedLLM(default=reply)).answer(EX)
    assert pred.answers == ("Pneumonia",) and pred.extra["output"] == reply
    assert _seen(pred) == reply
