"""Everything kgreason writes to a cache or an archive, in one place: content-addressed artifacts on
disk, their locking and their integrity checks.

The generic stores live here:

* :mod:`kgreason.storage.callstore` – the key → JSON store of LLM and SPARQL calls: a directory
  of append-only, checksummed shards, one per writing process, safe on a shared filesystem;
  ``kgreason cache stats|merge DIR`` (:mod:`kgreason.storage.cache_command`).
* :mod:`kgreason.storage.llm_calls` – the LLM call store on top of the call store: ``CallStore``
  (``<llm_cache.dir>/llm_calls/``) and the reader of a run's ``calls.jsonl``. The LLM wrapper
  that fills it (``CachedLLM``, its keys, the call log's writer) is :mod:`kgreason.llm.cache`, on
  the LLM floor (docs/architecture.md): it reads the metering in ``kgreason.llm.accounting``.
* :mod:`kgreason.storage.embedstore` – the KG embedding stores, and the helpers every builder of a
  cached directory uses: ``store_lock`` (one builder per machine, the others wait and read what it
  wrote), ``clean_stale_tmp`` (temporary dirs a killed build left), ``reserved_npy`` and
  ``StoreNoSpace`` (a full disk is one line, never SIGBUS).
* :mod:`kgreason.storage.textcache` – the embedder's text → vector cache.
* :mod:`kgreason.storage.bundle` – run bundles: one self-checking archive of what a table needs
  (configs, predictions, metrics, every model call a run made), ``kgreason bundle``
  (:mod:`kgreason.runner.replay` re-scores and replays them).

Every file kgreason writes to a cache, with who writes it and how it is locked and checked.
``<cache>`` is ``paths.cache`` (``$KGREASON_CACHE_DIR``, default ``.cache/kgreason`` in a clone),
``<models>`` is ``$KGREASON_MODEL_DIR`` (default ``~/.cache/kgreason/models``):

* ``<cache>/llm_calls/<host>-<pid>-<random>.jsonl`` – LLM replies (``llm_cache.dir``).
  Opened by :mod:`kgreason.llm.lazy`, written by :mod:`kgreason.llm.cache` through
  :mod:`kgreason.storage.llm_calls` and :mod:`kgreason.storage.callstore`. No lock: each process appends to its own shard. Each line
  carries the SHA-256 of its record; a torn or damaged line is skipped (with a warning), never
  used. ``kgreason cache merge`` takes an exclusive ``flock`` on ``llm_calls/.merge.lock``, sets
  shards aside as ``merging-<token>-<n>.jsonl`` (still read as shards), writes
  ``.merged-*.jsonl.tmp``, syncs and renames it to ``merged-*.jsonl``, then removes the set-aside
  shards; a killed merge's ``.tmp`` is removed by the next merge. An older ``<cache>/llm_calls.sqlite`` is migrated once into ``legacy-sqlite.jsonl``
  (written to a temporary name, then renamed).
* ``<run dir>/calls.jsonl`` – the cache keys one run served or stored (``CallLog`` in
  :mod:`kgreason.llm.cache`, read by ``read_call_log`` in :mod:`kgreason.storage.llm_calls`; a thread lock, one line per key; damaged lines are skipped
  when read). Not a cache, but what ``kgreason bundle export`` packs from the call store.
* ``<cache>/sparql/sparql_calls/`` – SPARQL responses (``kg.cache_dir``), written by
  :mod:`kgreason.kg.sparql` into a :mod:`kgreason.storage.callstore` store: as above.
* ``<cache>/embeddings/kg/<key>/`` (``vectors.npy`` + ``meta.json``) – KG embedding stores
  (``embedder.store_dir``, default ``embedder.cache_dir``), :mod:`kgreason.storage.embedstore`.
  ``store_lock`` on ``<key>.lock``; built in a temporary dir renamed into place; ``meta.json``
  keeps the SHA-256 of ``vectors.npy``, checked on open (a mismatch is rebuilt).
* ``<cache>/embeddings/texts-<model key>.sqlite`` – vectors of texts that are not a KG's
  (``embedder.cache_dir``), :mod:`kgreason.storage.textcache` via :mod:`kgreason.embed`.
  SQLite's locking (WAL, busy wait); no checksum beyond SQLite's own.
* ``<cache>/kg/<loader>-<key>/`` – compiled KGs (``kg.cache_dir``), :mod:`kgreason.kg.compiled`:
  the key is the SHA-256 of the source files, the loader and its arguments; ``store_lock`` on
  ``<loader>-<key>.lock``; compiled into ``<...>.tmp.<pid>/`` and renamed; ``vocab.json`` marks a
  complete copy.
* ``<cache>/cypher/kuzu/<kg.name>-<hash12>/`` – Kùzu graph DBs (``graphdb.cache_dir``),
  :mod:`kgreason.kg.cypher`: keyed by the KG's content hash; an exclusive ``flock`` on
  ``.export.lock`` around an export; each export is a new ``v-*`` dir made current by an atomic
  symlink swap; ``export.json`` keeps the hash it was exported from.
* ``<cache>/subqrag_index/<corpus hash>/`` – SubQRAG's offline index (``reasoner.index_dir``),
  :mod:`kgreason.reasoners.subqrag_index`: the hash covers passages, model, prompt and parser
  version; ``store_lock`` on ``index.lock``; ``extractions.jsonl`` is append-only and its torn
  tail is repaired on open.
* ``<models>/<file>.gguf`` (+ ``<file>.gguf.sha256``) – named local models assembled from their
  PyPI parts, :mod:`kgreason.llm.models`: written to a temporary name and renamed only when the
  pinned size and SHA-256 match; the stamp lets a later load skip re-hashing. No lock (two
  processes assembling at once write the same bytes).
* ``<models>/<gguf stem>-<size>/`` – the dequantised transformers copy of a GGUF,
  :mod:`kgreason.llm.local`: saved into ``<...>.tmp<pid>`` and renamed (the first process to
  finish wins); keyed by file name and size only, no checksum.
* ``<retriever.directory>/by_head|by_tail/`` – LogosKG-Large partitions,
  :mod:`kgreason.retrieval.partitioned` (a fresh temporary dir unless ``directory`` is set):
  ``store_lock`` on ``<layout>.lock``; each layout built into ``<layout>.tmp.<pid>/`` and renamed;
  ``meta.json`` (written last) keeps the SHA-256 of the KG's id arrays, and a directory built for
  another KG, or before that digest, is refused in one line.
* a synthetic compiled KG (``kgreason bench scale``), :mod:`kgreason.kg.synthetic`: into the dir
  it is given; ``vocab.json`` written last marks it complete; no lock.

Written elsewhere and not caches (listed so nobody looks for them here): a run dir's files and its
``run.lock`` (:mod:`kgreason.runs`); the pages and tables of ``show``, ``tables`` and ``report``
(:mod:`kgreason.textio`'s ``write_text_file``: a temporary sibling renamed into place, so a full
disk leaves no empty page); downloaded data and its ``.lock`` (:mod:`kgreason.data.fetch`,
pins in :mod:`kgreason.data.catalog`); benchmark scratch in temporary dirs
(:mod:`kgreason.bench.rank`, :mod:`kgreason.bench.callstore`).
"""
