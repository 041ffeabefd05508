"""A bundle publishes nothing secret (issue 73 M5): a reply that quotes the run's API key went into
``calls/llm_calls.jsonl``, and a password in ``llm.base_url`` (``http://user:pass@host/v1``) into
``manifest.json``, ``run.json`` and ``config.yaml``. Checked as a user would: a real run against a
local OpenAI-compatible server whose replies quote the key it was sent, exported with the key in
the environment, every member of the bundle read back."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from kgreason.bench.llm import FakeChatServer

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-kgr-test-0123456789abcdef"
PASSWORD = "hunter2-s3cret"


def _kg(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KGR_TEST_KEY": KEY, "KGREASON_CACHE_DIR": str(tmp / "kgcache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "kgreason", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_bundle_holds_neither_the_key_a_reply_quotes_nor_the_base_urls_password(tmp_path):
    """About 15 s: one run of two questions, an export, a verify and a replay."""
    with FakeChatServer(reply=lambda body: f"Paris (sent with {KEY})") as srv:
        url = srv.base_url.replace("http://", f"http://alice:{PASSWORD}@")
        run = ["reasoner=io", "llm=openai", f"llm.base_url={url}", "llm.model=m", "llm.api_key_env=KGR_TEST_KEY",
               "dataset.limit=2", "tracking=none", f"llm_cache.dir={tmp_path / 'cache'}"]
        r = _kg(tmp_path, *run, f"hydra.run.dir={tmp_path / 'run'}")
        assert r.returncode == 0, r.stderr[-3000:]
        cached = b"".join(p.read_bytes() for p in (tmp_path / "cache").rglob("*.jsonl"))
        assert KEY.encode() in cached  # the reply as the server sent it is what the cache keeps
        r = _kg(tmp_path, "bundle", "export", str(tmp_path / "run"), "-o", str(tmp_path / "b.tar.gz"))
        assert r.returncode == 0, r.stderr[-3000:]
        assert "2 replies quoted a secret of the runs: redacted" in r.stdout, r.stdout
        raw = gzip.decompress((tmp_path / "b.tar.gz").read_bytes())
        assert KEY.encode() not in raw and PASSWORD.encode() not in raw
        with tarfile.open(tmp_path / "b.tar.gz") as t:
            members = {m.name: t.extractfile(m).read() for m in t}
        assert {"manifest.json", "runs/run/run.json", "runs/run/config.yaml", "calls/llm_calls.jsonl"} <= set(members)
        for name, data in members.items():  # grep every member
            assert KEY.encode() not in data and PASSWORD.encode() not in data, name
        assert b"alice:" not in members["runs/run/config.yaml"] and b"127.0.0.1" in members["runs/run/config.yaml"]
        r = _kg(tmp_path, "bundle", "verify", str(tmp_path / "b.tar.gz"))
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
        # the replay reads the redacted replies, as the run's own rows (scrubbed when written) read
        r = _kg(tmp_path, "bundle", "replay", str(tmp_path / "b.tar.gz"), "--out", str(tmp_path / "replayed"))
        assert r.returncode == 0 and "run: identical" in r.stdout.splitlines(), (r.stdout[-2000:], r.stderr[-2000:])
        assert not srv.requests[4:], "the replay called the model"
