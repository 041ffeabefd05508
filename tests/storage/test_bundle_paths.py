"""A bundle names no path of the machine that made it (kgreason/storage/bundle.py ``portable``)."""

from __future__ import annotations


def test_a_bundle_spells_every_kgreason_directory_variable_not_its_value(tmp_path, monkeypatch):
    """A run records its resolved config, which holds the directories the environment named
    (``KGREASON_EMBED_STORE_DIR`` for the embedding stores, ``KGREASON_CACHE_DIR``,
    ``KGREASON_MODEL_DIR``, ``KGREASON_OUTPUT``). A bundle writes them as the variable, never as
    this machine's path (a held-out row made with the store dir set named it)."""
    from kgreason.storage.bundle import portable

    stores, cache = tmp_path / "srv" / "stores", tmp_path / "srv" / "cache"
    monkeypatch.setenv("KGREASON_EMBED_STORE_DIR", str(stores))
    monkeypatch.setenv("KGREASON_CACHE_DIR", str(cache) + "/")
    got = portable({"embedder": {"store_dir": str(stores), "cache_dir": f"{cache}/embeddings"}})
    assert got == {"embedder": {"store_dir": "$KGREASON_EMBED_STORE_DIR",
                                "cache_dir": "$KGREASON_CACHE_DIR/embeddings"}}
