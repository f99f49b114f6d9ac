"""Bad input: one line `PATH: reason`, exit 1, other files ingest, nothing already stored is lost."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, copy_db, cpu, kernel, query, write_trace
from scaletrace.cli import main
from scaletrace.pipeline import connect

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
    # issue 11, item 1: values that used to escape the worker with a traceback and stop the ingest
    "ts as the string NaN": (lambda: _raw_event(ts='"NaN"'), "rank5.json", "not a finite number"),
    "dur as the string sNaN": (lambda: _raw_event(dur='"sNaN"'), "rank5.json", "not a finite number"),
    "ts as the string Infinity": (lambda: _raw_event(ts='"-Infinity"'), "rank5.json", "not a finite number"),
    "ts 1e999999 (overflows Decimal)": (lambda: _raw_event(ts="1e999999"), "rank5.json", "beyond 64-bit"),
    "dur -1e999999": (lambda: _raw_event(dur="-1e999999"), "rank5.json", "negative duration"),
    "ProfilerStep with a 5,000-digit number": (
        lambda: _doc(GOOD + [cpu("ProfilerStep#" + "9" * 5000, 0, 200)]), "rank5.json", "5,000 digits is beyond 64"),
    # issue 11, item 10: int(Decimal("1e999990")) took 26 s before the range check
    "ts 1e999990 (quadratic int)": (lambda: _raw_event(ts="1e999990"), "rank5.json", "beyond 64-bit"),
}


def _raw_event(ts="1", dur="1") -> bytes:
    """One kernel event whose ts and dur are written as given (JSON text)."""
    return b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": %s, "dur": %s}]}' % (
        ts.encode(), dur.encode())


def test_bad_file_one_line_and_others_survive(fixtures_db, tmp_path):
    """Every bad file in one ingest, each in a run of its own beside a good trace, into a database
    that already holds the project's fixtures (a copy: the test writes to it): one line per bad
    file, naming it and its reason; the good traces and the runs stored before are kept."""
    db = copy_db(fixtures_db, tmp_path / "t.duckdb")
    before = query(db, "rank_breakdown")
    runs = tmp_path / "runs"
    bad = {}
    for i, case in enumerate(sorted(BAD_FILES)):
        make, name, reason = BAD_FILES[case]
        write_trace(runs / f"run{i:02}" / "rank0.json", GOOD, rank=0)
        bad[case] = runs / f"run{i:02}" / name
        bad[case].write_bytes(make())
    result = CliRunner().invoke(main, ["ingest", str(runs), "--db", str(db), "-q"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == len(BAD_FILES), lines
    for case, path in bad.items():
        (line,) = [line for line in lines if line.startswith(f"{path}: ")]
        assert BAD_FILES[case][2] in line, (case, line)
    with connect(db) as database:
        after = database.query("rank_breakdown")
        logged = dict(database.sql("SELECT path, status FROM ingest_log").rows())
    new = after.filter(after["run_id"].str.starts_with("run"))
    assert after.filter(~after["run_id"].str.starts_with("run")).equals(before), "earlier runs unchanged"
    assert new["run_id"].to_list() == [f"run{i:02}" for i in range(len(BAD_FILES))], "the good files ingested"
    assert new["rank"].to_list() == [0] * len(BAD_FILES)
    assert all(logged.get(str(path)) == "error" for path in bad.values()), logged


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
    assert result.stderr.strip() == f"{run / 'self.json'}: a symlink loop (the link leads back to itself)"
    assert query(db, "rank_breakdown")["rank"].to_list() == [0]


# --- issue 11: an adversarial pass ---------------------------------------------------------------

def _runs(root, names, events=GOOD):
    for name in names:
        write_trace(root / name / "rank0.json", events, rank=0)
    return root


def test_a_bad_value_costs_its_file_not_the_files_after_it(tmp_path):
    """Item 1: the exception used to escape future.result(): no later file (other runs too) was stored."""
    root = _runs(tmp_path / "runs", ["a", "b", "c", "d"])
    (root / "b" / "rank1.json").write_bytes(_raw_event(ts='"NaN"'))
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(root), "--db", str(db), "-q", "--workers", "2"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [f"{root / 'b' / 'rank1.json'}: event #0 (kernel 'k'): "
                                                  "ts or dur NaN is not a finite number"]
    assert sorted(query(db, "rank_breakdown")["run_id"].to_list()) == ["a", "b", "c", "d"]


def _explode(*args, **kwargs):
    raise LookupError("a bug nobody foresaw")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_any_exception_in_a_parse_is_that_files_line_with_its_type(tmp_path, monkeypatch, workers):
    """Item 1, the backstop at the worker boundary: whatever a parse raises names its type."""
    import importlib

    ingest_module = importlib.import_module("scaletrace.pipeline.execute.ingest")  # the package exports a function of that name
    root = _runs(tmp_path / "runs", ["a", "b"])
    monkeypatch.setattr(ingest_module, "extract", _explode)  # forked workers inherit it
    result = CliRunner().invoke(main, ["ingest", str(root), "--db", str(tmp_path / "t.duckdb"), "-q",
                                       "--workers", workers])
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert lines[:2] == [f"{root / r / 'rank0.json'}: could not be parsed (LookupError: a bug nobody foresaw)"
                         for r in ("a", "b")], lines
    assert lines[2:] == [f"{tmp_path / 't.duckdb'} holds no traces: nothing could be ingested (its ingest_log "
                         "table records why)"]


def test_a_huge_exponent_is_refused_before_int_decimal(tmp_path):
    """Item 10: the exponent is checked first; 1e999990 used to take ~26 s of CPU."""
    import time

    from scaletrace.pipeline.read.classify import DEFAULT_RULES
    from scaletrace.pipeline.execute.ingest import parse_file

    path = tmp_path / "rank0.json"
    path.write_bytes(_raw_event(ts="1e999990", dur="1e999990"))
    start = time.process_time()
    error = parse_file(str(path), None, DEFAULT_RULES, False).error
    assert "beyond 64-bit" in error
    assert time.process_time() - start < 1.0


@pytest.mark.parametrize("where", ["distributedInfo", "run.json"])
def test_a_claimed_world_size_costs_nothing(tmp_path, where):
    """Item 2: world_size 2e9 built set(range(2e9)) for the missing-ranks note (5 GB in 13 s).
    Under a 1.5 GB memory cap the note now comes at once."""
    from hostile import cli

    run = tmp_path / "run"
    doc = {"traceEvents": GOOD, "distributedInfo": {"rank": 0, "world_size": 2_000_000_000}}
    if where == "run.json":
        doc["distributedInfo"] = {"rank": 0}
        (run).mkdir()
        (run / "run.json").write_text(json.dumps({"world_size": 2_000_000_000}))
    write_trace(run / "rank0.json", doc["traceEvents"], **{"distributedInfo": doc["distributedInfo"]})
    result = cli("ingest", run, "--db", tmp_path / "t.duckdb", memory_bytes=1536 << 20, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ("1,999,999,999 of 2,000,000,000 ranks have no trace (ranks 1, 2, 3, 4, 5, 6, 7, 8, ...)"
            in result.stderr.replace("1999999999 of 2000000000", "1,999,999,999 of 2,000,000,000")), result.stderr


BAD_MANIFESTS = {
    "an over-long integer under an unknown key": (b'{"run_id": "x", "notes": ' + b"9" * 5000 + b"}",
                                                  "unknown key 'notes'"),
    "nesting 100,000 deep": (b'{"labels": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_000 + b"}",
                             "nested too deeply"),
    "a FIFO": (None, "not a regular file (a FIFO)"),
    "a directory": ("dir", "not a regular file (a directory)"),
}


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_a_bad_run_json_costs_its_run_only(tmp_path, case):
    """Item 3: a traceback before any file was written, and every other run of the command lost.
    Now: one line for the run, its traces skipped (logged), the other runs land."""
    import os

    root = _runs(tmp_path / "runs", ["a", "b", "c"])
    content, reason = BAD_MANIFESTS[case]
    manifest = root / "b" / "run.json"
    if content is None:
        os.mkfifo(manifest)
    elif content == "dir":
        manifest.mkdir()
    else:
        manifest.write_bytes(content)
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(root), "--db", str(db), "-q"])
    assert "Traceback" not in result.output
    if case.startswith("an over-long integer"):  # usable: the unknown key is kept, the run lands
        assert result.exit_code == 0, result.output
        assert sorted(query(db, "rank_breakdown")["run_id"].to_list()) == ["a", "c", "x"]
        return
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{manifest}: ") and reason in lines[0], lines
    assert lines[0].endswith("the run's 1 trace skipped")
    assert sorted(query(db, "rank_breakdown")["run_id"].to_list()) == ["a", "c"]
    logged = CliRunner().invoke(main, ["sql", "SELECT path, status FROM ingest_log ORDER BY path", "--db", str(db),
                                       "--format", "csv"]).output
    assert f"{root / 'b' / 'rank0.json'},error" in logged


def test_an_unreadable_run_json_costs_its_run_only(tmp_path):
    """Item 3: no read permission on run.json (as a user: root reads everything)."""
    from hostile import cli

    root = _runs(tmp_path / "runs", ["a", "b"])
    tmp_path.chmod(0o755)
    manifest = root / "b" / "run.json"
    manifest.write_text('{"run_id": "secret"}')
    manifest.chmod(0)
    result = cli("ingest", root, "--db", tmp_path / "t.duckdb", "-q", as_user=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [f"{manifest}: cannot read (Permission denied); "
                                                  "the run's 1 trace skipped"]
    assert query(tmp_path / "t.duckdb", "rank_breakdown")["run_id"].to_list() == ["a"]


def _runs_table(db, columns="run_id, workload, world_size, updated_at"):
    out = CliRunner().invoke(main, ["sql", f"SELECT {columns} FROM runs ORDER BY run_id", "--db", str(db),
                                    "--format", "json"])
    return json.loads(out.output)


def test_editing_run_json_alone_updates_the_run(tmp_path):
    """Item 8: the traces are unchanged and skipped, so the runs row kept the old run.json."""
    run = tmp_path / "run"
    for rank in (0, 1):
        write_trace(run / f"rank{rank}.json", GOOD, rank=rank)
    (run / "run.json").write_text(json.dumps({"workload": "before", "world_size": 2}))
    db = tmp_path / "t.duckdb"
    args = ["ingest", str(run), "--db", str(db)]
    assert CliRunner().invoke(main, args).exit_code == 0
    first = _runs_table(db)
    assert CliRunner().invoke(main, args).exit_code == 0
    assert _runs_table(db) == first, "nothing changed: the row is not rewritten"
    (run / "run.json").write_text(json.dumps({"workload": "after", "world_size": 3}))
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0 and "0 ingested, 2 unchanged" in result.stderr
    assert "1 of 3 ranks have no trace (ranks 2)" in result.stderr
    assert [(r["workload"], r["world_size"]) for r in _runs_table(db)] == [("after", 3)]
    (run / "run.json").unlink()
    assert CliRunner().invoke(main, args).exit_code == 0
    assert [(r["workload"], r["world_size"]) for r in _runs_table(db)] == [(None, None)]


def test_editing_the_run_id_or_ranks_in_run_json_moves_the_traces(tmp_path):
    """Item 8: a new run_id left the traces (and the step log) under the old one."""
    run = tmp_path / "run"
    write_trace(run / "a.json", GOOD)
    write_trace(run / "b.json", GOOD)
    (run / "rank0.steps.jsonl").write_text('{"step": 1, "start_ns": 0, "dur_ns": 100}\n')
    (run / "run.json").write_text(json.dumps({"run_id": "old", "ranks": {"a.json": 0, "b.json": 1}}))
    db = tmp_path / "t.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "-q"]).exit_code == 0
    (run / "run.json").write_text(json.dumps({"run_id": "new", "ranks": {"a.json": 1, "b.json": 0}}))
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "-q"])
    assert result.exit_code == 0, result.output
    ranks = CliRunner().invoke(main, ["sql", "SELECT run_id, rank, regexp_extract(path, '[ab].json') AS f FROM traces "
                                      "UNION ALL SELECT run_id, rank, 'steps' FROM step_log ORDER BY ALL",
                                      "--db", str(db), "--format", "csv"]).output
    assert ranks.splitlines() == ["run_id,rank,f", "new,0,b.json", "new,0,steps", "new,1,a.json"]
    assert [r["run_id"] for r in _runs_table(db)] == ["new"]


def test_editing_or_removing_a_step_log_updates_its_rows(tmp_path):
    """Item 8, side files: an edited step log replaces its rows; a removed one takes them away."""
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    steps = run / "rank0.steps.jsonl"
    steps.write_text('{"step": 1, "start_ns": 0, "dur_ns": 100}\n')
    db = tmp_path / "t.duckdb"
    count = ["sql", "SELECT count(*) AS n, sum(dur_ns)::BIGINT AS ns FROM step_log", "--db", str(db), "--format", "json"]
    assert CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "-q"]).exit_code == 0
    steps.write_text('{"step": 1, "start_ns": 0, "dur_ns": 100}\n{"step": 2, "start_ns": 100, "dur_ns": 50}\n')
    assert CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "-q"]).exit_code == 0
    assert json.loads(CliRunner().invoke(main, count).output) == [{"n": 2, "ns": 150}]
    steps.unlink()
    assert CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "-q"]).exit_code == 0
    assert json.loads(CliRunner().invoke(main, count).output) == [{"n": 0, "ns": None}]


def test_side_files_must_be_regular_files(tmp_path):
    """Item 6: a FIFO step log hung for ever holding the write lock; /dev/zero as a power log ate
    3 GB in 5 s.  Now each is one line (in a subprocess with a timeout and a 1.5 GB memory cap)."""
    import os

    from hostile import cli

    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    os.mkfifo(run / "rank0.steps.jsonl")
    (run / "rank0.power.jsonl").symlink_to("/dev/zero")
    result = cli("ingest", run, "--db", tmp_path / "t.duckdb", "-q", memory_bytes=1536 << 20, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"{run / 'rank0.power.jsonl'}: power log not ingested: not a regular file (a character device)",
        f"{run / 'rank0.steps.jsonl'}: steps log not ingested: not a regular file (a FIFO)"]
    assert query(tmp_path / "t.duckdb", "rank_breakdown")["rank"].to_list() == [0]


def test_side_files_have_a_size_limit(tmp_path, monkeypatch):
    from scaletrace.pipeline.common import limits

    monkeypatch.setattr(limits, "MAX_SIDE_FILE_BYTES", 1000)
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    (run / "rank0.steps.jsonl").write_text('{"step": 1, "start_ns": 0, "dur_ns": 100}\n' * 100)
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(tmp_path / "t.duckdb"), "-q"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"{run / 'rank0.steps.jsonl'}: steps log not ingested: 4.1 KiB, over the side-file size limit of 1000 bytes"]


def test_step_log_values_duckdb_rejects_are_one_line(tmp_path):
    """Item 11: DuckDB's three-line message with a caret for 2**64-1 and for rank 3,000,000,000."""
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    (run / "rank0.steps.jsonl").write_text('{"step": %d, "start_ns": 0, "dur_ns": 100}\n' % (2**64 - 1))
    (run / "rank3000000000.steps.jsonl").write_text('{"step": 1, "start_ns": 0, "dur_ns": 100}\n')
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(tmp_path / "t.duckdb"), "-q"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == (f"{run / 'rank0.steps.jsonl'}: steps log not ingested: line 1: "
                        "Expected `int` <= 9007199254740992 - at `$.step`")  # issue 21: 2^53
    assert lines[1].startswith(f"{run / 'rank3000000000.steps.jsonl'}: steps log not ingested: Conversion Error")


