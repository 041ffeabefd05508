"""Everything kgreason writes to a cache or an archive, in one place: content-addressed artifacts on
disk, their locking and their integrity checks.

* :mod:`kgreason.storage.callstore` – the key → JSON store of LLM and SPARQL calls: a directory
  of append-only, checksummed shards, one per writing process, safe on a shared filesystem;
  ``kgreason cache stats|merge DIR``.
* :mod:`kgreason.storage.bundle` – run bundles: one self-checking archive of what a table needs
  (configs, predictions, metrics, every model call a run made), ``kgreason bundle``.

* :mod:`kgreason.storage.llm_cache` – the LLM call cache on top of the call store:
  :class:`~kgreason.storage.llm_cache.CachedLLM`, its keys, and a run's ``calls.jsonl``.
* :mod:`kgreason.storage.embedstore` – the KG embedding stores.
"""
