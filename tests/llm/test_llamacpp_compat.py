"""llama.cpp on AMX CPUs (kgreason/llm/llamacpp_compat.py): the repacked weights crashed the first
multi-token decode with SIGSEGV on this project's VMs, so the extra buffer types are off there."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from kgreason.llm import llamacpp_compat as compat

SPR = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
EPYC = "processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 fma\n"


def test_the_extra_buffer_types_are_off_on_amx_cpus_unless_the_variable_says_otherwise():
    assert compat.cpu_flags(SPR) >= {"amx_int8", "amx_tile"}
    assert compat.extra_bufts_wanted(compat.cpu_flags(SPR), env="") is False
    assert compat.extra_bufts_wanted(compat.cpu_flags(EPYC), env="") is True
    assert compat.extra_bufts_wanted(compat.cpu_flags(SPR), env="1") is True
    assert compat.extra_bufts_wanted(compat.cpu_flags(EPYC), env="0") is False
    assert compat.cpu_flags("no flags here") == set()


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
def test_the_llamacpp_route_answers_a_chat_prompt_on_this_cpu():
    # in a child process: on an AMX CPU without the work-around the decode kills the process
    code = (
        "from kgreason.llm.local import LlamaCppChat, find_gguf\n"
        "from kgreason.types import ChatRequest\n"
        "m = LlamaCppChat(find_gguf(), n_ctx=512, n_threads=1)\n"
        "print(m.llm.model_params.use_extra_bufts)\n"
        "(c,) = m.generate([ChatRequest.of('Count: 1, 2, 3, 4,', max_tokens=6)])\n"
        "print(repr(c.text))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr[-2000:]}"
    extra, text = p.stdout.strip().splitlines()[-2:]
    assert extra == str(compat.extra_bufts_wanted())
    assert text.strip("'\"")
