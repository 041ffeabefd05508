"""k-hop graph retrieval (LogosKG engines and baselines) and dense text retrieval.

* ``base``: protocols, semantics/direction enums and the shared hop loop.
* ``scipy_engine``, ``numba_engine``, ``torch_engine``: LogosKG backends.
* ``networkx_engine``, ``igraph_engine``: graph-library baselines (NetworkX is the test reference).
* ``partitioned``: LogosKG-Large (degree-aware partitions on disk + LRU cache).
* ``dense``: all-MiniLM-L6-v2 text retrieval.

Engines with heavy imports (torch, numba, igraph) are imported lazily by their modules.
"""

from kgreason.retrieval.base import Direction, GraphRetriever, Hit, Semantics, TextRetriever

__all__ = ["Direction", "GraphRetriever", "Hit", "Semantics", "TextRetriever"]