def test_unreadable_directories_are_said_and_exit_1(tmp_path):
    """Item 7: a directory the user cannot read was skipped silently (exit 0, its runs missing)."""
    from hostile import cli

    root = _runs(tmp_path / "runs", ["a", "b"])
    tmp_path.chmod(0o755)
    (root / "b").chmod(0)
    hidden = _runs(tmp_path / "hidden", ["c"])
    hidden.chmod(0)
    db = tmp_path / "db" / "t.duckdb"
    db.parent.mkdir(mode=0o777)
    db.parent.chmod(0o777)
    try:
        result = cli("ingest", root, hidden, "--db", db, "-q", as_user=True)
    finally:
        (root / "b").chmod(0o755)
        hidden.chmod(0o755)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"{root / 'b'}: cannot read directory (Permission denied); its traces are not ingested",
        f"{hidden}: cannot read directory (Permission denied); its traces are not ingested"]
    assert query(db, "rank_breakdown")["run_id"].to_list() == ["a"]


def test_a_run_directory_of_symlinks_is_the_directory_named(tmp_path):
    """Item 9: traces linked from elsewhere were split by their targets' directories and the
    link directory's run.json was ignored."""
    store = tmp_path / "store"
    write_trace(store / "x" / "trace-a.json", GOOD, rank=0)
    write_trace(store / "y" / "trace-b.json", GOOD, rank=1)
    run = tmp_path / "linked"
    run.mkdir()
    (run / "rank0.json").symlink_to(store / "x" / "trace-a.json")
    (run / "rank1.json").symlink_to(store / "y" / "trace-b.json")
    (run / "run.json").write_text(json.dumps({"run_id": "from-links", "world_size": 2}))
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db)])
    assert result.exit_code == 0, result.output
    rows = CliRunner().invoke(main, ["sql", "SELECT t.run_id, rank, path, source_dir FROM traces t JOIN runs USING "
                                     "(run_id) ORDER BY rank", "--db", str(db), "--format", "csv"]).output
    assert rows.splitlines()[1:] == [f"from-links,{r},{run / f'rank{r}.json'},{run}" for r in (0, 1)]


