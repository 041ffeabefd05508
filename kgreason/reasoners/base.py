"""Reasoner protocol and the :class:`Trace` helper every reasoner uses to record its steps.

A reasoner is built once per run with settings (from YAML) and the injected dependencies
``kg``, ``retriever`` and ``llm`` (keyword-only; a reasoner that does not need one ignores it),
then called once per example::

    t = Trace()
    sub = t.retrieval("khop", retriever.retrieve(seeds, 2), kg)
    out = t.llm("answer", request, llm.generate([request])[0], parsed=...)
    return t.finish(example, answers)
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Protocol, Sequence

from kgreason.types import ChatRequest, Completion, Example, Prediction, Step, Subgraph, Usage, to_jsonable


class Reasoner(Protocol):
    def answer(self, example: Example) -> Prediction: ...


class Trace:
    """Collects :class:`Step` records and summed LLM usage for one example."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.usage = Usage()
        self.extra: dict[str, Any] = {}
        self._t0 = time.perf_counter()

    def add(self, kind: str, name: str, **data: Any) -> Step:
        step = Step(kind=kind, name=name, data=to_jsonable(data))
        self.steps.append(step)
        return step

    def note(self, name: str, **data: Any) -> Step:
        return self.add("note", name, **data)

    def llm(self, purpose: str, request: ChatRequest, completion: Completion, *,
            prompt_id: str | None = None, parsed: Any = None, parse_ok: bool = True) -> Completion:
        """Record one LLM call (prompt, replies, parsed output, usage)."""
        usage = completion.usage
        if not parse_ok:
            usage = usage + Usage(parse_failures=1)
        self.usage = self.usage + usage
        self.add(
            "llm", purpose, prompt_id=prompt_id or purpose,
            messages=[{"role": m.role, "content": m.content} for m in request.messages],
            temperature=request.temperature, n=request.n, replies=list(completion.texts),
            parsed=parsed, parse_ok=parse_ok, cached=completion.cached, usage=usage,
        )
        return completion

    def retrieval(self, name: str, sub: Subgraph, kg=None, **data: Any) -> Subgraph:
        """Record a k-hop retrieval: seeds, per-hop entity/triple counts, paths kept."""
        info = dict(
            seeds=[kg.entity_names[s] for s in sub.seeds] if kg is not None else sub.seeds,
            hops=sub.hops,
            entities_per_hop=[int(len(e)) for e in sub.entities_by_hop],
            triples_per_hop=[int(len(t)) for t in sub.triples_by_hop],
            n_paths=len(sub.paths), paths_truncated=sub.paths_truncated, timed_out=sub.timed_out,
        )
        info.update(data)
        self.add("retrieve", name, **info)
        return sub

    def finish(self, example: Example, answers: Sequence[str], error: str | None = None,
               **extra: Any) -> Prediction:
        self.extra.update(extra)
        self.extra.setdefault("latency_s", round(time.perf_counter() - self._t0, 4))
        return Prediction(
            example_id=example.id, answers=tuple(answers), trace=tuple(self.steps), usage=self.usage,
            error=error, extra=to_jsonable(self.extra),
        )


def render(template: str, **values: Any) -> str:
    """Fill ``{name}`` placeholders without choking on JSON braces elsewhere in the prompt."""
    out = template
    for k, v in values.items():
        out = out.replace("{" + k + "}", str(v))
    return out


def load_prompt(reasoner: str, step: str) -> str:
    """Read ``kgreason/reasoners/prompts/<reasoner>/<step>.txt``."""
    from importlib.resources import files

    return files("kgreason.reasoners").joinpath("prompts", reasoner, f"{step}.txt").read_text()
