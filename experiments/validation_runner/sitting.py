"""One sitting of a row: its ``python -m kgreason`` run (with a time budget, stopped by a signal),
and how the sitting's outcome becomes the row's JSON entry (a preparing note, a failure that
keeps an earlier measurement, or a measured row with its wall time and sittings)."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from validation_runner import places, tablefile


#: how often a sitting with a budget looks at its run (its clock and its answered questions); a
#: row answering from the call cache may pass ``--stop-at`` by a question or two in that time
POLL_S = 1.0


class Answered:
    """The questions a row's run dir holds answered: the ids of its ``predictions.jsonl`` whose
    last row is not an error (what the run itself counts as done; an error is retried on resume).
    Each call reads only what the run appended since the last one."""

    def __init__(self, run_dir: Path) -> None:
        self.path, self.offset, self.last = run_dir / "predictions.jsonl", 0, {}

    def __call__(self) -> int:
        try:
            if self.path.stat().st_size < self.offset:  # rewritten shorter (damaged lines set aside): read again
                self.offset, self.last = 0, {}
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return 0
        end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        self.offset += end
        for line in chunk[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a line the run sets aside as damaged
                continue
            if isinstance(row, dict) and "id" in row:
                self.last[row["id"]] = row
        return sum(1 for row in self.last.values() if not row.get("error"))


def answered(run_dir: Path) -> int:
    """:class:`Answered`, once."""
    return Answered(run_dir)()


def run_row(cmd: list[str], stop_after: float | None = None, stop_at: int | None = None,
            run_dir: Path | None = None) -> int:
    """Run one row's ``python -m kgreason``; with ``stop_after``, send it SIGTERM once that many
    seconds have passed, and with ``stop_at``, once ``run_dir`` holds that many answered questions
    (the run sums up what it answered, as on a ``kill``); return its exit status."""
    if stop_after is None and stop_at is None:
        return subprocess.call(cmd, cwd=places.ROOT)
    proc = subprocess.Popen(cmd, cwd=places.ROOT)
    count = Answered(run_dir) if stop_at is not None and run_dir is not None else None
    deadline = None if stop_after is None else time.monotonic() + stop_after
    try:
        while True:
            wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
            try:
                return proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
            why = None
            if deadline is not None and time.monotonic() >= deadline:
                why = f"--stop-after {stop_after:g}"
            elif count is not None and (n := count()) >= stop_at:
                why = f"--stop-at {stop_at}: {n} questions answered"
            if why:
                print(f"{why}: stopping the row's run (SIGTERM)", file=sys.stderr, flush=True)
                proc.send_signal(signal.SIGTERM)
                return proc.wait()
    except BaseException:  # Ctrl-C of the runner: the run gets it too (same process group); wait for its summary
        proc.wait()
        raise


def stopped_by_hand(rc: int, metrics: Path, since: float) -> bool:
    """A sitting ended by Ctrl-C or SIGTERM (exit 130 / 143, or the negative signal number) whose
    run wrote its partial metrics during this sitting (an older metrics.json does not count)."""
    if rc not in (130, 143, -2, -15) or not metrics.exists() or metrics.stat().st_mtime < since:
        return False
    try:
        return bool(json.loads(metrics.read_text()).get("run/partial"))
    except (OSError, ValueError):
        return False


def stopped_preparing(rc: int, run_dir: Path, since: float) -> dict | None:
    """A sitting ended by Ctrl-C or SIGTERM while the row's run still prepared (SubQRAG's index):
    the ``prepare_stopped.json`` its run wrote during this sitting (kgreason/runner/run.py), else ``None``."""
    marker = run_dir / "prepare_stopped.json"
    if rc not in (130, 143, -2, -15) or not marker.exists() or marker.stat().st_mtime < since:
        return None
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


#: what each row's ``python -m kgreason`` imports first; the rows run under this interpreter
#: (``sys.executable``), so one it lacks would fail every row alike
DEPS = ("hydra", "omegaconf", "numpy")


def missing_deps() -> list[str]:
    return [m for m in DEPS if importlib.util.find_spec(m) is None]


def preparing_entry(prev: dict, shown: str, split: str, n: int, preparing: dict, spent_now: float) -> tuple[dict, str]:
    """The row of a sitting whose budget ended in the set-up (a large pool's index takes several
    sittings): not a failure; it says how far the set-up got and keeps each sitting's time for
    the row's cost. Returns ``(entry, what the set-up reached)``."""
    spent = list(prev.get("prepare_sittings_s") or []) + [spent_now]
    where = preparing.get("progress") or {}
    got = (f"{where['what']} {where['done']} of {where['total']} {where['unit']}" if where
           else "no progress reported")
    return {"command": shown, "split": split, "n": n,
            "status": (f"preparing: {got} after {len(spent)} sitting{'s' if len(spent) > 1 else ''} "
                       f"({sum(spent):.0f} s), no question answered yet; the same command resumes it"),
            "prepare_progress": where or None, "prepare_sittings_s": spent}, got


