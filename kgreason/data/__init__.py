"""Datasets: every loader returns an :class:`ExampleSet` of :class:`~kgreason.types.Example`."""

from kgreason.data.base import DataError, Dataset, ExampleSet
from kgreason.data.clinical import load_probsum
from kgreason.data.ddxplus import load_ddxplus
from kgreason.data.embedded import load_embedded
from kgreason.data.kgqa import load_cwq, load_grailqa, load_webqsp, read_records
from kgreason.data.metaqa import load_metaqa
from kgreason.data.multihop import load_hotpotqa, load_musique, load_twowiki, read_corpus

__all__ = [
    "DataError", "Dataset", "ExampleSet", "load_embedded", "load_cwq", "load_webqsp", "load_grailqa",
    "load_hotpotqa", "load_musique", "load_twowiki", "load_probsum", "load_ddxplus", "load_metaqa",
    "read_records", "read_corpus",
]
