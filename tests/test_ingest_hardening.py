"""Issue 21, items 1-9: inputs that crashed the ingest, poisoned the database for every run, or
lost work.  Each test names the item; each bad input costs one line naming its file."""

from __future__ import annotations

import json
import os
import signal

import pytest
from click.testing import CliRunner

from conftest import kernel, query, write_trace
from scaletrace.cli import main
from scaletrace.pipeline import connect

GOOD = [kernel("gemm", 0, 100), kernel("ncclKernel_AllReduce_x", 50, 100, stream=20)]


def _ingest(*args):
    return CliRunner().invoke(main, ["ingest", *map(str, args), "-q"])


def _lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def _nested(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * depth + closer * depth


# --- item 1: nesting deep enough to overflow a recursive parser's stack ---------------------------

DEEP = [(5_000, "unused key"), (1_000_000, "unused key"), (200_000, "event args"), (100_000, "distributedInfo")]


def _deep_doc(depth: int, where: str) -> bytes:
    deep = _nested(depth, b'{"k":', b"}")[:-depth] + b"1" + b"}" * depth if where == "distributedInfo" \
        else _nested(depth)
    if where == "unused key":
        return b'{"x": %s, "traceEvents": %s}' % (deep, json.dumps(GOOD).encode())
    if where == "event args":
        event = dict(GOOD[0], args={"device": 0, "stream": 7})
        return b'{"traceEvents": [%s]}' % json.dumps(event).encode().replace(b'"stream": 7', b'"stream": 7, "y": ' + deep)
    return b'{"traceEvents": %s, "distributedInfo": {"rank": 0, "z": %s}}' % (json.dumps(GOOD).encode(), deep)


@pytest.mark.parametrize("target", ["--db", "--parquet"])
def test_deep_nesting_is_one_line_even_with_one_worker(tmp_path, target):
    """The compiled scanner walked every value recursively: a million nested arrays (2 MB) was a
    SIGSEGV of the ingest process itself with --workers 1, no line, the files after it lost.
    Each depth and place is a run of its own between two good runs, all in one ingest."""
    runs = tmp_path / "runs"
    write_trace(runs / "a" / "rank0.json", GOOD, rank=0)
    write_trace(runs / "c" / "rank0.json", GOOD, rank=0)
    bad = [runs / f"b{i}" / "rank0.json" for i in range(len(DEEP))]
    for path, (depth, where) in zip(bad, DEEP):
        path.parent.mkdir(parents=True)
        path.write_bytes(_deep_doc(depth, where))
    out = tmp_path / ("t.duckdb" if target == "--db" else "ds")
    result = _ingest(runs, target, out, "--workers", "1")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert sorted(_lines(result)) == [f"{path}: JSON nested too deeply (beyond Python's recursion limit): not a Kineto trace"
                              for path in bad]
    assert _run_ids(out) == ["a", "c"]


def test_moderate_nesting_still_ingests(tmp_path):
    """Past the compiled scanner's bound (256) the reference extractor reads the file as before."""
    doc = b'{"x": %s, "traceEvents": %s, "distributedInfo": {"rank": 0}}' % (_nested(300), json.dumps(GOOD).encode())
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "rank0.json").write_bytes(doc)
    result = _ingest(tmp_path / "r", "--db", tmp_path / "t.duckdb")
    assert result.exit_code == 0, result.output
    assert len(query(tmp_path / "t.duckdb", "rank_breakdown")) == 1


def _segfault(*args, **kwargs):
    import faulthandler

    faulthandler.disable()  # pytest's would print the dying worker's stack
    os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.parametrize("files", [1, 3])
def test_a_parser_that_dies_costs_its_file_with_one_worker(tmp_path, monkeypatch, files):
    """With --workers 1 or a single file the parse ran in the ingest process: a crash in C code
    took the ingest down.  Now it is a worker of its own, and its death is that file's line."""
    import importlib

    ingest_module = importlib.import_module("scaletrace.pipeline.execute.ingest")
    runs = tmp_path / "runs"
    for i in range(files):
        write_trace(runs / f"r{i}" / "rank0.json", GOOD, rank=0)
    monkeypatch.setattr(ingest_module, "extract", _segfault)  # the forked worker inherits it
    result = _ingest(runs, "--db", tmp_path / "t.duckdb", "--workers", "1")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = _lines(result)
    assert [line.split(": ")[0] for line in lines[:files]] == [str(runs / f"r{i}" / "rank0.json") for i in range(files)]
    assert all("killed by SIGSEGV" in line for line in lines[:files]), lines


