"""Work-arounds for llama.cpp (``llama-cpp-python``) on the CPUs kgreason runs on.

**AMX weight repacking.** A llama.cpp built on a CPU with Intel AMX (Sapphire Rapids and later:
``amx_int8``/``amx_tile`` in ``/proc/cpuinfo``) moves the quantised weights into its AMX "extra
buffer type" at load time. On the 2-core VMs this project is developed and tested on
(llama-cpp-python 0.3.36 compiled there), the first decode of more than one token then dies
with SIGSEGV: a one-token prompt runs, any chat prompt crashes the process. Loading with
``use_extra_bufts = false`` keeps the weights in plain CPU buffers and runs (the same GGUF, the
same kernels llama.cpp uses on CPUs without AMX).

:func:`apply` turns the extra buffer types off on such CPUs before a model is loaded, in process
(the ``llm.route=llamacpp`` backend) and in the server ``kgreason serve`` starts.
``KGREASON_LLAMACPP_EXTRA_BUFTS=1`` keeps them on (a build where AMX works), ``=0`` turns them off
on any CPU.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("kgreason.llm")

ENV = "KGREASON_LLAMACPP_EXTRA_BUFTS"


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags (the first ``flags`` line of ``/proc/cpuinfo``); empty elsewhere."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[-1].split())
    return set()


def extra_bufts_wanted(flags: set[str] | None = None, env: str | None = None) -> bool:
    """Whether llama.cpp may use its extra buffer types: the variable when set, else not on AMX CPUs."""
    env = os.environ.get(ENV) if env is None else env
    if env in ("0", "1"):
        return env == "1"
    flags = cpu_flags() if flags is None else flags
    return not ({"amx_int8", "amx_tile"} & flags)


_applied = False


def apply() -> bool:
    """Make every later ``llama_cpp.Llama(...)`` load without extra buffer types when they are not
    wanted (:func:`extra_bufts_wanted`). Idempotent; returns whether they are off."""
    global _applied
    if extra_bufts_wanted():
        return False
    if _applied:
        return True
    from llama_cpp import llama_cpp as lib

    default = lib.llama_model_default_params

    def params():
        p = default()
        if hasattr(p, "use_extra_bufts"):
            p.use_extra_bufts = False
        return p

    lib.llama_model_default_params = params
    _applied = True
    log.info("llama.cpp: extra buffer types (AMX weight repacking) off on this CPU (%s=1 turns them on)", ENV)
    return True
