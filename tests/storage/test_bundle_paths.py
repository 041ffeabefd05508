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


def test_a_directory_the_run_read_from_the_environment_is_spelled_as_its_variable_when_the_exporting_shell_lacks_it(
        tmp_path, monkeypatch):
    """A run made with ``KGREASON_EMBED_STORE_DIR`` set and exported from a shell without it: the
    run's own config (``config.yaml``, unresolved: ``${oc.env:KGREASON_EMBED_STORE_DIR,null}``) says
    where the resolved value came from, so the bundle still spells the variable, not this machine's
    path (a held-out row bundled from another shell named /srv/... before)."""
    import json

    import yaml

    from kgreason.storage.bundle import portable, run_roots

    monkeypatch.delenv("KGREASON_EMBED_STORE_DIR", raising=False)
    monkeypatch.delenv("KGREASON_CACHE_DIR", raising=False)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({
        "embedder": {"store_dir": "${oc.env:KGREASON_EMBED_STORE_DIR,null}", "name": "minilm"},
        "llm_cache": {"dir": "${oc.env:KGREASON_CACHE_DIR,~/.cache}/llm"},
        "paths": {"other": "${oc.env:HOME}/x"}}))
    (run / "run.json").write_text(json.dumps({"config": {
        "embedder": {"store_dir": "/srv/elsewhere/stores", "name": "minilm"},
        "llm_cache": {"dir": "/srv/c/llm"}, "paths": {"other": "/srv/h/x"}}}))
    roots = run_roots(run)
    assert ("/srv/elsewhere/stores", "$KGREASON_EMBED_STORE_DIR") in roots
    assert ("/srv/c", "$KGREASON_CACHE_DIR") in roots
    assert not any(p == "/srv/h" for p, _ in roots)  # HOME is not one of the project's directory variables
    got = portable({"embedder": {"store_dir": "/srv/elsewhere/stores/metaqa"}, "d": "/srv/c/llm"}, roots)
    assert got == {"embedder": {"store_dir": "$KGREASON_EMBED_STORE_DIR/metaqa"}, "d": "$KGREASON_CACHE_DIR/llm"}


def test_an_exported_bundle_names_no_store_dir_the_exporting_shell_does_not_know(tmp_path, monkeypatch):
    """The same through ``export``: the bundle's run.json spells the variable."""
    import json
    import tarfile

    import yaml

    from kgreason.storage.bundle import export

    monkeypatch.delenv("KGREASON_EMBED_STORE_DIR", raising=False)
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"embedder": {"store_dir": "${oc.env:KGREASON_EMBED_STORE_DIR,null}"},
                                                     "llm_cache": {"mode": "off"}}))
    (run / "run.json").write_text(json.dumps({"config": {"embedder": {"store_dir": "/srv/elsewhere/stores"},
                                                         "llm_cache": {"mode": "off"}}, "overrides": []}))
    (run / "predictions.jsonl").write_text(json.dumps({"id": "q1", "prediction": ["a"]}) + "\n")
    (run / "metrics.json").write_text(json.dumps({"hits@1": 1.0, "n": 1}))
    out = tmp_path / "b.tar.gz"
    export([run], out, cache_dir=tmp_path / "nocache")
    with tarfile.open(out) as t:
        text = "".join(t.extractfile(m).read().decode() for m in t.getmembers() if m.name.endswith("run.json"))
    assert "/srv/elsewhere" not in text and "$KGREASON_EMBED_STORE_DIR" in text


def test_a_literal_default_the_run_fell_back_to_is_not_spelled_as_the_variable(tmp_path, monkeypatch):
    """``${oc.env:KGREASON_CACHE_DIR,/opt/c}`` resolved to ``/opt/c``: the variable was unset when the
    run ran, so the record does not claim it."""
    import json

    import yaml

    from kgreason.storage.bundle import run_roots

    monkeypatch.delenv("KGREASON_CACHE_DIR", raising=False)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"c": "${oc.env:KGREASON_CACHE_DIR,/opt/c}"}))
    (run / "run.json").write_text(json.dumps({"config": {"c": "/opt/c"}}))
    assert not any(spelled == "$KGREASON_CACHE_DIR" for _, spelled in run_roots(run))
