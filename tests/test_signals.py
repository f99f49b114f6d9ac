"""Signals through the command line: `collect -- CMD` exits as a shell would for CMD, and an ingest
stopped by SIGINT or SIGTERM at its parse, write or commit is one line, 130 / 143, leaves nothing
half-written and is finished by the next ingest (docs/robustness.md, "Signals")."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.execute.dataset import ingest_parquet
from scaletrace.pipeline.read.vocabulary import PER_TRACE_TABLES
from scaletrace.pipeline.synth import SynthRun, write_run

SCALETRACE = [sys.executable, "-m", "scaletrace.cli"]

# --- `scaletrace collect -- CMD` ------------------------------------------------------------------

DIES_OF = {  # each dies of its signal, as a training job does
    signal.SIGTERM: "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
    signal.SIGKILL: "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    signal.SIGSEGV: "import ctypes; ctypes.string_at(0)",  # a real invalid read, not a sent signal
}


def _shell_status(command: list[str]) -> int:
    """The status bash reports for ``command`` (its `$?`)."""
    script = f"{shlex.join(command)}; echo $?"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60).stdout
    return int(out.split()[-1])


@pytest.mark.parametrize("sig", list(DIES_OF), ids=lambda s: s.name)
def test_collect_exits_as_a_shell_reports_the_job(tmp_path, sig):
    command = [sys.executable, "-c", DIES_OF[sig]]
    expected = _shell_status(command)
    assert expected == 128 + sig  # bash's rule for a job a signal ended: what the wrapper must match
    result = subprocess.run([*SCALETRACE, "collect", "--out", str(tmp_path / "run"), "--", *command],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == expected, result.stderr
    # and a shell running the wrapper sees the same $? as for the job itself
    assert _shell_status([*SCALETRACE, "collect", "--out", str(tmp_path / "run"), "--", *command]) == expected


CLEANS_UP = """
import signal, sys, time
def stop(signum, frame):
    time.sleep(0.3)  # the job's own clean-up takes a while
    print("cleaned up", flush=True)
    sys.exit(3)
signal.signal(signal.SIGINT, stop)
print("ready", flush=True)
time.sleep(60)
"""


def _ctrl_c(command: list[str]) -> tuple[int, str]:
    """Run ``command`` in a process group of its own, press Ctrl-C (SIGINT to the group) once the
    job says ready; (exit status, stdout)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out


@pytest.mark.parametrize("handles_ctrl_c", [True, False], ids=["job-cleans-up", "job-dies-of-it"])
def test_ctrl_c_is_the_jobs_and_collect_exits_with_its_status(tmp_path, handles_ctrl_c):
    """Ctrl-C reaches the whole foreground group: the job decides.  The wrapper used to kill the
    job (SIGKILL, its clean-up cut short) and exit 130 with `interrupted`."""
    script = CLEANS_UP if handles_ctrl_c else "import time; print('ready', flush=True); time.sleep(60)"
    job = [sys.executable, "-c", script]
    alone_code, alone_out = _ctrl_c(job)
    alone_status = 128 - alone_code if alone_code < 0 else alone_code  # as a shell reports it
    assert alone_status == (3 if handles_ctrl_c else 128 + signal.SIGINT)  # sys.exit(3); Python's re-raised SIGINT
    wrapped_status, wrapped_out = _ctrl_c([*SCALETRACE, "collect", "--out", str(tmp_path / "run"), "--", *job])
    assert wrapped_status == alone_status
    assert wrapped_out == alone_out  # the job's clean-up ran to its end


# --- SIGINT / SIGTERM during an ingest -------------------------------------------------------------

PAUSE_POINTS = Path(__file__).with_name("pause_points.py")
ENGINES = ("duckdb", "parquet")
RUNS, RANKS = 2, 2  # four files: two committed or more before the third file's pause
# what a finished ingest must equal the clean one's in, column by column (ids and times aside)
SKIP = {"traces": "trace_id, ingested_at, stat_key", "runs": "updated_at"}  # stat_key: NULL for a fresh mtime


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("signal-runs")
    return [write_run(root, SynthRun(f"r{i}", ranks=RANKS, steps=20, tp_comm_us=10, seed=i)) for i in range(RUNS)]


def _target(tmp: Path, engine: str) -> Path:
    return tmp / ("t.duckdb" if engine == "duckdb" else "t.pq")


def _ingest(engine: str, runs: list[Path], target: Path):
    if engine == "duckdb":
        return ingest(runs, db=target, workers=2)
    return ingest_parquet(runs, target, workers=2)


@pytest.fixture(scope="module")
def clean(runs, tmp_path_factory) -> dict[str, dict]:
    """Per engine: what one uninterrupted ingest stores (tables' fingerprints, rows per file)."""
    tables = {}
    for engine in ENGINES:
        target = _target(tmp_path_factory.mktemp(f"clean-{engine}"), engine)
        assert not _ingest(engine, runs, target).errors
        tables[engine] = _contents(target)
    return tables