def failed_entry(prev: dict, shown: str, n: int, rc: int) -> dict:
    """A sitting that failed: a measured row is kept as it was (a killed or failed later sitting
    never erases it), with the failure noted; an unmeasured one records it."""
    if "metrics" in prev:
        return {**prev, "last_sitting": f"failed (exit {rc})"}
    return {**prev, "command": shown, "n": n, "status": f"failed (exit {rc})"}


def carry_wall_time(entry: dict, prev: dict, run_dir: Path, since: float, collect: bool) -> None:
    """The row's time when this sitting did not measure it: a sitting that only replayed the call
    cache keeps the earlier sitting's wall time (its own is not the method's cost), as does a
    resume that found every question answered; the model's time per question likewise."""
    if entry["backend_calls"] == 0 and entry.get("cache_hits"):  # a replay: its wall time is not the method's cost
        entry["wall_s"], entry["replayed_from_cache"] = prev.get("wall_s"), True
        for k in ("wall_note", "seconds_per_question"):
            if prev.get(k):
                entry[k] = prev[k]
    elif (collect or (run_dir / "predictions.jsonl").stat().st_mtime < since) and prev.get("wall_s") is not None:
        # a resume that found every question answered (e.g. to recompute the statistics):
        # the earlier sitting's wall time stands
        entry["wall_s"], entry["no_new_rows"] = prev["wall_s"], True
        for k in ("wall_note", "replayed_from_cache", "seconds_per_question"):
            if prev.get(k):
                entry[k] = prev[k]
    if "llm_seconds_per_question" not in entry and prev.get("llm_seconds_per_question") is not None:
        # no question answered in full by the backend this sitting (a replay): the earlier figure stands
        entry["llm_seconds_per_question"] = prev["llm_seconds_per_question"]
        if prev.get("llm_seconds_questions"):
            entry["llm_seconds_questions"] = prev["llm_seconds_questions"]


def sum_sittings(entry: dict, prev: dict, run_dir: Path, since: float, this_sitting: float, collect: bool,
                 resumed: bool = True) -> None:
    """A row measured over several sittings costs their sum: the sittings that only prepared
    (SubQRAG's index) before it, or the earlier sittings of a partial row this one resumed
    (timing.json covers one sitting only); ``wall_note`` says how the figure was made. ``resumed``:
    the run dir held answered questions when this sitting began; a partial row measured afresh (its
    run dir gone: recorded stale, or another machine) costs this sitting only."""
    if not collect and prev.get("prepare_sittings_s") and "metrics" not in prev:
        entry["sittings_s"] = list(prev["prepare_sittings_s"]) + [this_sitting]
        total, k = sum(entry["sittings_s"]), len(prev["prepare_sittings_s"])
        done = entry.get("n_examples")
        if not entry.get("partial") and done:
            entry["seconds_per_question"] = round(total / done, 1)
        entry["wall_note"] = (f"{'partial: ' if entry.get('partial') else ''}{len(entry['sittings_s'])} "
                              f"sittings, {k} of them preparing (the set-up before the first question), "
                              f"{total:.0f} s in all for {done} questions (the runner's sitting times, "
                              "model load and set-up included); wall_s is the last one's")
    elif (not collect and resumed and "metrics" in prev and prev.get("partial")
            and ((run_dir / "predictions.jsonl").stat().st_mtime >= since or not entry.get("partial"))
            and (prev.get("sittings_s") or (prev.get("sitting_s") and not prev.get("wall_note")))):
        # a resume of a partial row: timing.json covers this sitting only, so the row's cost is
        # the sum of its sittings (each one's model load and set-up included); a sitting that only
        # sums up (the one before it stopped after its last question) completes the row too
        entry["sittings_s"] = list(prev.get("sittings_s") or [prev["sitting_s"]]) + [this_sitting]
        if prev.get("sittings_note"):  # how earlier sittings were recorded, where not by the runner
            entry["sittings_note"] = prev["sittings_note"]
        total = sum(entry["sittings_s"])
        if not entry.get("partial") and entry.get("n_examples"):
            entry["seconds_per_question"] = round(total / entry["n_examples"], 1)
            entry["wall_note"] = (f"{len(entry['sittings_s'])} sittings, {total:.0f} s in all (the runner's "
                                  "sitting times, model load and set-up included); wall_s is the last one's")
        else:  # still partial: the note names every sitting so far, so an earlier note is not lost
            entry["wall_note"] = (f"partial: {len(entry['sittings_s'])} sittings, {total:.0f} s in all for "
                                  f"{entry.get('n_examples')} questions (the runner's sitting times, model "
                                  "load and set-up included); the run dir and the call cache resume it")


