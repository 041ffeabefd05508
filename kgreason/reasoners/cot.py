"""Chain-of-thought prompting without a KG (the "CoT" row of SGR Table 1, sgr.txt §4).

The prompt (``prompts/cot/answer.txt``, two worked examples) asks the model to reason step by
step and end with a line ``Answer: a1; a2``. :func:`parse_answers` reads that line; when it is
missing the last non-empty line is taken, so a terse model still gets scored. The whole reply is
kept as ``extra["output"]``: the text a reader (or the PDSQI-9 judge) reviews.
"""

from __future__ import annotations

from kgreason.llm.parsing import parse_answers
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, load_prompt, render
from kgreason.types import ChatRequest, Example, Prediction

class CoT(BaseReasoner):
    """Chain-of-thought QA from the model's own knowledge.

    Args:
        temperature: sampling temperature (0 = greedy, as in the paper's baselines).
        max_tokens: room for the reasoning plus the answer line.
        prompts_dir: folder under ``kgreason/reasoners/prompts``.
        max_reasks: re-asks when the reply has no ``Answer:`` line (kit policy; 0 = none).
    """

    tasks = ("kgqa", "multihop", "diagnosis")  # the question alone: any task (preflight checks it)
    uses_kg = False

    def __init__(self, *, kg=None, retriever=None, llm, temperature: float = 0.0,
                 max_tokens: int = 512, prompts_dir: str = "cot", max_reasks: int = 0, embedder=None,
                 graphdb=None) -> None:
        self.llm = llm
        self.reask = ReaskPolicy(max_reasks)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.template = load_prompt(prompts_dir, "answer")

    def answer(self, example: Example) -> Prediction:
        t = Trace()
        req = ChatRequest.of(render(self.template, question=example.question),
                             temperature=self.temperature, max_tokens=self.max_tokens)
        res = self.ask(t, "answer", req, parse_answers)
        # the full reply (reasoning steps and answer line): the output a reader, or the PDSQI-9
        # judge, reviews (kgreason/judges/pdsqi.py output_of)
        reply = next((st.data["replies"][0] for st in reversed(t.steps) if st.kind == "llm" and st.data.get("replies")), "")
        return t.finish(example, res.value or [], llm_calls=1, output=reply)
