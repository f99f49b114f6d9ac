"""Shared fixtures: paths, a database of the project's micro traces, trace writers."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from scaletrace.pipeline import connect, ingest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# The large real traces; SCALETRACE_SHARED_TRACES points elsewhere (the tests of the skip reason use it).
SHARED_TRACES = Path(os.environ.get("SCALETRACE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
NO_SHARED_TRACES = f"real traces not present at {SHARED_TRACES}"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip(NO_SHARED_TRACES)
    return SHARED_TRACES


def shared_runs() -> list:
    """The shared run folders as parametrize values; where the folder is absent, one
    skipped case that says so (an empty list would skip with "got empty parameter set")."""
    if not SHARED_TRACES.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_SHARED_TRACES))]
    return sorted(p.name for p in SHARED_TRACES.iterdir() if p.is_dir() and p.name != "LICENSES")


@pytest.fixture(scope="session")
def fixtures_db(tmp_path_factory) -> Path:
    """The hand-written micro traces (fixtures/micro-*)."""
    db = tmp_path_factory.mktemp("fixtures") / "fixtures.duckdb"
    report = ingest(sorted(FIXTURES.glob("micro-*")), db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


@pytest.fixture(scope="session")
def shared_db(tmp_path_factory, shared_traces) -> Path:
    db = tmp_path_factory.mktemp("shared") / "shared.duckdb"
    report = ingest([shared_traces], db=db)
    assert not report.errors, [o.line() for o in report.errors]
    return db


def query(db: Path, name: str, **params):
    with connect(db) as database:
        return database.query(name, **params)


def kernel(name, ts, dur, stream=7, corr=None, cat="kernel", **args):
    a = {"device": 0, "stream": stream, **args}
    if corr is not None:
        a["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": a}


def cpu(name, ts, dur, cat="cpu_op", tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_trace(path: Path, events: list, rank: int | None = None, gz: bool = False, **top) -> Path:
    doc = {"schemaVersion": 1, "traceEvents": events, **top}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    data = json.dumps(doc).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path
