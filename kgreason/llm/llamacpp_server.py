"""``python -m kgreason.llm.llamacpp_server ARGS``: llama-cpp-python's OpenAI-compatible server
(``python -m llama_cpp.server ARGS``, the same arguments) with :mod:`kgreason.llm.llamacpp_compat`
applied first, so a llama.cpp built on an AMX CPU serves instead of crashing on its first request.
``kgreason serve`` and the tests' server fixture start it."""

from __future__ import annotations

import runpy

from kgreason.llm import llamacpp_compat


def main() -> None:
    llamacpp_compat.apply()
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