def sit_row(row: str, args, table_name: str, out: Path) -> None:
    """One sitting of ``row`` (``args``: the runner's flags): its command printed and run (or, with
    ``--collect``, its run dir read as it stands), and its JSON entry in ``out`` rewritten from
    what the sitting left: a measured row (with its bundle), a partial one, a preparing note or a
    failure (:func:`preparing_entry`, :func:`failed_entry`)."""
    import shutil

    from validation_runner.collect import row_statistics, summarise
    from validation_runner.rows import command, shown_command
    from validation_runner.stamp import _head, code_stamp, run_stamp

    cmd = command(row, args.n, args.cache, args.workers, args.threads, args.route, args.split, args.heldout_skip)
    shown = shown_command(cmd, args.cache)
    print(shown, flush=True)
    if args.print:
        return
    run_dir = places.ROOT / "outputs" / "validation" / table_name / row
    if args.fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.time()
    # the method's files as this sitting runs them (stamped now: a file edited while the row runs
    # must not be credited with its numbers)
    stamp = {"commit": _head(), "from": "the working tree of the sitting", "files": code_stamp(row)}
    stop_at = getattr(args, "stop_at", None)
    if stop_at is not None and stop_at >= args.n:  # the run's own end: a SIGTERM there would cut its summing up
        print(f"row {row}: --stop-at {stop_at} is not under its {args.n} questions: the row runs to its end",
              file=sys.stderr, flush=True)
        stop_at = None
    if stop_at is not None and not args.collect and (held := answered(run_dir)) >= stop_at:
        print(f"row {row}: its run dir holds {held} answered questions, --stop-at {stop_at} reached; not run "
              "(the committed row stands)", file=sys.stderr, flush=True)
        return
    resumed = answered(run_dir) > 0  # an earlier sitting's questions: this one goes on from them
    rc = 0 if args.collect else run_row(cmd, args.stop_after, stop_at, run_dir)
    # re-read: other sittings may have written (the pairing below reads their rows); the row itself
    # is written with tablefile.put_row, which re-reads the table again under its lock
    table = json.loads(out.read_text()) if out.exists() else {}
    if args.collect and not (run_dir / "metrics.json").exists():
        # still running, or killed before the run wrote its metrics: nothing to summarise yet
        print(f"row {row}: no metrics.json yet in {run_dir} (a run still going, or one stopped before "
              "writing it; stop it with Ctrl-C or `kill <pid>` (SIGTERM) for a partial row); the table is left as it was",
              file=sys.stderr, flush=True)
        return
    prev = table.get(row, {})
    preparing = None if args.collect else stopped_preparing(rc, run_dir, t0)
    if preparing is not None and "metrics" not in prev:
        entry, got = preparing_entry(prev, shown, args.split, args.n, preparing, round(time.time() - t0, 1))
        tablefile.put_row(out, row, entry)
        print(f"row {row}: stopped while preparing ({got}); noted, resume with the same command",
              file=sys.stderr, flush=True)
        return
    if rc != 0 and stopped_by_hand(rc, run_dir / "metrics.json", t0):
        # Ctrl-C or SIGTERM: the run summed up what it answered (run/partial) before it exited,
        # so this sitting is a partial row with its own N, not a failure
        print(f"row {row}: stopped by a signal (exit {rc}); committed as partial", file=sys.stderr, flush=True)
        rc = 0
    if rc != 0 or not (run_dir / "metrics.json").exists():
        print(f"row {row}: exit status {rc}, no metrics (see {run_dir}/run.log)", file=sys.stderr, flush=True)
        entry = failed_entry(prev, shown, args.n, rc)
    else:
        entry = summarise(run_dir)
        carry_wall_time(entry, prev, run_dir, t0, args.collect)
        this_sitting = round(time.time() - t0, 1)
        sum_sittings(entry, prev, run_dir, t0, this_sitting, args.collect, resumed)
        stats = row_statistics(run_dir, row, table_name, args.route, table)
        pq = stats.pop("per_question")
        entry.update(stats)
        if args.collect and prev.get("command"):  # the command that made the run, not this call's flags
            shown = prev["command"]
        # the method's code this sitting measured (a --collect keeps the stamp of the sitting that ran)
        code = stamp
        if args.collect:  # the sitting that ran: its run.json's commit, else the row's earlier stamp
            code = run_stamp(run_dir, row) or prev.get("code") or stamp
        entry = {"command": shown, "split": args.split, "n": args.n, **entry,
                 "sitting_s": this_sitting, "code": code, "per_question": pq}
        if not args.no_bundle:
            _bundle_row(entry, run_dir, table_name, row, args.cache)
    tablefile.put_row(out, row, entry)


def _bundle_row(entry: dict, run_dir: Path, table_name: str, row: str, cache: str) -> None:
    """The row's runs and model replies, committed beside it (issue 58); a row measured now is
    current by construction (its bundle is today's code's run), which its ``currency`` says."""
    from kgreason.storage.bundle import BundleError

    from validation_runner.bundles import export_bundle
    from validation_runner.currency import measured_now

    try:
        entry["bundle"] = export_bundle(run_dir, table_name, row, cache)
        entry["currency"] = measured_now(entry)
        print(f"row {row}: bundle {entry['bundle']['file']} ({entry['bundle']['bytes'] / 1e3:.0f} kB)",
              file=sys.stderr, flush=True)
    except BundleError as err:  # the row stands, marked "not replayable" by the generator
        print(f"row {row}: no bundle ({err}); the table marks it not replayable", file=sys.stderr, flush=True)
