"""Shared fixtures and marker plumbing.

* ``--slow`` runs tests marked ``slow`` (the README/CI test command passes it);
  ``--network`` runs tests marked ``network``; ``gpu`` tests skip without CUDA.
* ``--model`` runs tests marked ``model`` (the real Qwen2.5-Coder-1.5B: an hour and more on 2 cores).
  They are opt-in, never implied by ``--slow``: a machine that holds the weights (``make qwen``) must
  not turn the README's test command into a run of hours.
* Every test gets its own cache and W&B dirs (no shared state between tests).
* ``shared_data`` is ``$KGREASON_DATA`` or ``<repo>/../shared/data``; tests that need it skip
  cleanly when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False, help="run slow tests")
    parser.addoption("--network", action="store_true", default=False, help="run tests that need the network")
    parser.addoption("--model", action="store_true", default=False,
                     help="run tests that load the real Qwen2.5-Coder-1.5B (hours on a 2-core CPU; needs make qwen)")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """CI's log lists every bundled held-out row the validation tests replayed (issue 71): its
    verdict, how it was replayed and the time it took (tests/test_validation_bundles.py)."""
    rows = getattr(config, "validation_replays", None)
    if not rows:
        return
    terminalreporter.section("validation rows replayed on this code (kgreason bundle replay, recorded rankings)")
    for table, row, status, line, seconds in rows:
        took = f"{seconds:.1f} s" if seconds is not None else "not replayed"
        terminalreporter.write_line(f"{table.removeprefix('validation_')}/{row}: {status} ({took}): {line}")
    spent = sum(s for *_, s in rows if s is not None)
    terminalreporter.write_line(f"{sum(1 for r in rows if r[2] == 'identical')} of {len(rows)} rows replayed identical "
                                f"in {spent:.0f} s")


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    skip_slow = pytest.mark.skip(reason="slow: pass --slow")
    skip_net = pytest.mark.skip(reason="network: pass --network")
    skip_gpu = pytest.mark.skip(reason="gpu: no CUDA device")
    skip_model = pytest.mark.skip(reason="model: pass --model (loads the real Qwen; hours on 2 cores)")
    has_gpu = None
    for item in items:
        if "slow" in item.keywords and not config.getoption("--slow"):
            item.add_marker(skip_slow)
        if "network" in item.keywords and not config.getoption("--network"):
            item.add_marker(skip_net)
        if "model" in item.keywords and not config.getoption("--model"):
            item.add_marker(skip_model)
        if "gpu" in item.keywords:
            if has_gpu is None:
                has_gpu = _cuda()
            if not has_gpu:
                item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def _embed_store_dir(tmp_path_factory):
    """One KG embedding store directory for the session: stores are keyed by their content
    (kgreason/storage/embedstore.py), so sharing them is what a machine does, and a KG is embedded once."""
    return tmp_path_factory.mktemp("embed_stores")


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path, monkeypatch, _embed_store_dir):
    monkeypatch.setenv("KGREASON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGREASON_EMBED_STORE_DIR", str(_embed_store_dir))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    p = Path(os.environ.get("KGREASON_DATA", REPO.parent / "shared" / "data"))
    if not p.is_dir():
        pytest.skip(f"shared data not found at {p} (set KGREASON_DATA)")
    return p


@pytest.fixture(scope="session")
def world():
    from kgreason.kg.embedded import make_world

    return make_world(0)


@pytest.fixture(scope="session")
def embedded_kg(world):
    return world.kg


@pytest.fixture
def tiny_kg():
    """Six entities, two relations::

        A --r--> B --s--> D --r--> F
        |        ^
        +--s---> C        E (isolated)
    """
    from kgreason.kg.store import KG

    return KG.from_triples(
        [("A", "r", "B"), ("A", "s", "C"), ("C", "r", "B"), ("B", "s", "D"), ("D", "r", "F")],
        extra_entities=["E"], name="tiny",
    )


def compose_cfg(overrides: list[str], out_dir: Path):
    """Compose the real conf/ with overrides (lightning-hydra-template's pattern)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import kgreason  # noqa: F401 - registers the ${kgreason.path:...} resolver conf/paths uses

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        return compose(config_name="config", overrides=list(overrides) + [f"hydra.run.dir={out_dir}"])


@pytest.fixture(scope="session")
def virtuoso_freebase(shared_data, tmp_path_factory):
    """A private Virtuoso 7 on loopback (own database directory, free ports) holding the FB15k-237
    slice converted to N-Triples in the Freebase namespace; yields ``{"url", "server", "nt"}`` and
    shuts the server down at the end of the session. Skips without ``virtuoso-t`` or shared data."""
    from kgreason.kg.sparql_local import VirtuosoServer, virtuoso_available

    if not virtuoso_available():
        pytest.skip("virtuoso-t not installed (apt-get install -y virtuoso-opensource; `make test` does it as root)")
    src = shared_data / "freebase_fb15k237"
    if not (src / "train.txt.gz").exists():
        pytest.skip(f"FB15k-237 slice not found under {src}")
    from kgreason.kg.sparql import fb15k237_to_ntriples

    d = tmp_path_factory.mktemp("virtuoso")
    nt = d / "load" / "fb15k237.nt.gz"
    fb15k237_to_ntriples([str(src / f"{s}.txt.gz") for s in ("train", "valid", "test")], nt,
                         names=str(src / "entity2text.txt"), aliases=str(src / "FB15k_mid2name.txt"))
    with VirtuosoServer(d / "db", [nt]) as server:
        yield {"url": server.url, "server": server, "nt": nt}


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """The embedded SmolLM2 GGUF behind llama-cpp-python's OpenAI-compatible server on 127.0.0.1
    (``kgreason.llm.serve.LlamaServer``: two slots of one thread each behind its proxy, free
    ports), up once per session; every process it started is stopped at the end, also when a
    test fails. Skips where ``llama_cpp.server`` cannot be imported (``make test`` installs it)."""
    from kgreason.llm.serve import LlamaServer, llama_server_available

    why = llama_server_available()
    if why:
        pytest.skip(why)
    from kgreason.llm.local import find_gguf

    try:
        gguf = find_gguf()
    except (ImportError, FileNotFoundError) as e:
        pytest.skip(str(e))
    with LlamaServer(gguf, "smollm2-135m-instruct", parallel=2, threads=1, n_ctx=4096,
                     log_dir=tmp_path_factory.mktemp("llama-server")) as srv:
        yield srv
