"""IO prompting baseline: question → answer list with the LLM alone, no KG.

The "IO" row of SGR Table 1 / ReKnoS Table 2 (standard prompting, no retrieval): the model
sees only the question and returns a JSON list of answers, best first. Unparseable replies
are re-asked at most ``max_reasks`` times (each failure counts in ``llm/parse_failures``).
"""

from __future__ import annotations

from kgreason.llm.parsing import parse_list
from kgreason.reasoners.base import BaseReasoner, ReaskPolicy, Trace, load_prompt, load_schema, render
from kgreason.types import ChatRequest, Example, Prediction


class IO(BaseReasoner):
    """Args:
        temperature / max_tokens / seed: sampling of the single answer call.
        max_reasks: bounded re-asks on an unparseable reply.
        top_k: answers kept, ranked as the model listed them.
        system: system prompt (``null`` = none).
    """

    tasks = ("kgqa", "multihop", "diagnosis")  # the question alone: any task (preflight checks it)
    uses_kg = False

    def __init__(self, *, kg=None, retriever=None, llm, temperature: float = 0.0, max_tokens: int = 128,
                 seed: int | None = 0, max_reasks: int = 1, top_k: int = 5,
                 system: str | None = "You answer questions concisely.", embedder=None, graphdb=None) -> None:
        self.llm = llm
        self.temperature, self.max_tokens, self.seed = float(temperature), int(max_tokens), seed
        self.max_reasks, self.top_k, self.system = int(max_reasks), int(top_k), system
        self.reask = ReaskPolicy(self.max_reasks)
        self.template = load_prompt("io", "answer")
        self.schema = load_schema("io", "answer")  # sent with llm.structured_output=true only

    def answer(self, example: Example) -> Prediction:
        t = Trace()
        return t.finish(example, self.ask_io(t, example.question))

    def ask_io(self, t: Trace, question: str, purpose: str = "answer") -> list[str]:
        """The one IO call for ``question``, recorded on ``t``: its answers, best first."""
        req = ChatRequest.of(render(self.template, question=question), system=self.system,
                             temperature=self.temperature, max_tokens=self.max_tokens, seed=self.seed,
                             json_schema=self.schema)
        res = self.ask(t, purpose, req, parse_list, prompt_id="io/answer")
        return [a for a in (res.value or []) if a][: self.top_k] if res.ok else []


ON_EMPTY = ("answer", "abstain")


def check_on_empty(owner: str, value: str) -> str:
    """``reasoner.on_empty``: ``answer`` (the method's source's path, the default) | ``abstain``
    (no call, no answer: ablation ``on_empty_abstain``)."""
    if value not in ON_EMPTY:
        raise ValueError(f"{owner}: reasoner.on_empty must be one of {' | '.join(ON_EMPTY)}, got {value!r}")
    return value


def answer_without_retrieval(llm, t: Trace, question: str, on_empty: str) -> list[str]:
    """The empty-retrieval path of the KG reasoners whose source answers from the question alone
    (rag, rag_text; ReKnoS, SGR where their papers are silent): the IO baseline's own request
    (prompt, system prompt, sampling, parser: the IO row's defaults, so the call cache shares
    it with an IO run), recorded on ``t`` as step ``answer_without_retrieval``. ``on_empty:
    abstain`` makes no call and returns no answer."""
    if on_empty == "abstain":
        t.note("abstain", reason="nothing linked or retrieved (reasoner.on_empty=abstain)")
        return []
    return IO(llm=llm).ask_io(t, question, purpose="answer_without_retrieval")
