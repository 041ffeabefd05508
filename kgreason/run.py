"""Old path of :mod:`kgreason.runner.run` (the run loop was ``kgreason/run.py`` until issue 71),
kept for scripts and notebooks that do ``from kgreason.run import run`` or ``build``. New code
imports :mod:`kgreason.runner.run`; a test patches that module, not this re-export."""

from kgreason.runner.run import (Components, LLMUnavailable, RunFailed, RunInterrupted, RunResult,  # noqa: F401
                                 answer_and_score, build, run, summarise)
