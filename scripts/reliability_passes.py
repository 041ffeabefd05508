"""Re-run every failure of the fifth and sixth reliability passes (issues 57 and 73) by the tests
that reproduce it, in one pytest session, and print one line per case: holds, FAILS or not checked
here (a test skipped: no root for a small tmpfs, no pyoxigraph, ...).

    .venv/bin/python scripts/reliability_passes.py            # all 33 cases: 91 tests, 2.5 min on 2 busy cores
    .venv/bin/python scripts/reliability_passes.py --pass 6   # the sixth pass's 15
    .venv/bin/python scripts/reliability_passes.py --list     # the cases and their tests, nothing run

Exit status: 0 when every case holds, 1 when one fails, 2 when none fails but a test was skipped.
Each case names the tests that failed on the code the pass was filed against; a case holds when all
of them pass. ``tests/test_reliability_passes.py`` checks that every test named here exists.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    pass_no: int
    id: str
    what: str
    tests: tuple[str, ...]  # pytest node ids; one without [params] stands for all its parametrisations


LOWS5 = "tests/test_run_dir_lows.py::"
OPENAI = "tests/llm/test_openai_replies.py::"
EMBED = "tests/test_embedstore.py::"
SUBQ = "tests/reasoners/test_subqrag_index.py::"
HOSTILE = "tests/storage/test_bundle_hostile.py::"
MERGE = "tests/storage/test_callstore_merge.py::"
LOWS6 = "tests/test_sixth_pass_lows.py::"
L9_STILL_OPEN = (LOWS6 + "test_an_in_order_reasoner_with_several_workers_is_refused_before_anything_is_built",
                 LOWS6 + "test_a_readonly_cache_that_is_not_there_is_one_setting_to_fix",
                 LOWS6 + "test_ask_against_a_sparql_endpoint_without_the_graph_is_one_line")

CASES: tuple[Case, ...] = (
    # ---------------------------------------------------------------- fifth pass (issue 57): 18
    Case(5, "M1", "a reply has a byte ceiling and each attempt a deadline",
         (OPENAI + "test_an_endless_reply_is_cut_off_at_its_byte_ceiling_in_bounded_memory",
          OPENAI + "test_a_huge_finite_reply_is_refused_retried_and_never_cached")),
    Case(5, "M2", "a reply holding a lone UTF-16 surrogate is stored",
         (OPENAI + "test_a_lone_surrogate_is_replaced_counted_and_every_store_takes_the_row",
          "tests/test_unwritable_text.py")),
    Case(5, "M3", "SubQRAG's offline index is locked per corpus",
         (SUBQ + "test_two_processes_indexing_one_corpus_pay_each_extraction_once",)),
    Case(5, "M4", "a full disk during an embedding-store build is one line, no SIGBUS",
         (EMBED + "test_a_full_disk_during_a_store_build_is_a_one_line_error_and_leaves_no_temporary_store",)),
    Case(5, "L1", "a store build killed leaves no temp dir for good",
         (EMBED + "test_a_build_stopped_by_a_signal_leaves_a_temp_dir_the_next_build_removes",
          EMBED + "test_a_stale_temp_dir_of_another_store_is_removed_only_when_no_build_holds_it")),
    Case(5, "L2", "llm.timeout_s bounds the whole attempt, not one read",
         (OPENAI + "test_a_trickling_reply_ends_at_the_attempts_deadline",)),
    Case(5, "L3", "the serve proxy's deadline is per request, before the key check",
         ("tests/llm/test_serve_hardened.py::test_a_trickling_client_is_closed_at_the_request_deadline_even_before_"
          "the_key_check",)),
    Case(5, "L4", "a run.lock planted as a symlink is not followed",
         (LOWS5 + "test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched",)),
    Case(5, "L5", "an empty or blank reply is not a success",
         (OPENAI + "test_an_empty_or_blank_reply_is_a_failed_attempt_never_cached",)),
    Case(5, "L6", "a torn last line of extractions.jsonl swallows no record",
         (SUBQ + "test_a_torn_last_line_of_the_extraction_log_swallows_no_later_record",)),
    Case(5, "L7", "a retry killed with kill -9 never leaves the old complete metrics.json",
         (LOWS5 + "test_a_retry_killed_with_sigkill_never_leaves_the_old_complete_metrics",)),
    Case(5, "L8", "a store whose meta.json agrees with a wrong matrix is rebuilt",
         (EMBED + "test_a_store_whose_meta_agrees_with_a_matrix_of_another_size_is_rebuilt",)),
    Case(5, "L9", "start-up and I/O errors are one line (the sixth pass's L9 finishes it)",
         (LOWS5 + "test_a_run_dir_that_cannot_be_made_is_one_line",
          LOWS5 + "test_a_full_disk_while_writing_rows_is_one_line",
          LOWS5 + "test_a_config_file_that_is_not_yaml_is_one_line_naming_file_and_line", *L9_STILL_OPEN)),
    Case(5, "L10", "a refused start removes only what this launch made",
         (LOWS5 + "test_a_refused_start_keeps_an_existing_folder_and_what_it_held",
          LOWS5 + "test_a_refused_start_still_removes_the_new_dir_it_made")),
    Case(5, "L11", "../ in hydra.job.name or hydra.output_subdir is refused",
         (LOWS5 + "test_hydra_names_with_dot_dot_are_refused_before_anything_is_written",
          LOWS5 + "test_hydra_names_with_dot_dot_are_refused_for_a_sweep_too")),
    Case(5, "L12", "the same command goes on, whatever the run dir's name (the printed resume command it replaced)",
         (LOWS5 + "test_the_same_command_goes_on_in_a_dir_whose_name_needs_quoting",)),
    Case(5, "L13", "a row whose metrics is not an object is set aside on resume",
         (LOWS5 + "test_a_row_whose_metrics_is_not_an_object_is_set_aside_on_resume_naming_file_and_line",)),
    Case(5, "L14", "llm.timeout_s=0 is refused at start-up",
         ("tests/test_preflight.py::test_an_http_timeout_that_no_call_can_meet_stops_the_run_at_start_up",
          "tests/test_preflight.py::test_a_client_built_with_a_timeout_no_call_can_meet_is_refused")),
    # ---------------------------------------------------------------- sixth pass (issue 73): 15
    Case(6, "H1", "a bundle's manifest decides no path outside the bundle",
         (HOSTILE + "test_a_manifest_run_dir_outside_the_bundle_is_refused_and_the_victim_untouched",
          HOSTILE + "test_from_bundle_refuses_a_run_dir_outside_the_bundle_and_copies_nothing",
          HOSTILE + "test_a_replay_writes_nowhere_a_bundles_overrides_say")),
    Case(6, "M1", "2 GB of zeros in a 2 MB bundle is refused in bounded memory",
         (HOSTILE + "test_a_bundle_of_2gb_of_zeros_is_refused_in_bounded_memory",)),
    Case(6, "M2", "replay --out into a used folder never reads identical",
         (HOSTILE + "test_a_used_out_dir_never_reads_identical_for_an_edited_bundle_and_no_unpack_is_left",)),
    Case(6, "M3", "an interrupted merge (Ctrl-C, SIGKILL at any step, a full disk) loses no record",
         (MERGE + "test_a_merge_stopped_by_ctrl_c_in_its_grace_period_leaves_a_store_that_reads_whole",
          MERGE + "test_the_leftovers_of_an_older_interrupted_merge_read_whole_and_the_next_merge_folds_them",
          MERGE + "test_a_merge_on_a_full_disk_is_one_line_and_every_record_stays_readable",
          MERGE + "test_a_merge_killed_at_each_of_its_steps_loses_no_record")),
    Case(6, "M4", "two merges beside eight writers lose no completed put",
         (MERGE + "test_two_merges_beside_eight_writers_lose_no_completed_put",)),
    Case(6, "M5", "bundle export publishes no secret (a quoted key, a URL's password)",
         ("tests/storage/test_bundle_secrets.py::test_a_bundle_holds_neither_the_key_a_reply_quotes_nor_the_base_urls_"
          "password",)),
    Case(6, "L1", "replay leaves no unpacked bundle in $TMPDIR, refusals included",
         (HOSTILE + "test_a_used_out_dir_never_reads_identical_for_an_edited_bundle_and_no_unpack_is_left",
          HOSTILE + "test_a_manifest_run_dir_outside_the_bundle_is_refused_and_the_victim_untouched")),
    Case(6, "L2", "a malformed bundle is one line, not a traceback",
         (HOSTILE + "test_a_malformed_bundle_is_one_line_naming_what_is_wrong",)),
    Case(6, "L3", "a store open across a merge sees every later record",
         (MERGE + "test_a_store_opened_before_a_merge_sees_every_record_written_after_it",)),
    Case(6, "L4", "--from-bundle installs only the replies its run used",
         (HOSTILE + "test_verify_fails_a_cache_entry_no_run_used",
          HOSTILE + "test_from_bundle_installs_only_the_replies_its_run_used")),
    Case(6, "L5", "a stop early in an embedding-store build says the store restarts",
         (LOWS6 + "test_a_stop_before_an_embedding_stores_first_bar_says_the_store_restarts",)),
    Case(6, "L6", "ask's entity lookups on a SPARQL KG are capped",
         (LOWS6 + "test_ask_caps_its_entity_lookups_on_a_sparql_kg",)),
    Case(6, "L7", "show, tables, report on a full disk: one line with the path, no empty page",
         (LOWS6 + "test_show_on_a_full_disk_names_the_page_and_leaves_no_empty_one",
          LOWS6 + "test_tables_and_report_on_a_full_disk_name_the_file_and_leave_no_empty_one")),
    Case(6, "L8", "models fetch checks the pinned size while a part streams",
         ("tests/llm/test_models_fetch.py::test_a_part_larger_than_the_pinned_size_is_refused_before_it_is_written",)),
    Case(6, "L9", "subqrag with several workers, readonly with no cache, ask on an empty endpoint: one line",
         L9_STILL_OPEN),
)


def _node(classname: str, name: str, file: str | None) -> str:
    """A junit test case's pytest node id (module-level test functions)."""
    path = file or classname.replace(".", "/") + ".py"
    return f"{path}::{name}"


