"""The run loop and what launches, checks and replays a run (docs/architecture.md, floor 7).

* :mod:`kgreason.runner.run` – the wiring: ``build(cfg)`` (owns and closes every shared
  resource), ``run(cfg, out_dir)``, ``answer_and_score``, ``summarise``.
* :mod:`kgreason.runner.compose` – composition rules (ablations, presets, sweep axes) and the
  whole-sweep check before the first job (Hydra callback ``SweepCheck``).
* :mod:`kgreason.runner.callbacks` – Hydra callbacks of a launch (``GoOn``, ``SweepCallbacks``,
  ``KeepHydraRecord``).
* :mod:`kgreason.runner.sweepguard` – the sweep dir and job-name checks (``SweepPathGuard``).
* :mod:`kgreason.runner.overrides` – command-line override checks (a mistyped key named in one line).
* :mod:`kgreason.runner.replay` – ``kgreason bundle``: re-score and replay a bundled run.

What lower floors need from a run stays on its own floor, outside this package: the run dir's
files (:mod:`kgreason.runs`) and the run record (:mod:`kgreason.record`) on the ground floor,
the start-up checks (:mod:`kgreason.preflight`) beside the reasoners that raise its
``PreflightError``. Nothing is imported here, so importing one module of the package loads no other.
"""
