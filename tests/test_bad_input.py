"""Bad input: one line `PATH: reason`, exit 1, other files ingest, nothing already stored is lost."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, kernel, query, write_trace
from scaletrace.cli import main

GOOD = [kernel("gemm", 0, 100), kernel("ncclKernel_AllReduce_x", 50, 100, stream=20)]


def _doc(events, rank=0):
    return json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank}}).encode()


BAD_FILES = {
    "truncated gzip": (lambda: gzip.compress(_doc(GOOD))[:-20], "rank5.json.gz", "gzip"),
    "truncated JSON": (lambda: _doc(GOOD)[:-15], "rank5.json", "truncated"),
    "non-trace JSON": (lambda: b'{"hello": "world"}', "rank5.json", "no traceEvents"),
    "wrong top-level type": (lambda: b'"just a string"', "rank5.json", "not a Chrome/Kineto trace"),
    "empty file": (lambda: b"", "rank5.json", "empty file"),
    "invalid UTF-8": (lambda: _doc([kernel("gemm\udcff", 0, 1)]).replace(b"\\udcff", b"\xff\xfe"),
                      "rank5.json", "invalid UTF-8"),
    "integer beyond 64 bits": (lambda: _doc([kernel("gemm", 10**30, 5)]), "rank5.json", "beyond 64"),
    "correlation beyond 64 bits": (lambda: _doc([kernel("gemm", 1, 5, corr=2**70)]), "rank5.json", "beyond 64"),
    "missing dur": (lambda: _doc([{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]), "rank5.json", "missing dur"),
    "wrong-typed field": (lambda: _doc([{"ph": "X", "cat": "kernel", "name": 5, "ts": 1, "dur": 1}]),
                          "rank5.json", "Expected `str"),
    "NaN field": (lambda: b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": 1}]}',
                  "rank5.json", "malformed"),
    "negative duration": (lambda: _doc([kernel("gemm", 10, -5)]), "rank5.json", "negative duration"),
    "duplicate rank": (lambda: _doc(GOOD, rank=0), "rank0_copy.json", "duplicate rank 0"),
}


@pytest.fixture()
def populated(tmp_path):
    """A database that already holds the project's fixtures, and a run with one good trace."""
    db = tmp_path / "t.duckdb"
    micro = [str(p) for p in sorted(FIXTURES.glob("micro-*"))]
    assert CliRunner().invoke(main, ["ingest", *micro, "--db", str(db), "-q"]).exit_code == 0
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    return db, run


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_one_line_and_others_survive(case, populated):
    db, run = populated
    before = query(db, "rank_breakdown")
    make, name, reason = BAD_FILES[case]
    bad = run / name
    bad.write_bytes(make())
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "-q"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{bad}: ") and reason in lines[0], lines[0]
    assert "Traceback" not in result.output
    after = query(db, "rank_breakdown")
    assert after.filter(after["run_id"] != "run").equals(before), "earlier runs unchanged"
    assert after.filter(after["run_id"] == "run")["rank"].to_list() == [0], "the good file ingested"
    with_log = CliRunner().invoke(main, ["sql", "SELECT status FROM ingest_log WHERE path = '%s'" % bad,
                                         "--db", str(db), "--format", "csv"])
    assert "error" in with_log.output


def test_several_rankless_traces_is_an_error_naming_the_fix(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "a.json", GOOD)
    write_trace(run / "b.json", GOOD)
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(tmp_path / "t.duckdb"), "-q"])
    assert result.exit_code == 1
    assert "name the files rank<N>.json" in result.stderr and '"ranks"' in result.stderr


def test_missing_path_and_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "nope"), str(tmp_path / "empty"),
                                       "--db", str(tmp_path / "t.duckdb"), "-q"])
    assert result.exit_code == 1
    assert "no such file or directory" in result.stderr
    assert "no trace files" in result.stderr


def test_manifest_with_wrong_type_names_the_key(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    (run / "run.json").write_text(json.dumps({"world_size": "eight"}))
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(tmp_path / "t.duckdb"), "-q"])
    assert result.exit_code == 1
    assert "key 'world_size'" in result.stderr


def test_manifest_unknown_key_warns_and_is_kept(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    (run / "run.json").write_text(json.dumps({"run_id": "named", "colour": "blue"}))
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db)])
    assert result.exit_code == 0
    assert "unknown key 'colour'" in result.stderr
    out = CliRunner().invoke(main, ["sql", "SELECT run_id, manifest->>'colour' AS c FROM runs",
                                    "--db", str(db), "--format", "json"])
    assert json.loads(out.output) == [{"run_id": "named", "c": "blue"}]


def test_not_a_database(tmp_path):
    bogus = tmp_path / "bogus.duckdb"
    bogus.write_text("not a database")
    result = CliRunner().invoke(main, ["query", "rank_breakdown", "--db", str(bogus)])
    assert result.exit_code == 1 and result.stderr.startswith("error: ")


def test_zero_durations_are_kept_with_a_note(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD + [kernel("empty_kernel", 300, 0)], rank=0)
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(tmp_path / "t.duckdb")])
    assert result.exit_code == 0
    assert "1 device events of zero duration kept" in result.stderr


def test_a_rank_missing_from_a_run_is_named(tmp_path):
    run = tmp_path / "run"
    for rank in (0, 2):  # world size 3 (run.json), rank 1 absent
        write_trace(run / f"rank{rank}.json", GOOD, rank=rank)
    (run / "run.json").write_text(json.dumps({"world_size": 3}))
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(tmp_path / "t.duckdb")])
    assert result.exit_code == 0
    assert "1 of 3 ranks have no trace (ranks 1)" in result.stderr


def test_symlink_loops_do_not_hang(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    (run / "loop").symlink_to(run, target_is_directory=True)  # a directory cycle
    (run / "self.json").symlink_to(run / "self.json")  # a file that points at itself
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), str(run / "self.json"), "--db", str(db), "-q"])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"{run / 'self.json'}: broken symlink or symlink loop"
    assert query(db, "rank_breakdown")["rank"].to_list() == [0]
