"""Knowledge graphs: the int32 store, file loaders, the compiled cache and entity linking."""

from kgreason.kg.compiled import cache_key, load_cached
from kgreason.kg.linking import EmbeddingLinker, LinkResult, link_example, link_mentions, link_rates
from kgreason.kg.loaders import (
    KGFormatError,
    load_freebase_slice,
    load_metaqa_kb,
    load_pkg,
    load_primekg,
    load_pykeen,
    load_rog_subgraphs,
    load_triples,
    load_umls_rrf,
)
from kgreason.kg.store import KG, normalise_name

__all__ = [
    "KG", "normalise_name", "KGFormatError", "load_triples", "load_metaqa_kb", "load_pykeen",
    "load_freebase_slice", "load_primekg", "load_umls_rrf", "load_pkg", "load_rog_subgraphs",
    "load_cached", "cache_key", "EmbeddingLinker", "LinkResult", "link_mentions",
    "link_example", "link_rates",
]