# --- item 12: tracebacks instead of one line -----------------------------------------------------

def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("target", ["-o", "--png"])
def test_report_into_a_read_only_directory_is_one_line(fixtures_db, tmp_path, target):
    from hostile import cli

    tmp_path.chmod(0o755)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    out = ["-o", locked / "report.html"] if target == "-o" else ["-o", tmp_path / "r.html", "--png", locked / "png"]
    result = cli("report", "--db", fixtures_db, *out, "-q", as_user=True, timeout=300)
    assert result.returncode == 1
    assert _one_error_line(result.stderr) == f"error: cannot write {out[-1]}: Permission denied"


def test_export_under_a_regular_file_is_one_line(fixtures_db, tmp_path):
    (tmp_path / "file").write_text("x")
    result = CliRunner().invoke(main, ["export", "--db", str(fixtures_db), "--parquet", str(tmp_path / "file" / "pq")])
    assert result.exit_code == 1
    assert _one_error_line(result.stderr) == f"error: cannot write {tmp_path / 'file' / 'pq'}: Not a directory"


def _foreign_databases(tmp_path, fixtures_db):
    import duckdb

    truncated = tmp_path / "truncated.duckdb"
    truncated.write_bytes(fixtures_db.read_bytes()[:300_000])
    other = tmp_path / "other-columns.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.execute("CREATE TABLE traces (path VARCHAR, colour VARCHAR)")
    con.close()
    unrelated = tmp_path / "unrelated.duckdb"
    con = duckdb.connect(str(unrelated))
    con.execute("CREATE TABLE customers (id INTEGER, name VARCHAR)")
    con.close()
    # where the cut falls decides whether DuckDB fails to open the file or to read it: either is one line
    return {"truncated": (truncated, ("cannot be used as a scaletrace database (IO Error: ", "cannot open (IO Error: ")),
            "other columns": (other, "not a scaletrace database of this version: table traces has columns "
                                     "scaletrace does not write (colour VARCHAR)"),
            "unrelated": (unrelated, "not a scaletrace database (it holds other tables: customers); give a new "
                                     "file or one scaletrace wrote")}


