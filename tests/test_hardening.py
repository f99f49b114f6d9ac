"""Issue 21, items 10-19: hangs, escapes, resources and one-liners through the CLI (README, "Robustness")."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from scaletrace.cli import main


def _scaletrace(*args, env=None, **kw):
    import os
    import subprocess

    return subprocess.run([sys.executable, "-m", "scaletrace.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120, **kw)


@pytest.mark.parametrize("command", [["query", "run_summary"], ["sql", "SELECT 1"], ["report", "-o", "r.html"],
                                     ["ingest", str(FIXTURES / "micro-overlap")], ["export", "--parquet", "pq"]])
def test_a_sqlite_db_is_one_line_and_no_extension_is_installed(tmp_path, command):
    import sqlite3

    db = tmp_path / "other.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (a)")
    before = db.read_bytes()
    result = _scaletrace(*command, "--db", str(db), env={"HOME": str(tmp_path)}, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "not a DuckDB file" in result.stderr, result.stderr
    assert not (tmp_path / ".duckdb").exists()  # DuckDB's extension directory: nothing installed or fetched
    assert db.read_bytes() == before



# The console entry point as pip writes it (`from scaletrace.cli import main; sys.exit(main())`), after
# a line that says the interpreter is up: before that, Python's own start-up (site, the editable
# install's finder) is out of scaletrace's reach.
ENTRY_POINT = ("import os, sys; sys.argv[0] = 'scaletrace'; os.write(1, b'up\\n'); "
               "from scaletrace.cli import main; sys.exit(main())")


def _interrupt_after(delay_s: float, *args):
    import os
    import subprocess
    import time

    proc = subprocess.Popen([sys.executable, "-c", ENTRY_POINT, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    assert proc.stdout.readline() == "up\n"
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


@pytest.mark.parametrize("delay_s", [0.01, 0.02, 0.03, 0.06, 0.1, 0.15, 0.25, 0.4])
def test_ctrl_c_at_start_up_is_one_line_and_130(tmp_path, delay_s):
    rc, _, err = _interrupt_after(delay_s, "ingest", str(FIXTURES), "--db", str(tmp_path / "t.duckdb"))
    assert rc == 130, err
    assert err.count("\n") == 1 and err.startswith("interrupted"), err


def test_a_signal_during_an_import_is_raised_once_the_import_is_done(tmp_path, monkeypatch):
    """The start-up test above, made deterministic: a KeyboardInterrupt raised while a module
    initializes can abort the process (DuckDB's compiled module: "Critical nanobind error", SIGABRT
    instead of 130), so a signal during an import is remembered and raised at the next check."""
    from scaletrace.pipeline.common.interrupt import Interrupt

    (tmp_path / "signalled_on_import.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.05)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with Interrupt() as stop:
        import signalled_on_import  # the old handler raised KeyboardInterrupt in the module's body

        assert signalled_on_import.DONE and stop.hit
        with pytest.raises(KeyboardInterrupt):
            stop.check()


SIGNAL_IN_FORK = """
import os, signal, sys
from scaletrace.pipeline.common.interrupt import Interrupt
from scaletrace.pipeline.execute.workers import in_order

armed = []

def signal_once():  # the parent's at-fork callback, like logging's: SIGINT arrives inside it
    if armed:
        armed.clear()
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(100_000))  # the handler runs here, inside the callback

os.register_at_fork(after_in_parent=signal_once)
with Interrupt() as stop:
    armed.append(1)
    try:
        list(in_order(abs, [(-1,), (-2,)], 1, str))
        print("not raised")
    except KeyboardInterrupt:
        print("raised", stop.hit)
"""


def test_a_signal_while_the_pool_forks_is_raised_once_the_fork_is_done(tmp_path):
    """The start-up test above caught it at 0.4 s: a KeyboardInterrupt raised in an at-fork callback
    is printed with its traceback ("Exception ignored in: <function _releaseLock ...>"), not the one
    line.  The pool's submit is held: the signal is raised once the workers are forked."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", SIGNAL_IN_FORK], capture_output=True, text=True, timeout=60)
    assert done.stdout == "raised True\n" and done.stderr == "", (done.stdout, done.stderr)


FOREVER = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


def test_sql_stops_at_its_time_limit(small_db):
    import time

    started = time.monotonic()
    result = CliRunner().invoke(main, ["sql", FOREVER, "--db", str(small_db), "--timeout", "0.5"])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and "stopped after 0.5 s, the time limit" in result.output
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("command", ["sql", "query"])
def test_timeout_must_not_be_negative(small_db, command):
    target = "SELECT 1" if command == "sql" else "run_summary"
    result = CliRunner().invoke(main, [command, target, "--db", str(small_db), "--timeout", "-1"])
    assert result.exit_code == 2 and "--timeout" in result.output