def _matches(node: str, wanted: str) -> bool:
    if "::" not in wanted:  # a whole file
        return node.split("::", 1)[0] == wanted
    return node == wanted or node.startswith(wanted + "[")


def outcomes(tests: list[str], extra: list[str]) -> dict[str, tuple[str, str]]:
    """node id → (passed | failed | skipped, message) of one pytest session over ``tests``."""
    with tempfile.TemporaryDirectory(prefix="kgreason-passes-") as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", *dict.fromkeys(tests), "-q", "--slow", "-p", "no:cacheprovider",
               f"--junitxml={xml}", *extra]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        subprocess.run(cmd, cwd=ROOT, env=env)
        if not xml.is_file():
            raise SystemExit("reliability_passes.py: pytest wrote no report (see its output above)")
        out: dict[str, tuple[str, str]] = {}
        for tc in ET.parse(xml).getroot().iter("testcase"):
            node = _node(tc.get("classname", ""), tc.get("name", ""), tc.get("file"))
            status, msg = "passed", ""
            for kind in ("failure", "error", "skipped"):
                el = tc.find(kind)
                if el is not None:
                    status = "skipped" if kind == "skipped" else "failed"
                    msg = (el.get("message") or "").splitlines()[0][:160] if el.get("message") else kind
                    break
            out[node] = (status, msg)
        return out


