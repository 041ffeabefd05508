"""The validation runner (issue 21; a package since issue 71): the table of every method on the
same held-out questions, with the model replies of each row committed as a bundle that anyone can
replay, and each row's currency decided by replaying it on today's code.

Its parts, each a module named for what it does:

* :mod:`~validation_runner.rows`: the rows (dataset, reasoner, overrides) and each row's command;
* :mod:`~validation_runner.sitting`: one sitting of a row: its run, and its JSON entry from what it left;
* :mod:`~validation_runner.collect`: a row from its run dir (metrics, intervals, paired differences);
* :mod:`~validation_runner.bundles`: each row's committed bundle (export, restore, the check that it gives the row);
* :mod:`~validation_runner.currency`: whether a row still describes today's code (its bundle replayed);
* :mod:`~validation_runner.stamp`: which code a row measured (git blob ids of its method's files);
* :mod:`~validation_runner.docs`: the generated tables of README.md and docs/validation.md, the figure;
* :mod:`~validation_runner.cli`: the command line (``experiments/validation/run_validation.py``, the entry point);
* :mod:`~validation_runner.tablefile`: every write to a JSON table (re-read and replaced under a lock);
* :mod:`~validation_runner.places`: where the tables, bundles and call cache are.

The command (``DOC``, its ``--help``):
    The validation table of issue 21: every method on the same N shared-sample questions with
    Qwen2.5-Coder-1.5B-Instruct (``llm=qwen_coder_1_5b``), one row per (dataset, reasoner).

        export KGREASON_DATA=../shared/data      # the shared samples (the default in a clone)
        python experiments/validation/run_validation.py --n 3 --rows metaqa_io,metaqa_rag         # dev split
        python experiments/validation/run_validation.py --split heldout --n 100 --route llamacpp --rows metaqa_io
        python experiments/validation/run_validation.py --n 20          # every row, dev split
        python experiments/validation/run_validation.py --print                                        # the commands only

    Each row is one ``python -m kgreason`` run (printed, and stored in the JSON as ``command``) with
    ``dataset.limit=N``, so every row of a dataset sees the same first N questions of the shared
    sample. Run dirs are ``outputs/validation/n<N>/<row>`` (resumable: a killed row restarts where it
    stopped) and every LLM call goes through one call cache (``--cache``, default
    ``~/.cache/kgreason/validation``), so re-running a finished row costs no model call; the table can
    be built over several sittings. The row's ``wall_s`` is the run's own ``timing.json`` wall time
    (model load included) of the sitting that made the model calls; a later sitting that only
    replayed the cache (``backend_calls`` 0, ``replayed_from_cache``) keeps that figure. A row
    stopped by hand (Ctrl-C, or ``kill`` of its ``python -m kgreason`` process) writes its partial
    metrics and is committed with ``partial: true`` and its own N, as ``--collect`` would.

    Results are merged into ``experiments/validation/validation_n<N>.json`` (one entry per row: the
    command, N, the dataset's metrics, unparseable replies, LLM calls per question, wall time).
"""

from __future__ import annotations

DOC = (__doc__ or "").split("The command (``DOC``, its ``--help``):", 1)[-1]
DOC = "\n".join(line[4:] if line.startswith("    ") else line for line in DOC.strip("\n").splitlines())

from validation_runner import places  # noqa: E402
from validation_runner.bundles import *  # noqa: E402,F401,F403
from validation_runner.collect import *  # noqa: E402,F401,F403
from validation_runner.currency import *  # noqa: E402,F401,F403
from validation_runner.docs import *  # noqa: E402,F401,F403
from validation_runner.rows import *  # noqa: E402,F401,F403
from validation_runner.sitting import *  # noqa: E402,F401,F403
from validation_runner.stamp import *  # noqa: E402,F401,F403
from validation_runner.cli import main  # noqa: E402,F401
