"""A runaway reader and the database's lock: `sql` / `query` time limits, Ctrl-C, an ingest that finds
the database held, and query parameters out of range (docs/commands.md, "sql" and "query")."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, holds_open
from scaletrace import queries
from scaletrace.cli import main

# A cross join of 10^18 rows: DuckDB would count for hours.
CROSS_JOIN = "SELECT count(*) FROM range(1000000000) a, range(1000000000) b"
BIGINT_MAX = 2**63 - 1


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "scaletrace.cli", *args]


def test_a_runaway_cross_join_stops_at_its_time_limit_in_one_line(small_db):
    limit_s = 1
    started = time.monotonic()
    result = subprocess.run(_cli("sql", CROSS_JOIN, "--db", str(small_db), "--timeout", str(limit_s)),
                            capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    # one line: the limit, how to raise it, and how to turn it off
    assert result.stderr == (f"error: stopped after {limit_s} s, the time limit "
                             "(--timeout SECONDS to change it, 0 for none)\n")
    assert elapsed < limit_s + 10  # start-up (imports, a loaded machine) + the limit, not the join


# The command line with one more query file, zz_runaway (its text: argv[1]), as the loader's.
RUNAWAY_QUERY_FILE = """
import sys
from scaletrace import queries
text, real = sys.argv.pop(1), queries.load
queries.load = lambda name: queries.parse(text, queries.QUERY_DIR / "zz_runaway.sql") if name == "zz_runaway" else real(name)
from scaletrace.cli import main
main()
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the reader open the database")
@pytest.mark.parametrize(("verb", "delay_s"), [("sql", 0.0), ("sql", 0.3), ("sql", 2.0), ("query", 2.0)])
def test_ctrl_c_stops_an_unlimited_runaway_query_at_once(small_db, verb, delay_s):
    """Ctrl-C just after the file is open (while its definitions are registered: ~1 s on a loaded
    machine) or with the cross join running: one line, 130, within 3 s."""
    # --timeout 0: no limit, so only the interrupt can end it.  `query` runs a query file holding the
    # cross join (as one a user added to queries/ would), given to the loader in the subprocess.
    if verb == "query":
        text = f"-- name: zz_runaway\n-- description: a runaway cross join\n{CROSS_JOIN}\n"
        command = [sys.executable, "-c", RUNAWAY_QUERY_FILE, text, "query", "zz_runaway"]
    else:
        command = _cli("sql", CROSS_JOIN)
    proc = subprocess.Popen([*command, "--db", str(small_db), "--timeout", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    holds_open(proc.pid, small_db)
    time.sleep(delay_s)
    assert proc.poll() is None, proc.communicate()
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    stopped_s = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert err == "interrupted\n" and out == ""
    assert stopped_s < 3, stopped_s


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the reader open the database")
def test_an_ingest_names_the_runaway_reader_and_proceeds_when_its_limit_expires(small_db, tmp_path):
    import shutil

    db = tmp_path / "t.duckdb"
    shutil.copy(small_db, db)
    # The reader is a process of its own (DuckDB's lock is between processes); the two ingests run here,
    # in this process, at once after it holds the database: its limit need only outlast their start.
    limit_s = 6
    reader = subprocess.Popen(_cli("sql", CROSS_JOIN, "--db", str(db), "--timeout", str(limit_s)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ingest = ["ingest", str(FIXTURES / "micro-cpu-gloo"), "--db", str(db), "-q"]
    try:
        holds_open(reader.pid, db)
        holder = f"process {reader.pid} (scaletrace sql)"
        started = time.monotonic()
        # --wait 0: one line naming the reader, exit 1
        at_once = CliRunner().invoke(main, [*ingest, "--wait", "0"])
        assert reader.poll() is None, "the reader ended before the ingests found it holding the database"
        # the default: a line naming the reader, then the ingest once the reader's limit stopped it
        waiting = CliRunner().invoke(main, ingest)
        elapsed = time.monotonic() - started
        assert reader.wait(timeout=60) == 1
    finally:
        reader.kill()
        reader.wait()
    assert at_once.exit_code == 1, at_once.output
    assert at_once.stderr == f"error: {db}: in use by {holder}; try again when it has finished\n"
    assert f"stopped after {limit_s} s, the time limit" in reader.stderr.read()
    assert waiting.exit_code == 0, waiting.output
    assert waiting.stderr == f"{db}: waiting up to 300 s for {holder} to release the database\n"
    assert elapsed < limit_s + 20  # the reader's limit, not the ingest's 300 s
    from scaletrace import connect

    with connect(db) as database:  # the ingest did land
        assert "micro-cpu-gloo" in database.sql("SELECT run_id FROM runs")["run_id"].to_list()


def test_a_reader_finding_the_database_held_names_the_holder(small_db):
    import duckdb

    from scaletrace import DatabaseError
    from scaletrace.pipeline.store.schema import connect_waiting, lock_holder

    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; con = duckdb.connect(sys.argv[1]); "
                               "print('open', flush=True); sys.stdin.read()", str(small_db)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "open\n"
        with pytest.raises(duckdb.IOException) as caught:
            duckdb.connect(str(small_db), read_only=True)
        # the program's name (no scaletrace verb here): python3.11 or the like
        assert lock_holder(caught.value) == f"process {holder.pid} ({Path(sys.executable).name})"
        with pytest.raises(DatabaseError, match=rf"in use by process {holder.pid} \(.*\) for more than 0.3 s"):
            connect_waiting(small_db, read_only=True, wait_s=0.3)
    finally:
        holder.kill()
        holder.wait()


def test_one_limit_for_every_statement_of_a_call(small_db):
    """A call that runs several statements (query: the known-values check, the shared run_metrics,
    the query) holds the database no longer than the limit in all; the CLI's `query` puts its notes
    in the same limit."""
    from scaletrace import connect
    from scaletrace.pipeline.store.db import QueryTimeout

    limit_s, spent_s = 2.0, 1.5
    with connect(small_db, timeout_s=limit_s) as database:
        with database.time_limit():
            time.sleep(spent_s)  # the call's earlier statements
            started = time.monotonic()
            with pytest.raises(QueryTimeout):
                database.sql(CROSS_JOIN)
        assert time.monotonic() - started < limit_s - spent_s + 0.5 < limit_s  # what was left, not a new limit
        assert database.sql("SELECT 42 AS n")["n"].item() == 42  # the next call has its own limit


AT_LEAST_1 = f"an integer from 1 to {BIGINT_MAX}"  # BIGINT 1.. in the headers of layouts, op_shape_efficiency


@pytest.mark.parametrize(("query", "param", "value", "what"), [
    ("layouts", "world_size", "1e20", "only this GPU count"),  # a float's notation, and beyond 64 bits
    ("layouts", "world_size", str(BIGINT_MAX + 1), "only this GPU count"),  # just past BIGINT
    ("layouts", "world_size", "-8", "only this GPU count"),  # negative: a GPU count is at least 1
    ("layouts", "world_size", "0", "only this GPU count"),
    ("layouts", "world_size", "eight", "only this GPU count"),  # not a number
    ("layouts", "world_size", "1.5", "only this GPU count"),
    ("op_shape_efficiency", "top_n", "0", "rows per run"),
    ("op_shape_efficiency", "top_n", str(-(2**63) - 1), "rows per run"),
])
def test_a_parameter_out_of_range_is_one_sentence(small_db, query, param, value, what):
    result = CliRunner().invoke(main, ["query", query, "--db", str(small_db), "-p", param, value])
    assert result.exit_code == 1, result.output
    line = result.output
    assert line.count("\n") == 1 and line.startswith(f"error: parameter {param} of query '{query}'"), line
    assert what in line and AT_LEAST_1 in line and repr(value) in line, line
    assert not any(sql_type in line for sql_type in ("BIGINT", "INT64", "VARCHAR", "Conversion Error")), line


def test_the_python_api_says_the_same(small_db):
    from scaletrace import connect

    with connect(small_db) as database:
        for value in (10**20, -1, True, 4.0):
            with pytest.raises(queries.QueryError, match=rf"world_size .* wants {AT_LEAST_1}, got {value!r}$"):
                database.query("layouts", world_size=value)
        assert database.query("layouts", world_size=BIGINT_MAX).is_empty()  # the top of the range binds


def test_a_declared_range_is_kept_and_a_wrong_one_refused(tmp_path):
    path = tmp_path / "pct.sql"
    q = queries.parse("-- name: pct\n-- description: d\n-- param: p BIGINT 0..100 optional; a percent\n"
                      "SELECT $p AS p\n", path)
    assert q.params["p"].bounds == (0, 100) and q.params["p"].description == "optional; a percent"
    assert queries.bind(q, {"p": "100"}) == {"p": 100} and queries.bind(q, {"p": 0}) == {"p": 0}
    for outside in ("101", "-1"):
        with pytest.raises(queries.QueryError, match=r"^parameter p of query 'pct' — a percent — wants an integer "
                                                     rf"from 0 to 100, got '{outside}'$"):
            queries.bind(q, {"p": outside})
    for header in ("p VARCHAR 0..100 text", "p BIGINT 5..1 reversed", f"p BIGINT 0..{2**64} too wide"):
        with pytest.raises(queries.QueryError, match="a range"):
            queries.parse(f"-- name: pct\n-- description: d\n-- param: {header}\nSELECT $p\n", path)
