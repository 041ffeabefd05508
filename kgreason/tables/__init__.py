"""Paper tables from run / multirun dirs, and the hop-distribution plot.

One module per job: :mod:`~kgreason.tables.collect` (job dirs, ``metrics.json``, ``predictions.jsonl``),
:mod:`~kgreason.tables.cells` (axes, mean ± seed spread, intervals over questions, table hygiene),
:mod:`~kgreason.tables.render` (caption, Markdown, LaTeX, CSV), :mod:`~kgreason.tables.paired`
(``--baseline``), :mod:`~kgreason.tables.paper` (``--paper``), :mod:`~kgreason.tables.build` (from a dir
to the written files), :mod:`~kgreason.tables.plots` (hop chart) and :mod:`~kgreason.tables.cli`.
Every public name is importable from ``kgreason.tables``.

``kgreason tables RUN_OR_MULTIRUN_DIR [--rows reasoner,ablation] [--cols dataset,metric]
[--metrics hits_at_1,f1] [--ci bootstrap|none] [--boot 2000] [--ci-level 0.95]
[--baseline reasoner=io] [--paper [PRESET]] [--funnel] [--out DIR]``

* :func:`collect` walks the dir for Hydra job dirs (those with ``.hydra/hydra.yaml``) and returns
  a tidy DataFrame, one row per (job, metric): ``job, dataset, reasoner, ablation, llm, kg,
  retriever, variant, seed, metric, value``. Group choices and overrides come from the record
  of the launch that wrote the rows (``run.json``; ``.hydra/`` only where it has none: see
  :func:`~kgreason.tables.collect.launch`); ``variant`` is the job's remaining overrides (minus group choices,
  ``seed`` and ``hydra.*``), so ``reasoner.hops=1,2`` sweeps stay apart; ``seed`` from the job's
  config. Job dirs without ``metrics.json`` are returned as *missing* with the reason found in
  ``predictions.jsonl`` / the job log.
* :func:`pivot` averages over seeds only: ``mean``, ``std`` (sample std, 0 for one seed) and
  ``n`` per cell; given the per-example frame (:func:`collect_examples`, from each run's
  ``predictions.jsonl``, the last row per id winning) it adds ``lo``/``hi``/``q``: the
  percentile bootstrap interval of the cell's mean over its ``q`` questions
  (:mod:`kgreason.stats`; with several seeds each question's value is its mean over the seeds,
  so questions, not seeds, are resampled, and the seed spread stays in ``std``). Every group
  choice or override that differs across the sweep is a table axis (:func:`table_axes` adds the
  ones ``--rows``/``--cols`` do not name to the rows); numeric values sort as numbers, metrics in
  the ``--metrics`` order (else ``metrics.json``'s); :func:`caption` says what ``±`` and
  ``[lo, hi]`` are over.
* :func:`render_markdown` / :func:`render_latex` / :func:`render_csv` format
  ``mean ± std [lo, hi]``; metric columns are headed by readable labels (``Hits@1``, ``F1``, ``EM``,
  ``Coverage``: :data:`~kgreason.tables.labels.LABELS`, ``--label KEY=TEXT`` overrides) in the
  order of the runs' ``dataset.metrics`` (headline first); the best of at least two rows of a score
  column is bold by ``METRICS[m].higher_is_better`` (never a size, a cost or a count:
  :func:`~kgreason.tables.render.is_score`). :func:`write_tables` leaves out row axes with one value
  in every row (``ablation = none``) and empty ones, column axes with one value (one ``dataset``),
  and non-score columns constant in every row, each said in the caption; the ``.tex`` is a
  ``table`` float with that caption and ``\label{tab:<name>}``; it warns when the seeds changed nothing.
* :func:`paired_comparisons` (``--baseline AXIS=VALUE``): each row minus its baseline row on the
  same questions, paired-bootstrap interval and p-value, McNemar's exact p for 0/1 metrics;
  rows that answered different questions are refused, naming the mismatch.
* :func:`paper_comparison` (``--paper``): the paper's values (``experiments/<preset>/paper.yaml``)
  beside ours with our interval and the difference, the models labelled.
* :func:`collect_examples` gives the per-example tidy frame (with the KG hop distance from
  ``hops.json``) used by notebooks/analysis.ipynb.
* :func:`gather` reads every job dir once: ``metrics.json`` (non-finite values named and left
  out), its state (partial: ``run/partial``, ``run/status``, ``run/n_examples < run/n_expected`` or
  a ``failed.json`` beside it; failed: ``failed.json``'s reason), and ``predictions.jsonl`` streamed
  into per-question float arrays (:mod:`~kgreason.tables.rows`; torn lines counted and named).
  :func:`build_tables` refuses to average a partial run with complete seeds unless
  ``allow_partial``; each cell says how many errored examples it includes, shows no seed spread
  where nothing was sampled, and is flagged when its runs answered different questions
  (:mod:`~kgreason.tables.marks`); ``retrieval/retrieved_size`` stands beside ``answer_coverage``.
* :func:`build_funnels` / :func:`write_funnels` (``--funnel``, :mod:`~kgreason.tables.funnel`): each
  run's funnel (``funnel/*`` of metrics.json), a row per run and a column per stage in the
  reasoner's order, ``share (count)`` per cell; runs with different stage lists get a table each.
* :func:`plot_hops` draws ``hops.json`` counts as a bar chart (:func:`hops_figure`: a bare matplotlib Figure, no backend forced).
"""