@pytest.mark.parametrize("case", ["truncated", "other columns", "unrelated"])
def test_ingest_refuses_a_database_that_is_not_scaletraces(fixtures_db, tmp_path, case):
    """A half-truncated file or tables with other columns gave a traceback; an unrelated DuckDB
    file silently gained 15 tables.  Each is refused with one line, and the file is left as it was."""
    db, reason = _foreign_databases(tmp_path, fixtures_db)[case]
    before = db.read_bytes()
    result = CliRunner().invoke(main, ["ingest", str(FIXTURES / "micro-2rank"), "--db", str(db), "-q"])
    assert result.exit_code == 1
    reasons = reason if isinstance(reason, tuple) else (reason,)
    assert _one_error_line(result.stderr).startswith(tuple(f"error: {db}: {r}" for r in reasons))
    assert db.read_bytes() == before


def test_rules_with_a_non_string_pattern_is_one_line(tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"side": "gpu", "field": "name", "match": "contains", "pattern": 5, "kind": "comm"}]))
    result = CliRunner().invoke(main, ["ingest", str(FIXTURES / "micro-2rank"), "--db", str(tmp_path / "t.duckdb"),
                                       "--rules", str(rules)])
    assert result.exit_code == 1
    assert _one_error_line(result.stderr).endswith("every field is a string")


