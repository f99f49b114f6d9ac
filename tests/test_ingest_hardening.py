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

GOOD = [kernel("gemm", 0, 100), kernel("ncclKernel_AllReduce_x", 50, 100, stream=20)]


def _ingest(*args):
    return CliRunner().invoke(main, ["ingest", *map(str, args), "-q"])


def _lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def _nested(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * depth + closer * depth


# --- item 1: nesting deep enough to overflow a recursive parser's stack ---------------------------

@pytest.mark.parametrize("depth,where", [(5_000, "unused key"), (1_000_000, "unused key"),
                                         (200_000, "event args"), (100_000, "distributedInfo")])
@pytest.mark.parametrize("target", ["--db", "--parquet"])
def test_deep_nesting_is_one_line_even_with_one_worker(tmp_path, depth, where, target):
    """The compiled scanner walked every value recursively: a million nested arrays (2 MB) was a
    SIGSEGV of the ingest process itself with --workers 1, no line, the files after it lost."""
    runs = tmp_path / "runs"
    write_trace(runs / "a" / "rank0.json", GOOD, rank=0)
    write_trace(runs / "c" / "rank0.json", GOOD, rank=0)
    deep = _nested(depth, b'{"k":', b"}")[:-depth] + b"1" + b"}" * depth if where == "distributedInfo" \
        else _nested(depth)
    if where == "unused key":
        doc = b'{"x": %s, "traceEvents": %s}' % (deep, json.dumps(GOOD).encode())
    elif where == "event args":
        event = dict(GOOD[0], args={"device": 0, "stream": 7})
        doc = b'{"traceEvents": [%s]}' % json.dumps(event).encode().replace(b'"stream": 7', b'"stream": 7, "y": ' + deep)
    else:
        doc = b'{"traceEvents": %s, "distributedInfo": {"rank": 0, "z": %s}}' % (json.dumps(GOOD).encode(), deep)
    bad = runs / "b" / "rank0.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(doc)
    out = tmp_path / ("t.duckdb" if target == "--db" else "ds")
    result = _ingest(runs, target, out, "--workers", "1")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert _lines(result) == [f"{bad}: JSON nested too deeply (beyond Python's recursion limit): not a Kineto trace"]
    assert sorted(query(out, "rank_breakdown")["run_id"].to_list()) == ["a", "c"]


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

    ingest_module = importlib.import_module("scaletrace.pipeline.ingest")
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


@pytest.mark.parametrize("engine", ["compiled", "python"])
@pytest.mark.parametrize("case", sorted(UNCOMPUTABLE))
def test_a_value_no_query_can_compute_with_is_refused_at_ingest(tmp_path, monkeypatch, case, engine):
    monkeypatch.setenv("SCALETRACE_EXTRACTOR", engine)
    extra, reason = UNCOMPUTABLE[case]
    runs = tmp_path / "runs"
    write_trace(runs / "good" / "rank0.json", GOOD, rank=0)
    bad = write_trace(runs / "bad" / "rank0.json", GOOD + extra, rank=0)
    db = tmp_path / "t.duckdb"
    result = _ingest(runs, "--db", db)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    (line,) = _lines(result)
    assert line.startswith(f"{bad}: event #") and reason in line, line
    for name in EVERY_RUN_QUERIES:  # the other run's answers stand
        query(db, name)
    assert query(db, "rank_breakdown")["run_id"].to_list() == ["good"]


def test_the_same_values_at_their_bounds_ingest(tmp_path):
    """The bounds are inclusive and leave real values alone: a 2^48-element message, a group of
    2^31 - 1, a 2^24 x 2^24 operand, a kernel at 2^62 ns."""
    events = GOOD + [_nccl(**{"In msg nelems": 2**48, "Group size": 2**31 - 1}), _mm([[2**24, 2**24], [2**24, 1]]),
                     kernel("gemm", 2**62 // 1000 - 1, 1)]
    write_trace(tmp_path / "r" / "rank0.json", events, rank=0)
    db = tmp_path / "t.duckdb"
    result = _ingest(tmp_path / "r", "--db", db)
    assert result.exit_code == 0, result.output
    for name in EVERY_RUN_QUERIES:
        query(db, name)


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


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_a_run_json_value_no_metric_can_use_is_one_line(tmp_path, case):
    manifest, reason = BAD_MANIFESTS[case]
    runs = tmp_path / "runs"
    write_trace(runs / "good" / "rank0.json", GOOD, rank=0)
    write_trace(runs / "bad" / "rank0.json", GOOD, rank=0)
    (runs / "bad" / "run.json").write_text(json.dumps(manifest))
    db = tmp_path / "t.duckdb"
    result = _ingest(runs, "--db", db)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    (line,) = _lines(result)
    assert line.startswith(f"{runs / 'bad' / 'run.json'}: {reason}"), line
    assert query(db, "run_summary")["run_id"].to_list() == ["good"]


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


@pytest.mark.parametrize("case", sorted(BAD_STEPS))
def test_a_step_log_value_no_metric_can_use_is_one_line(tmp_path, case):
    record, reason = BAD_STEPS[case]
    runs = tmp_path / "runs"
    write_trace(runs / "good" / "rank0.json", GOOD, rank=0)
    write_trace(runs / "bad" / "rank0.json", GOOD, rank=0)
    (runs / "bad" / "rank0.steps.jsonl").write_text('{"step": 0, "start_ns": 0, "dur_ns": 5}\n' + record + "\n")
    db = tmp_path / "t.duckdb"
    result = _ingest(runs, "--db", db)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    (line,) = _lines(result)
    assert line.startswith(f"{runs / 'bad' / 'rank0.steps.jsonl'}: steps log not ingested: line 2: ") and reason in line, line
    for name in ("run_summary", "scaling"):
        query(db, name)


@pytest.mark.parametrize("record", ['{"ts_ns": 0, "watts": -1}', '{"ts_ns": 0, "watts": 1e999}',
                                    '{"ts_ns": -9223372036854775808, "watts": 1}'])
def test_a_power_sample_no_metric_can_use_is_one_line(tmp_path, record):
    run = tmp_path / "run"
    write_trace(run / "rank0.json", GOOD, rank=0)
    (run / "rank0.power.jsonl").write_text(record + "\n")
    result = _ingest(run, "--db", tmp_path / "t.duckdb")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    (line,) = _lines(result)
    assert line.startswith(f"{run / 'rank0.power.jsonl'}: power log not ingested: line 1: "), line


# --- item 7: a path that is not UTF-8 ----------------------------------------------------------------

@pytest.mark.parametrize("target", ["--db", "--parquet"])
@pytest.mark.parametrize("bad", [b"b_bad\xff/rank0.json", b"b/rank\xfe0.json", b"b\xc3(/x/rank0.json"])
def test_a_path_that_is_not_utf8_costs_that_file_alone(tmp_path, target, bad):
    """The DuckDB ingest aborted ("cannot encode str as UTF-8") and every run sorted after it was
    never ingested; the Parquet ingest aborted before ingesting anything."""
    runs = tmp_path / "runs"
    write_trace(runs / "a" / "rank0.json", GOOD, rank=0)
    write_trace(runs / "c" / "rank0.json", GOOD, rank=0)
    path = os.fsencode(runs) + b"/" + bad
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as handle:
        handle.write(json.dumps({"traceEvents": GOOD, "distributedInfo": {"rank": 0}}).encode())
    out = tmp_path / ("t.duckdb" if target == "--db" else "ds")
    for _ in range(2):  # and the same on every re-run
        result = _ingest(runs, target, out)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert _lines(result) == [path.decode("utf-8", "backslashreplace") + ": its path is not valid UTF-8, which "
                                  "the database stores paths as; rename the file or its directory"]
        assert sorted(query(out, "rank_breakdown")["run_id"].to_list()) == ["a", "c"]
