"""ExampleSet: a named, sized, iterable list of examples with seeded sampling and a limit."""

from __future__ import annotations

from typing import Iterator, Protocol, Sequence

import numpy as np

from kgreason.types import Example


class Dataset(Protocol):
    name: str

    def __iter__(self) -> Iterator[Example]: ...

    def __len__(self) -> int: ...


class DataError(ValueError):
    """Malformed dataset file; the message names the file, the record and what was expected."""


class ExampleSet:
    """Examples in a fixed order.

    ``sample=N`` draws N examples without replacement with ``seed`` (the 1,000-question protocol
    of HippoRAG/SubQRAG is ``sample=1000``); ``limit=N`` then keeps the first N. Duplicate ids
    are rejected, since resume relies on them.
    """

    def __init__(self, name: str, examples: Sequence[Example], *, sample: int | None = None,
                 limit: int | None = None, seed: int = 0) -> None:
        items = list(examples)
        seen: set[str] = set()
        for ex in items:
            if ex.id in seen:
                raise DataError(f"dataset {name!r}: duplicate example id {ex.id!r}")
            seen.add(ex.id)
        if sample is not None and sample < len(items):
            idx = np.sort(np.random.default_rng(seed).choice(len(items), size=sample, replace=False))
            items = [items[i] for i in idx]
        if limit is not None:
            items = items[: int(limit)]
        self.name = name
        self.examples = items

    def __iter__(self) -> Iterator[Example]:
        return iter(self.examples)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Example:
        return self.examples[i]

    def __repr__(self) -> str:
        return f"ExampleSet({self.name!r}, n={len(self)})"


#: named question splits of a dataset file (``questions.split``; docs/validation.md)
SPLITS = ("all", "dev", "heldout")


def select_split(ds: ExampleSet, split: str = "all", dev_size: int = 20, n: int | None = None,
                 seed: int = 0) -> ExampleSet:
    """Keep one named split of ``ds``'s questions, in file order (in place; returns ``ds``):

    * ``dev``: the first ``dev_size`` questions: the only ones prompts and settings are chosen on;
    * ``heldout``: ``n`` questions drawn with ``seed`` from the rest (all of them when ``n`` is
      None). The draw is a seeded permutation cut at ``n``, so a larger ``n`` keeps every
      question of a smaller one: a held-out row can grow over several sittings;
    * ``all``: every question (no split).
    """
    if split not in SPLITS:
        raise ValueError(f"questions.split={split!r}: expected one of {', '.join(SPLITS)}")
    if split == "all":
        return ds
    items = list(ds.examples)
    if split == "dev":
        keep = items[: int(dev_size)]
    else:
        rest = items[int(dev_size):]
        order = np.random.default_rng(int(seed)).permutation(len(rest))
        chosen = sorted(order[: len(rest) if n is None else min(int(n), len(rest))].tolist())
        keep = [rest[i] for i in chosen]
    ds.examples = keep
    ds.split = split
    return ds