def test_a_full_disk_stops_with_the_first_error(tmp_path):
    """A write that fails (here a file-size limit, as a full disk does) is one line that names
    the COMMIT's error, not the ROLLBACK's "no transaction is active"; the files stored before stay."""
    import resource
    import signal
    import subprocess
    import sys

    runs = tmp_path / "runs"
    for i in range(6):
        _runs(runs, [f"r{i}"], [kernel(f"gemm_{j}", j * 10, 5) for j in range(3000)])
    db = tmp_path / "t.duckdb"

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        # WAL bytes: the schema and the stored definitions, then ~0.5 MB per trace (1 MB stores one, 2 MB three)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_500_000, 1_500_000))

    result = subprocess.run([sys.executable, "-m", "scaletrace.cli", "ingest", str(runs), "--db", str(db), "-q",
                             "--workers", "1"], preexec_fn=small_files, capture_output=True, text=True, timeout=120)
    line = _one_error_line(result.stderr)
    assert result.returncode == 1 and "Failed to commit" in line and "File too large" in line, line
    assert "no transaction is active" not in line and line.endswith("re-run when the database can be written)")
    stored = query(db, "rank_breakdown")["run_id"].to_list()
    assert 0 < len(stored) < 6
    assert CliRunner().invoke(main, ["ingest", str(runs), "--db", str(db), "-q"]).exit_code == 0
    assert len(query(db, "rank_breakdown")) == 6


