"""Benchmarks. ``python -m kgreason.bench``: k-hop retrieval (LogosKG Tables 2–4), see
:mod:`kgreason.bench.retrieval` and docs/retrieval.md."""
