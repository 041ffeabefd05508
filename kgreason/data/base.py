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