# --- item 15: `scaletrace sql` reads the database and nothing else --------------------------------

@pytest.fixture(scope="module")
def export_dir(fixtures_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "pq"
    assert CliRunner().invoke(main, ["export", "--db", str(fixtures_db), "--parquet", str(out)]).exit_code == 0
    return out


@pytest.mark.parametrize("source", ["duckdb", "parquet"])
@pytest.mark.parametrize("statement", [
    "ATTACH '{victim}' AS v (READ_WRITE)",
    "COPY (SELECT 1 AS x) TO '{victim}'",
    "COPY (SELECT 1 AS x) TO '{inside}'",
    "EXPORT DATABASE '{victim}'",
    "SELECT * FROM read_csv('{secret}')",
    "SELECT * FROM read_text('{secret}')",
    "SET enable_external_access = true",
    "LOAD httpfs",
])
def test_sql_touches_no_other_file(fixtures_db, export_dir, tmp_path, source, statement):
    """ATTACH ... (READ_WRITE) and COPY ... TO could change or destroy other files."""
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    victim = tmp_path / "victim.duckdb"
    db = fixtures_db if source == "duckdb" else export_dir
    text = statement.format(victim=victim, secret=secret, inside=export_dir / "evil.csv")
    result = CliRunner().invoke(main, ["sql", text, "--db", str(db)])
    assert result.exit_code == 1, (text, result.output)
    _one_error_line(result.stderr)
    assert not victim.exists() and not (export_dir / "evil.csv").exists()
    ok = CliRunner().invoke(main, ["sql", "SELECT count(*) AS n FROM traces", "--db", str(db), "--format", "json"])
    assert json.loads(ok.output) == [{"n": 4}]


# --- item 16: terminal escape sequences in names -------------------------------------------------

EVIL = "gemm\x1b[31mRED\x1b[0m\x1b]0;owned\x07\x9b2J\nnext"


@pytest.fixture(scope="module")
def evil_db(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evil")
    write_trace(tmp / "run" / "rank0.json", [kernel(EVIL, 0, 10)], rank=0)
    db = tmp / "t.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(tmp / "run"), "--db", str(db), "-q"]).exit_code == 0
    return db


@pytest.mark.parametrize("fmt", ["table", "line"])
def test_escape_sequences_are_shown_escaped_on_a_terminal(evil_db, fmt):
    result = CliRunner().invoke(main, ["sql", "SELECT name FROM device_events", "--db", str(evil_db), "--format", fmt])
    assert result.exit_code == 0
    assert not any(c in result.output for c in "\x1b\x07\x9b"), repr(result.output)
    assert "gemm\\x1b[31mRED\\x1b[0m\\x1b]0;owned\\x07\\x9b2J\\nnext" in result.output


def test_csv_and_json_keep_the_exact_name(evil_db):
    import csv
    import io

    args = ["sql", "SELECT name FROM device_events", "--db", str(evil_db), "--format"]
    as_csv = CliRunner().invoke(main, args + ["csv"]).output
    assert list(csv.reader(io.StringIO(as_csv, newline="")))[1] == [EVIL]
    assert json.loads(CliRunner().invoke(main, args + ["json"]).output) == [{"name": EVIL}]


def test_error_lines_show_escape_sequences_escaped(tmp_path):
    run = tmp_path / "run\x1b[2J"
    write_trace(run / "rank0.json", [kernel("k", 0, -5)], rank=0)
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(tmp_path / "t.duckdb"), "-q"])
    assert result.exit_code == 1 and "\x1b" not in result.stderr
    assert "run\\x1b[2J" in result.stderr


