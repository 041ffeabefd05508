"""`scripts/reliability_passes.py` re-runs the fifth pass's 18 failures (issue 57) and the sixth
pass's 15 (issue 73) by the tests that reproduce them (issue 73: "in one script, all holding").
Here: every test it names exists, and its verdict fails a case whose test failed, was not run or
was skipped. The script itself is run by hand or in CI (91 tests, about 2.5 min)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("reliability_passes", REPO / "scripts" / "reliability_passes.py")
passes = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = passes  # its dataclasses look their module up
SPEC.loader.exec_module(passes)


def test_the_script_holds_every_case_of_both_passes():
    ids = {5: [c.id for c in passes.CASES if c.pass_no == 5], 6: [c.id for c in passes.CASES if c.pass_no == 6]}
    assert ids[5] == ["M1", "M2", "M3", "M4", *(f"L{i}" for i in range(1, 15))]
    assert ids[6] == ["H1", "M1", "M2", "M3", "M4", "M5", *(f"L{i}" for i in range(1, 10))]


@pytest.mark.parametrize("node", sorted({t for c in passes.CASES for t in c.tests}))
def test_every_test_the_script_names_exists(node):
    path, _sep, name = node.partition("::")
    src = REPO / path
    assert src.is_file(), node
    if name:
        funcs = {n.name for n in ast.walk(ast.parse(src.read_text())) if isinstance(n, ast.FunctionDef)}
        assert name in funcs, node


def test_a_case_holds_only_when_every_test_of_it_passed():
    case = passes.Case(6, "X", "x", ("tests/a.py::test_one", "tests/a.py::test_two"))
    ok = {"tests/a.py::test_one[p]": ("passed", ""), "tests/a.py::test_one[q]": ("passed", ""),
          "tests/a.py::test_two": ("passed", "")}
    assert passes.verdict(case, ok)[0] == "holds"
    assert passes.verdict(case, {**ok, "tests/a.py::test_one[q]": ("failed", "boom")}) == \
        ("FAILS", "tests/a.py::test_one[q]: boom")
    assert passes.verdict(case, {k: v for k, v in ok.items() if "two" not in k})[0] == "FAILS"
    assert passes.verdict(case, {**ok, "tests/a.py::test_two": ("skipped", "needs root")})[0] == "not checked here"
    assert passes.verdict(passes.Case(5, "Y", "y", ("tests/b.py",)), {"tests/b.py::t": ("passed", "")})[0] == "holds"
