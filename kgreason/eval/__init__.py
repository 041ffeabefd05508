"""``kgreason.eval``: the evaluation API under the name the issue tracker and some users expect.

The implementation lives in :mod:`kgreason.metrics` (metric table, official-script answer
normalisation, clinical set P/R/F1, retrieval rate, hop distributions); this package re-exports
it so ``from kgreason.eval import METRICS, qa, clinical, hops`` works too.
"""

from kgreason.metrics import METRICS, Metric, clinical, qa, retrieval  # noqa: F401
from kgreason.metrics import hops  # noqa: F401
from kgreason.metrics.hops import hop_distribution  # noqa: F401

__all__ = ["METRICS", "Metric", "clinical", "qa", "retrieval", "hops", "hop_distribution"]