# --- items 2 and 3: values that ingest, then overflow a query for every run ------------------------

def _nccl(**args):
    base = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2,
            "dtype": "Float"}
    return kernel("ncclDevKernel_AllReduce_Sum_f32", 300, 10, stream=20, **{**base, **args})


def _mm(dims, concrete=None):
    args = {"Input Dims": dims, "Input type": ["float", "float"]}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 1, "ts": 0, "dur": 50, "args": args}


# (extra events, what the line says): each used to ingest and then break `collectives`,
# op_efficiency, the hta_* queries, idle_breakdown or the report for the whole database
UNCOMPUTABLE = {
    "In msg nelems 2^63-1": ([_nccl(**{"In msg nelems": 2**63 - 1})], "In msg nelems 9223372036854775807 is outside"),
    "Out msg nelems 2^62": ([_nccl(**{"Out msg nelems": 2**62})], "Out msg nelems 4611686018427387904 is outside"),
    "In msg nelems -1": ([_nccl(**{"In msg nelems": -1})], "In msg nelems -1 is outside"),
    "Group size 0": ([_nccl(**{"Group size": 0})], "Group size 0 is outside"),
    "Group size -8": ([_nccl(**{"Group size": "-8"})], "Group size -8 is outside"),
    "Group size 2^40": ([_nccl(**{"Group size": 2**40})], "Group size 1099511627776 is outside"),
    "Input Dims 2^62": ([_mm([[2**62, 2**62], [2**62, 2**62]])], "Input Dims holds 4611686018427387904"),
    "Input Dims 2^30 x 2^30": ([_mm([[2**30, 2**30], [2**30, 8]])], "has more than 281,474,976,710,656 elements"),
    "Concrete Inputs 2^40": ([_mm([[2, 2], [2, 2]], ["", str(2**40)])], "Concrete Inputs holds 1099511627776"),
    "kernels at -9.2e15 and +9.2e15 us": ([kernel("gemm", -9.2e15, 1), kernel("gemm", 9.2e15, 1)],
                                          "outside the times the queries compute with"),
    "a kernel ending past 2^62 ns": ([kernel("gemm", 4.6e15, 2e13)], "outside the times"),
    "a CPU op at -2^62 ns": ([dict(_mm([[2, 2], [2, 2]]), ts=-4.7e15)], "outside the times"),
}

EVERY_RUN_QUERIES = ("collectives", "op_efficiency", "hta_temporal_breakdown", "hta_idle_time_breakdown",
                     "idle_breakdown", "run_summary", "rank_breakdown")


def _queries_answer(db, names) -> None:
    """Every query of ``names`` runs on ``db`` (one connection for them all)."""
    with connect(db) as database:
        for name in names:
            database.query(name)


def _run_ids(db, name: str = "rank_breakdown") -> list:
    with connect(db) as database:
        return sorted(database.query(name)["run_id"].to_list())


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_a_value_no_query_can_compute_with_is_refused_at_ingest(tmp_path, monkeypatch, engine):
    """Each case is a run of its own beside a good one, all in one ingest: each bad file has its
    own line, and the good run's answers stand."""
    monkeypatch.setenv("SCALETRACE_EXTRACTOR", engine)
    runs = tmp_path / "runs"
    write_trace(runs / "good" / "rank0.json", GOOD, rank=0)
    bad = {case: write_trace(runs / f"bad{i}" / "rank0.json", GOOD + extra, rank=0)
           for i, (case, (extra, _)) in enumerate(sorted(UNCOMPUTABLE.items()))}
    db = tmp_path / "t.duckdb"
    result = _ingest(runs, "--db", db)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = _lines(result)
    assert len(lines) == len(UNCOMPUTABLE), lines
    for case, path in bad.items():  # one line per file: its own, with its own reason
        (line,) = [line for line in lines if line.startswith(f"{path}: ")]
        assert line.startswith(f"{path}: event #") and UNCOMPUTABLE[case][1] in line, (case, line)
    _queries_answer(db, EVERY_RUN_QUERIES)  # the other run's answers stand
    assert _run_ids(db) == ["good"]