def verdict(case: Case, results: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """(holds | FAILS | not checked here, why) of one case from its tests' outcomes."""
    got = [(n, r) for n, r in results.items() if any(_matches(n, w) for w in case.tests)]
    missing = [w for w in case.tests if not any(_matches(n, w) for n, _r in got)]
    if missing:
        return "FAILS", f"no result for {missing[0]}"
    failed = [(n, r[1]) for n, r in got if r[0] == "failed"]
    if failed:
        return "FAILS", f"{failed[0][0]}: {failed[0][1]}"
    skipped = [(n, r[1]) for n, r in got if r[0] == "skipped"]
    if skipped:
        return "not checked here", f"{skipped[0][0]}: {skipped[0][1]}"
    return "holds", f"{len(got)} test(s) passed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pass", dest="pass_no", type=int, choices=(5, 6), default=None, help="only this pass's cases")
    ap.add_argument("--list", action="store_true", help="print the cases and their tests; run nothing")
    ap.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    a = ap.parse_args(argv)
    cases = [c for c in CASES if a.pass_no in (None, c.pass_no)]
    if a.list:
        for c in cases:
            print(f"pass {c.pass_no} {c.id}: {c.what}")
            for t in c.tests:
                print(f"    {t}")
        return 0
    results = outcomes([t for c in cases for t in c.tests], a.pytest_args)
    verdicts = [(c, *verdict(c, results)) for c in cases]
    print()
    for c, v, why in verdicts:
        print(f"pass {c.pass_no} {c.id:<4} {v:<16} {c.what}" + ("" if v == "holds" else f"  [{why}]"))
    n_fail = sum(v == "FAILS" for _c, v, _w in verdicts)
    n_skip = sum(v == "not checked here" for _c, v, _w in verdicts)
    print(f"\n{len(verdicts) - n_fail - n_skip} of {len(verdicts)} cases hold"
          + (f", {n_fail} fail" if n_fail else "") + (f", {n_skip} not checked here" if n_skip else ""))
    return 1 if n_fail else (2 if n_skip else 0)


if __name__ == "__main__":
    raise SystemExit(main())