def test_query_runs_under_its_time_limit(small_db, monkeypatch):
    from scaletrace.pipeline.store import db as db_module

    seen = []
    real = db_module.connect
    monkeypatch.setattr(db_module, "connect", lambda path, **kw: seen.append(kw) or real(path, **kw))
    result = CliRunner().invoke(main, ["query", "run_summary", "--db", str(small_db), "--timeout", "7"])
    assert result.exit_code == 0, result.output
    assert seen == [{"timeout_s": 7.0}]
    with db_module.connect(small_db, timeout_s=0.3) as database, pytest.raises(db_module.QueryTimeout):
        database._run(FOREVER, None)


@pytest.mark.parametrize("delay_s", [1.0, 2.5])
def test_ctrl_c_stops_a_long_sql_with_one_line(small_db, delay_s):
    import time

    started = time.monotonic()
    rc, out, err = _interrupt_after(delay_s, "sql", FOREVER, "--db", str(small_db))
    assert rc == 130, err
    assert err == "interrupted\n" and out == ""
    assert time.monotonic() - started < delay_s + 10  # stopped, not run to the 60 s limit


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to see the reader open the database")
def test_a_reader_blocks_an_ingest_no_longer_than_its_time_limit(small_db, tmp_path):
    """The reader is a process of its own (DuckDB's lock is between processes); the ingest runs here,
    as soon as the reader holds the database."""
    import shutil
    import subprocess
    import time

    from conftest import holds_open

    db = tmp_path / "t.duckdb"
    shutil.copy(small_db, db)
    reader = subprocess.Popen([sys.executable, "-m", "scaletrace.cli", "sql", FOREVER, "--db", str(db),
                               "--timeout", "4"], stderr=subprocess.PIPE, text=True)
    try:
        holds_open(reader.pid, db)  # the reader holds the database now
        started = time.monotonic()
        writer = CliRunner().invoke(main, ["ingest", str(FIXTURES / "micro-overlap*"), "--db", str(db)],
                                    env={"COLUMNS": "200"})
        waited = time.monotonic() - started
        reader.wait(timeout=60)
    finally:
        reader.kill()
        reader.wait()
    assert "stopped after 4 s" in reader.stderr.read()
    assert writer.exit_code in (0, 1) and "in use by" not in writer.stderr, writer.output
    assert "waiting up to" in writer.stderr, writer.stderr  # it did find the database held
    assert waited < 30  # not the writer's 300 s


AWKWARD = [
    "SELECT * FROM traces JOIN device_events USING (trace_id) LIMIT 3",  # run_id, rank, ... twice
    "SELECT INTERVAL 1 DAY AS i, INTERVAL '3 months 2 hours' AS j",
    "SELECT 'infinity'::DATE AS d, '-infinity'::TIMESTAMP AS t, 'infinity'::TIMESTAMPTZ AS tz",
    "SELECT union_value(k := 1) AS u",
    "SELECT [1, 2] AS l, {'a': 1, 'b': [2]} AS s, map([1], ['x']) AS m, [1, 2]::INTEGER[2] AS a",
    "SELECT 'a\\x00b'::BLOB AS b, '\\xff'::BLOB AS c",
    "SELECT '101'::BIT AS bits, 170141183460469231731687303715884105727::HUGEINT AS h",
]


@pytest.mark.parametrize("fmt", ["table", "line", "csv", "json"])
@pytest.mark.parametrize("statement", AWKWARD)
def test_sql_shows_what_polars_cannot_take(small_db, statement, fmt):
    import json

    result = CliRunner().invoke(main, ["sql", statement, "--db", str(small_db), "--format", fmt])
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if fmt == "json":
        rows = json.loads(result.output)
        assert rows and len(set(rows[0])) == len(rows[0])
    if fmt == "csv":
        header = result.output.splitlines()[0].split(",")
        assert len(set(header)) == len(header)


def test_repeated_column_names_are_numbered(small_db):
    result = CliRunner().invoke(main, ["sql", "SELECT 1 AS a, 2 AS a, 3 AS a", "--db", str(small_db),
                                       "--format", "csv"])
    assert result.output == "a,a_2,a_3\n1,2,3\n"


def test_sql_streams_in_batches(small_db):
    from scaletrace.pipeline.store.db import connect

    batches = []
    with connect(small_db) as database:
        names = database.stream("SELECT * FROM range(200000)", batches.append, "csv", batch_rows=50_000)
    assert names == ["range"]
    assert len(batches) >= 4 and max(b.height for b in batches) <= 50_000
    assert sum(b.height for b in batches) == 200_000


@pytest.mark.parametrize("fmt", ["csv", "json", "line"])
def test_streamed_output_is_whole(small_db, fmt):
    import json

    result = CliRunner().invoke(main, ["sql", "SELECT range AS n FROM range(150000)", "--db", str(small_db),
                                       "--format", fmt])
    assert result.exit_code == 0
    if fmt == "csv":
        assert result.output.splitlines() == ["n", *map(str, range(150000))]
    elif fmt == "json":
        assert [r["n"] for r in json.loads(result.output)] == list(range(150000))
    else:
        assert result.output.split("\n\n") == [f"n: {i}" for i in range(149999)] + ["n: 149999\n"]


