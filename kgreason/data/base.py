"""ExampleSet: a named, sized, iterable list of examples with seeded sampling and a limit.

The sample is drawn with its own seed, ``dataset.sample_seed`` (0 by default in every
``conf/dataset/*.yaml``), never with the run's ``seed``: a seed sweep then answers the same
questions in every job and varies only the method (docs/data.md, "Sampling")."""

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

    ``sample=N`` draws N examples without replacement with ``sample_seed`` (the 1,000-question
    protocol of HippoRAG/SubQRAG is ``sample=1000``), kept in file order; ``limit=N`` then keeps
    the first N. Duplicate ids are rejected, since resume relies on them.
    """

    def __init__(self, name: str, examples: Sequence[Example], *, sample: int | None = None,
                 limit: int | None = None, sample_seed: int = 0, origins: Sequence[str] | None = None,
                 id_field: str | Sequence[str] = "id") -> None:
        """``origins``: where each example was read (``file:line`` or ``file: record i``) and
        ``id_field``: the record field its id came from (one name, or one per example); both
        only serve the duplicate-id message."""
        items = list(examples)
        seen: dict[str, int] = {}
        for j, ex in enumerate(items):
            if ex.id in seen:
                i = seen[ex.id]
                field = id_field if isinstance(id_field, str) else id_field[j]
                if origins is not None:
                    first, here = origins[i], origins[j]
                    # "<file>:<line>" / "<file>: record <i>": name the first one's line or record
                    first_at = first.rsplit(":", 1)[-1].strip()
                    first_at = f"line {first_at}" if first_at.isdigit() else first_at
                else:
                    here, first_at = f"dataset {name!r}: example {j}", f"example {i}"
                raise DataError(f"{here}: field {field!r}: duplicate example id {ex.id!r} (first at {first_at}); "
                                "example ids must be unique (resume keys rows by id)")
            seen[ex.id] = j
        if sample is not None and sample < len(items):
            idx = np.sort(np.random.default_rng(int(sample_seed)).choice(len(items), size=sample, replace=False))
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
                 seed: int = 0, skip: int = 0) -> ExampleSet:
    """Keep one named split of ``ds``'s questions, in file order (in place; returns ``ds``):

    * ``dev``: the first ``dev_size`` questions: the only ones prompts and settings are chosen on;
    * ``heldout``: ``n`` questions drawn with ``seed`` from the rest (all of them when ``n`` is
      None). The draw is a seeded permutation cut at ``n``, so a larger ``n`` keeps every
      question of a smaller one: a held-out row can grow over several sittings. ``skip``
      starts the cut ``skip`` places into the permutation: a fresh draw disjoint from the
      earlier draw of ``skip`` questions (with the same seed), for re-measuring a row whose
      first draw was looked at;
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
        start = min(int(skip), len(rest))
        chosen = sorted(order[start: len(rest) if n is None else min(start + int(n), len(rest))].tolist())
        keep = [rest[i] for i in chosen]
    ds.examples = keep
    ds.split = split
    return ds