def test_the_same_values_at_their_bounds_ingest(tmp_path):
    """The bounds are inclusive and leave real values alone: a 2^48-element message, a group of
    2^31 - 1, a 2^24 x 2^24 operand, a kernel at 2^62 ns."""
    events = GOOD + [_nccl(**{"In msg nelems": 2**48, "Group size": 2**31 - 1}), _mm([[2**24, 2**24], [2**24, 1]]),
                     kernel("gemm", 2**62 // 1000 - 1, 1)]
    write_trace(tmp_path / "r" / "rank0.json", events, rank=0)
    db = tmp_path / "t.duckdb"
    result = _ingest(tmp_path / "r", "--db", db)
    assert result.exit_code == 0, result.output
    _queries_answer(db, EVERY_RUN_QUERIES)


def test_the_report_shows_non_finite_values_as_missing():
    """Item 3: a NaN or infinity reaching the report's JSON ("Out of range float values are not
    JSON compliant") or a table cell is shown as missing, whatever computed it."""
    from scaletrace.reports.html import _cell, script_json

    spec = {"data": {"values": [{"x": float("inf"), "y": [float("nan"), 1.5]}, {"x": -float("inf")}]}}
    assert json.loads(script_json(spec)) == {"data": {"values": [{"x": None, "y": [None, 1.5]}, {"x": None}]}}
    assert {_cell(v, "{:.1f}", "mfu_pct") for v in (float("nan"), float("inf"), None)} == {"–"}


# --- item 9: run.json and step-log values that crashed the report ----------------------------------

BAD_MANIFESTS = {
    "tokens_per_step 0": ({"tokens_per_step": 0}, "key 'tokens_per_step': Expected `int` >= 1"),
    "peak_flops 0": ({"device": {"peak_flops": 0}}, "key 'device.peak_flops': Expected `float` >= 1000000.0"),
    "peak_flops 1e-320": ({"device": {"peak_flops": 1e-320}}, "key 'device.peak_flops': Expected `float` >= "),
    "world_size 0": ({"world_size": 0}, "key 'world_size': Expected `int` >= 1"),
    "flops_per_token 1e308": ({"model": {"flops_per_token": 1e308}}, "key 'model.flops_per_token': Expected `float` <="),
    "seq_len 2^63-1": ({"seq_len": 2**63 - 1}, "key 'seq_len': Expected `int` <= 2147483647"),
    "parallel.tp 0": ({"parallel": {"tp": 0}}, "key 'parallel.tp': Expected `int` >= 1"),
    "num_params -1": ({"model": {"num_params": -1}}, "key 'model.num_params': Expected `float` >= 1"),
}


def _one_line_each(result, reasons: dict) -> None:
    """Exit 1, no traceback, and one line per bad file (path -> what its line says after the path)."""
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = _lines(result)
    assert len(lines) == len(reasons), lines
    for path, reason in reasons.items():
        (line,) = [line for line in lines if line.startswith(f"{path}: ")]
        assert line.startswith(f"{path}: {reason}"), line


def test_a_run_json_value_no_metric_can_use_is_one_line(tmp_path):
    """Each case is a run of its own beside a good one, all in one ingest."""
    runs = tmp_path / "runs"
    write_trace(runs / "good" / "rank0.json", GOOD, rank=0)
    reasons = {}
    for i, case in enumerate(sorted(BAD_MANIFESTS)):
        manifest, reason = BAD_MANIFESTS[case]
        write_trace(runs / f"bad{i}" / "rank0.json", GOOD, rank=0)
        (runs / f"bad{i}" / "run.json").write_text(json.dumps(manifest))
        reasons[runs / f"bad{i}" / "run.json"] = reason
    db = tmp_path / "t.duckdb"
    _one_line_each(_ingest(runs, "--db", db), reasons)
    assert _run_ids(db, "run_summary") == ["good"]


@pytest.mark.parametrize("key,value", [("world_size", 0), ("device.peak_flops", 1e-320), ("tokens_per_step", 0)])
def test_meta_values_are_checked_the_same_way(tmp_path, key, value):
    write_trace(tmp_path / "r" / "rank0.json", GOOD, rank=0)
    result = _ingest(tmp_path / "r", "--db", tmp_path / "t.duckdb", "--meta", f"{key}={value}")
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"--meta {key}={value!r}: Expected" in result.output, result.output


BAD_STEPS = {
    "dur_ns 0": ('{"step": 1, "start_ns": 0, "dur_ns": 0}', "Expected `int` >= 1 - at `$.dur_ns`"),
    "dur_ns 2^63-1": ('{"step": 1, "start_ns": 0, "dur_ns": 9223372036854775807}', "<= 1125899906842624 - at `$.dur_ns`"),
    "start_ns 2^63-1": ('{"step": 1, "start_ns": 9223372036854775807, "dur_ns": 5}', "at `$.start_ns`"),
    "step -1": ('{"step": -1, "start_ns": 0, "dur_ns": 5}', "Expected `int` >= 0 - at `$.step`"),
    "tokens 0": ('{"step": 1, "start_ns": 0, "dur_ns": 5, "tokens": 0}', "Expected `int` >= 1 - at `$.tokens`"),
}


def test_a_step_log_value_no_metric_can_use_is_one_line(tmp_path):
    """Each case is a run of its own beside a good one, all in one ingest."""
    runs = tmp_path / "runs"
    write_trace(runs / "good" / "rank0.json", GOOD, rank=0)
    reasons = {}
    for i, case in enumerate(sorted(BAD_STEPS)):
        record, reason = BAD_STEPS[case]
        write_trace(runs / f"bad{i}" / "rank0.json", GOOD, rank=0)
        steps = runs / f"bad{i}" / "rank0.steps.jsonl"
        steps.write_text('{"step": 0, "start_ns": 0, "dur_ns": 5}\n' + record + "\n")
        reasons[steps] = reason
    db = tmp_path / "t.duckdb"
    result = _ingest(runs, "--db", db)
    _one_line_each(result, dict.fromkeys(reasons, "steps log not ingested: line 2: "))
    for path, reason in reasons.items():
        assert any(line.startswith(f"{path}: ") and reason in line for line in _lines(result)), (path, reason)
    _queries_answer(db, ("run_summary", "scaling"))


def test_a_power_sample_no_metric_can_use_is_one_line(tmp_path):
    """Each record is a run of its own, all in one ingest."""
    power = []
    for i, record in enumerate(['{"ts_ns": 0, "watts": -1}', '{"ts_ns": 0, "watts": 1e999}',
                                '{"ts_ns": -9223372036854775808, "watts": 1}']):
        write_trace(tmp_path / "runs" / f"p{i}" / "rank0.json", GOOD, rank=0)
        power.append(tmp_path / "runs" / f"p{i}" / "rank0.power.jsonl")
        power[-1].write_text(record + "\n")
    result = _ingest(tmp_path / "runs", "--db", tmp_path / "t.duckdb")
    _one_line_each(result, dict.fromkeys(power, "power log not ingested: line 1: "))


# --- item 7: a path that is not UTF-8 ----------------------------------------------------------------

@pytest.mark.parametrize("target", ["--db", "--parquet"])
def test_a_path_that_is_not_utf8_costs_that_file_alone(tmp_path, target):
    """The DuckDB ingest aborted ("cannot encode str as UTF-8") and every run sorted after it was
    never ingested; the Parquet ingest aborted before ingesting anything.  Three such paths (a bad
    byte in a run's directory, in a file's name, in a directory above the file), one ingest."""
    runs = tmp_path / "runs"
    write_trace(runs / "a" / "rank0.json", GOOD, rank=0)
    write_trace(runs / "c" / "rank0.json", GOOD, rank=0)
    paths = [os.fsencode(runs) + b"/" + bad for bad in (b"b_bad\xff/rank0.json", b"b/rank\xfe0.json",
                                                       b"b\xc3(/x/rank0.json")]
    for path in paths:
        os.makedirs(os.path.dirname(path))
        with open(path, "wb") as handle:
            handle.write(json.dumps({"traceEvents": GOOD, "distributedInfo": {"rank": 0}}).encode())
    expected = sorted(path.decode("utf-8", "backslashreplace") + ": its path is not valid UTF-8, which the database "
                      "stores paths as; rename the file or its directory" for path in paths)
    out = tmp_path / ("t.duckdb" if target == "--db" else "ds")
    for _ in range(2):  # and the same on every re-run
        result = _ingest(runs, target, out)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert sorted(_lines(result)) == expected
        assert _run_ids(out) == ["a", "c"]


# --- item 8: re-profiling into the same directory ----------------------------------------------------

def _ranks(db) -> dict:
    from scaletrace.pipeline.store.db import connect

    with connect(db) as database:
        rows = database.sql("SELECT path, rank, num_events FROM traces ORDER BY path").rows()
    return {os.path.basename(path): (rank, events) for path, rank, events in rows}


@pytest.mark.parametrize("target", ["--db", "--parquet"])
def test_ranks_swapped_between_files_in_place(tmp_path, target):
    """Two traces named by host are overwritten with their ranks swapped: every re-ingest failed
    both files ("duplicate rank ... also in" the other's stale row), for ever."""
    run = tmp_path / "run"
    write_trace(run / "hostA.json", GOOD, rank=0)
    write_trace(run / "hostB.json", GOOD[:1], rank=1)
    db = tmp_path / ("t.duckdb" if target == "--db" else "ds")
    assert _ingest(run, target, db).exit_code == 0
    write_trace(run / "hostA.json", GOOD + GOOD[:1], rank=1)
    write_trace(run / "hostB.json", GOOD[:1] * 4, rank=0)
    for _ in range(2):
        result = _ingest(run, target, db)
        assert result.exit_code == 0 and not _lines(result), result.output
        assert _ranks(db) == {"hostA.json": (1, 3), "hostB.json": (0, 4)}


def test_a_real_duplicate_among_the_new_files_is_still_refused(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "hostA.json", GOOD, rank=0)
    write_trace(run / "hostB.json", GOOD, rank=1)
    db = tmp_path / "t.duckdb"
    assert _ingest(run, "--db", db).exit_code == 0
    write_trace(run / "hostA.json", GOOD + GOOD, rank=1)  # now both say rank 1; hostB unchanged
    result = _ingest(run, "--db", db)
    assert result.exit_code == 1
    assert _lines(result) == [f"{run / 'hostA.json'}: duplicate rank 1 in run 'run': also in {run / 'hostB.json'}"]
    assert _ranks(db) == {"hostA.json": (0, 2), "hostB.json": (1, 2)}  # a failed file replaces nothing


def test_a_failed_file_replaces_nothing_when_ranks_were_swapped(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "hostA.json", GOOD, rank=0)
    write_trace(run / "hostB.json", GOOD, rank=1)
    db = tmp_path / "t.duckdb"
    assert _ingest(run, "--db", db).exit_code == 0
    write_trace(run / "hostA.json", GOOD * 3, rank=1)
    (run / "hostB.json").write_text('{"traceEvents": [')  # re-profiled, then cut short
    result = _ingest(run, "--db", db)
    assert result.exit_code == 1
    lines = _lines(result)
    assert lines[0].startswith(f"{run / 'hostB.json'}: malformed or truncated JSON"), lines
    # hostB's stored rank 1 stands (a failed file replaces nothing), so hostA's new rank 1 clashes
    assert lines[1:] == [f"{run / 'hostA.json'}: duplicate rank 1 in run 'run': also in {run / 'hostB.json'}"]
    assert _ranks(db) == {"hostA.json": (0, 2), "hostB.json": (1, 2)}
    write_trace(run / "hostB.json", GOOD, rank=0)  # fixed: the swap completes
    assert _ingest(run, "--db", db).exit_code == 0
    assert _ranks(db) == {"hostA.json": (1, 6), "hostB.json": (0, 2)}


@pytest.mark.parametrize("target", ["--db", "--parquet"])
def test_a_deleted_trace_is_no_longer_served(tmp_path, target):
    """Re-running the collector into the same --out after deleting the old files: the new file was
    refused as a duplicate of the deleted one, which went on being served."""
    run = tmp_path / "run"
    write_trace(run / "rank0.host.111.json", GOOD, rank=0)
    write_trace(run / "rank1.host.111.json", GOOD, rank=1)
    out = tmp_path / ("t.duckdb" if target == "--db" else "ds")
    assert _ingest(run, target, out).exit_code == 0
    for old in run.iterdir():
        old.unlink()
    write_trace(run / "rank0.host.222.json", GOOD * 2, rank=0)
    result = CliRunner().invoke(main, ["ingest", str(run), target, str(out)])
    assert result.exit_code == 0, result.output
    notes = [line for line in _lines(result) if line.startswith("note: ")]
    assert notes[:2] == [f"note: {run / f'rank{r}.host.111.json'}: the file is gone from its run directory; its rows "
                     "were dropped" for r in (0, 1)], result.output
    breakdown = query(out, "rank_breakdown")
    assert breakdown["rank"].to_list() == [0]
    assert query(out, "run_summary")["run_id"].to_list() == ["run"]


# --- items 4 and 6: a damaged or doubled Parquet dataset ----------------------------------------------

@pytest.fixture(scope="module")
def dataset_once(tmp_path_factory):
    """Two runs ingested into a Parquet dataset, once for the module (each test damages a copy)."""
    tmp = tmp_path_factory.mktemp("dataset")
    runs = tmp / "runs"
    write_trace(runs / "a" / "rank0.json", GOOD, rank=0)
    write_trace(runs / "c" / "rank0.json", GOOD, rank=0)
    ds = tmp / "ds"
    assert _ingest(runs, "--parquet", ds).exit_code == 0
    return runs, ds


@pytest.fixture()
def dataset(dataset_once, tmp_path):
    """A copy of the dataset (modification times kept, as a re-ingest compares them), and its runs."""
    import shutil

    runs, ds = dataset_once
    return runs, shutil.copytree(ds, tmp_path / "ds")


def _part(ds, table: str, run: str = "c"):
    (part,) = [p for p in (ds / table).rglob("*.parquet") if f"run_id={run}" in str(p)]
    return part


DAMAGE = {
    "truncated event part": lambda ds: os.truncate(_part(ds, "device_events"), 100),
    "0-byte event part": lambda ds: os.truncate(_part(ds, "cpu_events"), 0) if any(
        (ds / "cpu_events").rglob("*.parquet")) else os.truncate(_part(ds, "collectives"), 0),
    "garbage steps part": lambda ds: _part(ds, "interval_unions").write_bytes(b"PAR1" + os.urandom(300)),
    "truncated commit record": lambda ds: os.truncate(sorted((ds / "traces").glob("*.parquet"))[0], 50),
    "corrupt runs file": lambda ds: sorted((ds / "runs").glob("*.parquet"))[0].write_bytes(b"garbage"),
    "corrupt ingest log": lambda ds: sorted((ds / "ingest_log").glob("*.parquet"))[0].write_bytes(b""),
    "corrupt meta.parquet": lambda ds: (ds / "meta.parquet").write_bytes(b"not parquet"),
    "rank=abc partition": lambda ds: (lambda p: (p.parent.parent / "rank=abc").mkdir() or
                                      (p.parent.parent / "rank=abc" / "7.parquet").write_bytes(p.read_bytes()))(
        _part(ds, "device_events", "a")),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_dataset_is_read_from_the_rest_and_the_next_ingest_repairs_it(dataset, case):
    runs, ds = dataset
    DAMAGE[case](ds)
    result = CliRunner().invoke(main, ["query", "rank_breakdown", "--db", str(ds), "--format", "csv"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    warnings = [line for line in _lines(result) if line.startswith("warning: ")]
    assert all("damaged Parquet file, read without it" in w for w in warnings), result.output
    # a rank=abc folder is no trace's committed place: it is not read at all (item 6)
    assert warnings or case == "rank=abc partition", result.output
    assert _ingest(runs, "--parquet", ds).exit_code == 0
    result = CliRunner().invoke(main, ["query", "rank_breakdown", "--db", str(ds), "--format", "csv"])
    assert result.exit_code == 0
    if case != "rank=abc partition":  # a folder no writer made is left alone, and named on every read
        assert "warning" not in result.stderr, result.stderr
    assert sorted(query(ds, "rank_breakdown")["run_id"].to_list()) == ["a", "c"]


def test_a_folder_named_like_a_part_does_not_stop_a_rerun(dataset):
    runs, ds = dataset
    (ds / "steps" / "run_id=a" / "x.parquet").mkdir(parents=True)
    result = _ingest(runs, "--parquet", ds)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert sorted(query(ds, "rank_breakdown")["run_id"].to_list()) == ["a", "c"]


@pytest.mark.parametrize("copy", ["conflict copy", "other rank folder", "record copy"])
def test_a_duplicate_part_is_not_read_twice(dataset, copy):
    """cp -a, an rsync / Dropbox conflict copy or a manual restore left a second copy of a part:
    that rank's events counted twice and run_summary changed silently."""
    import shutil

    from scaletrace.pipeline.store.db import connect

    def events():
        with connect(ds) as database:
            return database.sql("SELECT count(*) FROM device_events").item(), database.query("rank_breakdown").to_dicts()

    runs, ds = dataset
    before = events()
    assert before[0] == 2 * len(GOOD)
    part = _part(ds, "device_events", "a")
    if copy == "conflict copy":
        shutil.copy2(part, part.with_name(f"{part.stem} (1).parquet"))
    elif copy == "other rank folder":
        (part.parent.parent / "rank=1").mkdir()
        shutil.copy2(part, part.parent.parent / "rank=1" / part.name)
    else:
        record = sorted((ds / "traces").glob("*.parquet"))[0]
        shutil.copy2(record, record.with_name(f"{record.stem} (1).parquet"))
    assert events() == before


# --- item 5: a Parquet ingest onto a full disk -------------------------------------------------------

def test_a_full_disk_stops_a_parquet_ingest_with_one_line_and_a_rerun_completes(tmp_path):
    """A pyarrow `OSError: [Errno 28]` traceback before.  A file-size limit fails writes as a full
    disk does (EFBIG), in the workers and in the driver alike."""
    import resource
    import subprocess
    import sys

    runs = tmp_path / "runs"
    for i in range(6):
        write_trace(runs / f"r{i}" / "rank0.json", [kernel(f"gemm_{j}", j * 10, 5) for j in range(3000)], rank=0)
    ds = tmp_path / "ds"

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    result = subprocess.run([sys.executable, "-m", "scaletrace.cli", "ingest", str(runs), "--parquet", str(ds), "-q",
                             "--workers", "1"], preexec_fn=small_files, capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and "File too large" in lines[0] and lines[0].endswith(
        "re-run when the dataset can be written)"), lines
    result = _ingest(runs, "--parquet", ds)
    assert result.exit_code == 0, result.output
    assert len(query(ds, "rank_breakdown")) == 6


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_part_of_a_large_dataset_read_as_views_is_left_out(dataset, monkeypatch, damage):
    """Past IN_MEMORY_FRACTION the event tables are views, read at query time: a part without the
    Parquet magic at both ends is named and left out when the dataset is opened."""
    from scaletrace.pipeline.store import export

    runs, ds = dataset
    monkeypatch.setattr(export, "IN_MEMORY_FRACTION", 10**15)  # every dataset is "large"
    os.truncate(_part(ds, "device_events"), 100 if damage == "truncated" else 0)
    result = CliRunner().invoke(main, ["query", "kernel_summary", "--db", str(ds), "--format", "csv"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert [line for line in _lines(result) if line.startswith("warning: ")] == [
        f"warning: {_part(ds, 'device_events')}: damaged Parquet file, read without it (not a whole Parquet file)"]
