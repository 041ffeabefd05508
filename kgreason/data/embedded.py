"""Questions of the embedded world (see :mod:`kgreason.kg.embedded`).

``task`` picks the view: ``kgqa`` (1–3 hop KG questions), ``multihop`` (the 2–3 hop questions
as document QA over the verbalised corpus, with supporting passages), ``clinical`` (patients).
"""

from __future__ import annotations

from dataclasses import replace

from kgreason.data.base import ExampleSet
from kgreason.kg.embedded import make_world


def load_embedded(task: str = "kgqa", hops: list[int] | None = None, limit: int | None = None,
                  sample: int | None = None, sample_seed: int = 0, world_seed: int = 0) -> ExampleSet:
    w = make_world(world_seed)
    if task == "kgqa":
        items = [q for q in w.questions if hops is None or q.hops in hops]
    elif task == "multihop":
        items = []
        for q in w.questions:
            if q.hops is None or q.hops < 2 or (hops is not None and q.hops not in hops):
                continue
            items.append(replace(q, supporting=tuple(_supporting(w, q))))
    elif task == "clinical":
        items = list(w.patients)
    else:
        raise ValueError(f"load_embedded: unknown task {task!r}; expected kgqa | multihop | clinical")
    return ExampleSet(f"embedded-{task}", items, sample=sample, limit=limit, sample_seed=sample_seed)


def _supporting(w, q) -> list[str]:
    """Titles of the passages that state the facts along the gold path (entity passages whose
    subject is the head of each traversed triple)."""
    from collections import defaultdict

    out_idx, in_idx = defaultdict(list), defaultdict(list)
    for h, r, t in w.full_triples:
        out_idx[(h, r)].append(t)
        in_idx[(t, r)].append(h)
    titles: list[str] = []
    frontier = [q.topic_entities[0]]
    answers = set(q.answers)
    path = q.gold_paths[0]
    # walk forward keeping only branches that reach a gold answer
    layers = [frontier]
    for step in path:
        nxt = []
        for e in layers[-1]:
            nxt += in_idx[(e, step[1:])] if step.startswith("~") else out_idx[(e, step)]
        layers.append(list(dict.fromkeys(nxt)))
    keep = answers
    chain: list[tuple[str, str, str]] = []
    for i in range(len(path) - 1, -1, -1):
        step, prev = path[i], layers[i]
        new_keep = set()
        for e in prev:
            nbrs = in_idx[(e, step[1:])] if step.startswith("~") else out_idx[(e, step)]
            for b in nbrs:
                if b in keep:
                    new_keep.add(e)
                    chain.append((b, step, e) if step.startswith("~") else (e, step, b))
        keep = new_keep
    for h, _, _ in chain:
        if h not in titles:
            titles.append(h)
    return titles