def test_a_table_shows_the_first_rows_and_says_how_many_more(small_db):
    result = CliRunner().invoke(main, ["sql", "SELECT range AS n FROM range(1000)", "--db", str(small_db)])
    assert result.exit_code == 0
    assert "│ 199 " in result.output and "│ 200 " not in result.output
    assert "800 more rows not shown" in result.output


EVIL = "\x1b]0;pwned\x07\x1b[31mred\r\nX"  # an OSC title, an SGR colour, a CR/LF breaking the line


@pytest.fixture(scope="module")
def evil_db(tmp_path_factory):
    import json
    import shutil

    from scaletrace.pipeline import ingest

    root = tmp_path_factory.mktemp("evil")
    for size in (1, 2):  # two runs of one sweep: explain compares them
        run = root / f"r{size}"
        shutil.copytree(FIXTURES / "micro-2rank", run)
        (run / "run.json").write_text(json.dumps({"run_id": f"run{size}{EVIL}", "workload": f"w{EVIL}"}))
    db = root / "t.duckdb"
    report = ingest([root], db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


@pytest.mark.parametrize("command", [["report", "-o", "{tmp}/r.html"], ["explain"], ["explain", "--format", "line"],
                                     ["query", "run_summary"], ["sql", "SELECT run_id, workload FROM runs"]])
def test_no_terminal_escape_reaches_the_terminal(evil_db, tmp_path, command, monkeypatch):
    # vl-convert panics (aborting the process) on a control character in a chart's text: the
    # report's static SVG fallbacks are left out here (reported; not this test's subject)
    monkeypatch.setattr("scaletrace.reports.static_svgs", lambda drawn: {}, raising=False)
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    result = CliRunner().invoke(main, [*args, "--db", str(evil_db)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\r" not in result.output and "\x07" not in result.output
    assert "\\x1b" in result.output or command[0] == "report"  # shown, escaped (the report: no headline here)


def test_every_stdout_line_goes_through_the_one_escaping(capsys):
    from scaletrace import cli

    cli.echo(f"best: run{EVIL}")
    assert capsys.readouterr().out == "best: run\\x1b]0;pwned\\x07\\x1b[31mred\\r\\nX\n"


@pytest.mark.parametrize("db", ["", "  ", ":memory:", ":memory:x"])
def test_ingest_refuses_a_db_path_that_is_not_a_file(db):
    result = CliRunner().invoke(main, ["ingest", str(FIXTURES / "micro-2rank"), "--db", db])
    assert result.exit_code == 2 and "not a usable database path" in result.output
    assert "does not exist" not in result.output


@pytest.mark.parametrize("size", ["0", "0M", "0.0G"])
def test_max_trace_size_zero_is_refused(tmp_path, size):
    result = CliRunner().invoke(main, ["ingest", str(FIXTURES / "micro-2rank"), "--db", str(tmp_path / "t.duckdb"),
                                       "--max-trace-size", size])
    assert result.exit_code == 2 and "--max-trace-size" in result.output and "above zero" in result.output


def test_a_duration_beyond_64_bit_ns_is_named(tmp_path):
    from conftest import kernel, write_trace

    write_trace(tmp_path / "run" / "rank0.json", [kernel("k", 1000, 2**62)], rank=0)
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "run"), "--db", str(tmp_path / "t.duckdb")])
    assert result.exit_code == 1
    assert f"duration {2**62} µs is beyond 64-bit nanoseconds" in result.output and "timestamp" not in result.output


@pytest.mark.parametrize("parquet", [False, True])
def test_error_lines_are_cut_at_500_characters(tmp_path, parquet):
    from conftest import kernel, write_trace

    from scaletrace.pipeline.common.oneline import MAX_MESSAGE_CHARS

    write_trace(tmp_path / "run" / "rank0.json", [kernel("n" * 5000, 1000, -5)], rank=0)
    target = ["--parquet", str(tmp_path / "pq")] if parquet else ["--db", str(tmp_path / "t.duckdb")]
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "run"), *target])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if "rank0.json" in line]
    assert lines, result.output
    assert all(len(line) <= len(str(tmp_path / "run" / "rank0.json")) + 2 + MAX_MESSAGE_CHARS + 10
                         for line in lines), [len(line) for line in lines]


@pytest.mark.parametrize("value", [str(2**63), "99999999999999999999", str(-(2**63) - 1)])
def test_a_bigint_parameter_beyond_64_bits_is_refused(small_db, value):
    result = CliRunner().invoke(main, ["query", "layouts", "--db", str(small_db), "-p", "world_size", value])
    assert result.exit_code == 1 and f"wants an integer from 1 to {2**63 - 1}, got '{value}'" in result.output