# --- item 4: memory bounded by bytes: a limit on the decompressed size -----------------------------

def _gzip_bomb(path, decompressed_bytes: int) -> int:
    """A .gz of whitespace (members of 16 MiB each): a few MB on disk, ``decompressed_bytes`` of JSON."""
    member = gzip.compress(b" " * (16 << 20), compresslevel=9)
    path.write_bytes(member * (decompressed_bytes // (16 << 20)))
    return path.stat().st_size


def test_a_gzip_bomb_is_refused_past_the_limit_in_bounded_memory(tmp_path):
    """A 12 MB .gz of whitespace would have exhausted a 24 GB machine: nothing capped the
    decompressed size.  Here 2 GiB of whitespace under a 1 GiB memory cap, --max-trace-size 64M."""
    from hostile import cli

    root = _runs(tmp_path / "runs", ["a", "c"])
    bomb = root / "b" / "rank0.json.gz"
    bomb.parent.mkdir()
    assert _gzip_bomb(bomb, 2 << 30) < 8 << 20
    result = cli("ingest", root, "--db", tmp_path / "t.duckdb", "-q", "--max-trace-size", "64M",
                 memory_bytes=1 << 30, timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        f"{bomb}: decompresses to more than the trace size limit (--max-trace-size) of 64 MiB"]
    assert sorted(query(tmp_path / "t.duckdb", "rank_breakdown")["run_id"].to_list()) == ["a", "c"]


def test_a_trace_over_the_limit_is_one_line(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    big = write_trace(run / "rank1.json", [kernel(f"k{i}", i, 1) for i in range(20_000)], rank=1)
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(tmp_path / "t.duckdb"), "-q",
                                       "--max-trace-size", "1M"])
    assert result.exit_code == 1
    size = big.stat().st_size / (1 << 20)
    assert result.stderr.strip().splitlines() == [
        f"{big}: cannot read file ({size:.3g} MiB, over the trace size limit (--max-trace-size) of 1 MiB)"]
    assert query(tmp_path / "t.duckdb", "rank_breakdown")["rank"].to_list() == [0]


def test_the_default_limit_follows_the_machines_memory(tmp_path, monkeypatch):
    """Default: a sixteenth of physical memory; the ingest applies it when no limit is given."""
    from scaletrace.pipeline.common import limits

    assert limits.default_max_trace_bytes() == max(256 << 20, limits.physical_memory_bytes() // 16)
    monkeypatch.setattr(limits, "physical_memory_bytes", lambda: 16 * (300 << 20))  # a 4.7 GiB machine
    assert limits.default_max_trace_bytes() == 300 << 20
    bomb = tmp_path / "run" / "rank0.json.gz"
    bomb.parent.mkdir()
    _gzip_bomb(bomb, 320 << 20)
    result = CliRunner().invoke(main, ["ingest", str(bomb.parent), "--db", str(tmp_path / "t.duckdb"), "-q"])
    assert result.exit_code == 1
    assert "decompresses to more than the trace size limit (--max-trace-size) of 300 MiB" in result.stderr


def test_max_trace_size_wants_a_size():
    result = CliRunner().invoke(main, ["ingest", "x", "--max-trace-size", "lots"])
    assert result.exit_code == 2 and "not a size" in result.stderr


def test_a_path_that_is_a_device_is_one_line(tmp_path):
    result = CliRunner().invoke(main, ["ingest", "/dev/zero", "--db", str(tmp_path / "t.duckdb"), "-q"])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == "/dev/zero: not a regular file or a directory: a character device; not ingested"