def _contents(target: Path) -> dict:
    """What a reader sees: each table's rows (sorted, as text; per-trace tables with their file's
    path for the trace_id), and each file's row count in each per-trace table."""
    with connect(target) as db:
        con = db.con
        seen: dict = {"rows_per_file": {}}
        for table in ("traces", "runs", *PER_TRACE_TABLES):
            skip = SKIP.get(table, "trace_id" if table in PER_TRACE_TABLES else "")
            select = f"SELECT * EXCLUDE ({skip}) FROM {table}" if skip else f"SELECT * FROM {table}"
            if table in PER_TRACE_TABLES:
                select = (f"SELECT t.path AS file, x.* EXCLUDE (trace_id) FROM {table} x "
                          f"LEFT JOIN traces t USING (trace_id)")
                for path, count in con.sql(f"SELECT file, count(*) FROM ({select}) GROUP BY file").fetchall():
                    seen["rows_per_file"][(table, path)] = count
            seen[table] = sorted(str(row) for row in con.sql(select).fetchall())
        seen["stored"] = {path for (path,) in con.sql("SELECT path FROM traces").fetchall()}
        seen["runs_of_traces"] = {run for (run,) in con.sql("SELECT DISTINCT run_id FROM traces").fetchall()}
        seen["run_rows"] = {run for (run,) in con.sql("SELECT run_id FROM runs").fetchall()}
        seen["logged_ok"] = {path for (path,) in con.sql(
            "SELECT DISTINCT path FROM ingest_log WHERE status = 'ok'").fetchall()}
    return seen


def _pause_and_signal(point: str, engine: str, sig: int, runs, target: Path, out: Path):
    """The CLI ingest paused at ``point``; ``sig`` to its process group (as the terminal's Ctrl-C
    or a scheduler's SIGTERM); (status, stderr, the processes it had)."""
    out.mkdir()
    where = ["--db", str(target)] if engine == "duckdb" else ["--parquet", str(target)]
    proc = subprocess.Popen([sys.executable, str(PAUSE_POINTS), point, str(out), "ingest", *map(str, runs),
                             *where, "-q", "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "paused").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (out / "paused").exists(), proc.communicate(timeout=60)
        family = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err, family


@pytest.mark.parametrize("point", ["parse", "write", "commit"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_signal_mid_ingest_is_one_line_leaves_no_partial_file_and_rerun_completes(
        tmp_path, runs, clean, engine, sig, point):
    target = _target(tmp_path, engine)
    status, err, family = _pause_and_signal(point, engine, sig, runs, target, tmp_path / "pause")
    assert status == 128 + sig, err  # as a shell reports a command the signal ended: 130, 143
    word = "interrupted" if sig == signal.SIGINT else "terminated"
    said = re.fullmatch(rf"{word}; (\d+) files? stored, re-run to finish\n", err)
    assert said, err
    gone = psutil.wait_procs(family, timeout=10)[1]
    assert not gone, f"left behind: {gone}"
    files = [str(f) for run in runs for f in sorted(run.glob("rank*.json"))]
    want = clean[engine]
    seen = _contents(target)
    # a reader sees whole files only: each stored file has all its rows, no row without its file
    assert len(seen["stored"]) == int(said.group(1)) < len(files)
    for (table, path), count in seen["rows_per_file"].items():
        assert path in seen["stored"] and count == want["rows_per_file"][(table, path)], (table, path)
    assert {key for key in want["rows_per_file"] if key[1] in seen["stored"]} == set(seen["rows_per_file"])
    assert seen["runs_of_traces"] <= seen["run_rows"]  # no trace without its run
    assert seen["logged_ok"] == seen["stored"]  # the log names the files stored, no other
    # the next ingest finishes the work: the same as one clean ingest
    assert not _ingest(engine, runs, target).errors
    finished = _contents(target)
    for table in ("traces", "runs", *PER_TRACE_TABLES, "rows_per_file"):
        assert finished[table] == want[table], table
    if engine == "parquet":  # the interrupted ingest's leftovers are collected
        assert not list(target.rglob(".*.tmp"))


FOREVER = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


# the console script's start, as tests/test_hardening.py runs it: `up` once Python itself is up
ENTRY_POINT = ("import os, sys; sys.argv[0] = 'scaletrace'; os.write(1, b'up\\n'); "
               "from scaletrace.cli import main; sys.exit(main())")


@pytest.mark.parametrize("delay_s", [0.02, 0.1, 1.5])  # from the start-up's imports to the query
def test_sigterm_outside_an_ingest_is_one_line_and_143(tmp_path, runs, delay_s):
    db = tmp_path / "t.duckdb"
    assert not ingest(runs[:1], db=db, workers=1).errors
    proc = subprocess.Popen([sys.executable, "-c", ENTRY_POINT, "sql", FOREVER, "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"
    time.sleep(delay_s)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err, out) == (128 + signal.SIGTERM, "terminated\n", "")