from kgreason.tables.build import Tables, _drop_constant_empty, build_tables, partial_notes, write_tables
from kgreason.tables.cells import (BESIDE, MAX_BOOT, CIOptions, _metric_filter, _metric_key, _ordered, _param_columns,
                                   cell_questions, drop_constant_columns, metric_order, per_question, pivot, prepare,
                                   seeds_change_nothing, table_axes)
from kgreason.tables.cli import boot_count, main
from kgreason.tables.collect import (GROUPS, TIDY_COLUMNS, Collected, Job, Malformed, _failure_reason, _infos,
                                     _load_yaml, collect, collect_examples, gather, job_dirs, job_info)
from kgreason.tables.funnel import FunnelTable, Funnels, build_funnels, render_funnels, write_funnels
from kgreason.tables.labels import LABELS, _header, _label, metric_label, parse_labels
from kgreason.tables.marks import cell_marks, mark_notes, no_interval_notes
from kgreason.tables.paired import paired_comparisons, render_paired
from kgreason.tables.paper import (PAPER_FIELDS, _experiment_of, _job_model, _job_setting, _job_value, _setting_str,
                                   load_paper, paper_comparison, paper_file, paper_presets, render_paper)
from kgreason.tables.plots import hops_figure, plot_hops
from kgreason.tables.render import (_best_mask, _cells, _fmt, _tex_escape, caption, is_score, render_csv, render_latex,
                                    render_markdown, render_missing, tex_label)
from kgreason.tables.rows import RunRows, read_rows

__all__ = ["BESIDE", "CIOptions", "Collected", "FunnelTable", "Funnels", "build_funnels", "render_funnels",
           "write_funnels", "GROUPS", "Job", "LABELS", "is_score", "metric_label", "parse_labels",
           "tex_label", "MAX_BOOT", "Malformed", "PAPER_FIELDS", "RunRows",
           "TIDY_COLUMNS", "Tables", "boot_count", "build_tables", "caption", "cell_marks", "cell_questions", "collect",
           "collect_examples", "drop_constant_columns", "gather", "hops_figure", "job_dirs", "job_info", "load_paper",
           "main", "mark_notes", "metric_order", "no_interval_notes", "paired_comparisons", "paper_comparison",
           "paper_file", "paper_presets", "partial_notes", "per_question", "pivot", "plot_hops", "prepare",
           "read_rows", "render_csv", "render_latex", "render_markdown", "render_missing", "render_paired",
           "render_paper", "seeds_change_nothing", "table_axes", "write_tables"]
