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
