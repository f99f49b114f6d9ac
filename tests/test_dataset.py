"""Ingest into a Parquet dataset with the local engine (pipeline/execute/dataset.py): the same rows as the
DuckDB ingest, idempotent, a changed file replaces only its parts, a bad file is one line, a
driver killed mid-ingest is finished by a re-run, uncommitted parts are never read.
(The Ray engine: tests/test_cluster.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from scaletrace import queries
from scaletrace.cli import main
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.execute.dataset import TraceTask, ingest_parquet, run_task
from scaletrace.pipeline.synth import sweep_specs, write_run

ROOT = Path(__file__).resolve().parent.parent


def make_sweep(root: Path, ranks: list[int]) -> Path:
    for spec in sweep_specs(ranks, steps=2, kernels_per_step=4, tp=2, straggler=1, workload="ds"):
        write_run(root, spec)
    return root


def rows(df) -> list[tuple]:
    """Rows as text; floats to 12 significant digits (a mean over ranks may sum in another order)."""
    return sorted(tuple(f"{v:.12g}" if isinstance(v, float) else str(v) for v in row) for row in df.rows())


TABLES = ("traces", "runs", "device_events", "cpu_events", "steps", "collectives", "interval_unions",
          "compute_islands", "step_log", "power_samples", "side_files")


def assert_same_answers(db: Path, dataset: Path) -> None:
    """Every query, and the rows of every table (assert_same_rows), equal on the DuckDB file and the dataset."""
    with connect(db) as a, connect(dataset) as b:
        for name in queries.names():
            left, right = a.query(name), b.query(name)
            assert left.columns == right.columns, name
            assert rows(left) == rows(right), name
        _same_rows(a, b)


def assert_same_rows(db: Path, dataset: Path) -> None:
    """The row count of every table per run and rank equal on the DuckDB file and the dataset: no
    trace's rows missing or there twice (what a dataset holds; assert_same_answers also asks every query)."""
    with connect(db) as a, connect(dataset) as b:
        _same_rows(a, b)


def _same_rows(a, b) -> None:
    for table in TABLES:
        keys = "run_id" + (", rank" if table != "runs" else "")
        count = f"SELECT {keys}, count(*) FROM {table} GROUP BY ALL ORDER BY ALL"
        assert a.sql(count).rows() == b.sql(count).rows(), table


def parts(dataset: Path) -> dict[str, float]:
    """Every per-trace part file and its modification time."""
    return {str(p.relative_to(dataset)): p.stat().st_mtime_ns for table in
            ("device_events", "cpu_events", "steps", "collectives", "interval_unions", "compute_islands")
            for p in (dataset / table).rglob("*.parquet")}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = make_sweep(tmp_path_factory.mktemp("sweep"), [2, 4, 8])
    db = tmp_path_factory.mktemp("local") / "local.duckdb"
    assert not ingest([root], db=db, workers=2).errors
    return root, db


def test_local_engine_gives_the_duckdb_answers(sweep, tmp_path):
    root, db = sweep
    report = ingest_parquet([root], tmp_path / "ds", engine="local", workers=2)
    assert not report.errors and report.count("ok") == 2 + 4 + 8
    assert_same_answers(db, tmp_path / "ds")
    assert (tmp_path / "ds" / "device_events" / "run_id=ds-8" / "rank=7").is_dir()  # export's layout


def test_rerun_duplicate_rank_and_bad_file(tmp_path):
    src = tmp_path / "src"
    make_sweep(src, [2, 4])
    ds = tmp_path / "ds"
    assert not ingest_parquet([src], ds, workers=2).errors
    before = parts(ds)
    again = ingest_parquet([src], ds, workers=2)
    assert again.count("unchanged") == 6 and again.count("ok") == 0 and parts(ds) == before

    # rank 3's bytes under rank 1's name: distributedInfo says rank 3, a duplicate rank in run ds-4
    changed = src / "ds-4" / "rank1.json.gz"
    changed.write_bytes((src / "ds-4" / "rank3.json.gz").read_bytes())
    report = ingest_parquet([src], ds, workers=2)
    assert [o.line() for o in report.errors] == [f"{changed}: duplicate rank 3 in run 'ds-4': also in "
                                                  f"{src / 'ds-4' / 'rank3.json.gz'}"]
    # (the run keeps the old rank 1 rows: a failed file replaces nothing)
    with connect(ds) as d:
        assert d.sql("SELECT count(*) FROM traces WHERE run_id = 'ds-4'").item() == 4
    assert parts(ds) == before

    # a corrupt file: one line naming it, the rest lands
    bad = src / "ds-2" / "rank0.json.gz"
    bad.write_bytes(b"\x1f\x8b not gzip")
    result = CliRunner().invoke(main, ["ingest", str(src), "--parquet", str(ds), "-q"])
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line]
    assert len(lines) == 2 and any(line.startswith(f"{bad}: truncated or corrupt gzip") for line in lines)


def test_changed_file_replaces_only_its_parts(tmp_path):
    src = make_sweep(tmp_path / "src", [2, 4])
    ds = tmp_path / "ds"
    assert not ingest_parquet([src], ds, workers=1).errors
    before = parts(ds)
    target = src / "ds-4" / "rank2.json.gz"
    with connect(ds) as d:
        old_id = d.sql(f"SELECT trace_id FROM traces WHERE path = '{target}'").item()
    # new content for rank 2 of ds-4: the same run written with 3 kernels per step
    write_run(tmp_path / "three", sweep_specs([4], steps=2, kernels_per_step=3, tp=2, straggler=1, workload="ds")[0])
    target.write_bytes((tmp_path / "three" / "ds-4" / "rank2.json.gz").read_bytes())
    report = ingest_parquet([src], ds, workers=1)
    assert report.count("ok") == 1 and report.count("unchanged") == 5
    after = parts(ds)
    mine = [p for p in before if Path(p).stem == str(old_id)]
    assert len(mine) == 6  # one part per table
    assert mine and not any(p in after for p in mine)  # its old parts are gone
    new = [p for p in after if p not in before]
    assert new and all("run_id=ds-4" in p for p in new)
    assert {p: t for p, t in after.items() if p in before} == {p: t for p, t in before.items() if p not in mine}
    db = tmp_path / "ref.duckdb"
    assert not ingest([src], db=db, workers=1).errors
    assert_same_answers(db, ds)


def test_uncommitted_parts_are_not_read(sweep, tmp_path):
    """A part without a trace record (a task that died, a driver killed before its commit)."""
    root, db = sweep
    ds = tmp_path / "ds"
    assert not ingest_parquet([root], ds, workers=2).errors
    some = next((ds / "device_events").rglob("*.parquet"))
    table = pq.read_table(some)
    stray = some.with_name("12345.parquet")  # the same rows under a trace_id nobody committed
    pq.write_table(table.set_column(0, "trace_id", pa.repeat(pa.scalar(12345, pa.int64()), table.num_rows)), stray)
    assert_same_rows(db, ds)  # its rows would be its rank's second copy
    ingest_parquet([root], ds, workers=2)
    assert not stray.exists()  # the next ingest deletes it


def test_driver_killed_mid_ingest_rerun_completes(sweep, tmp_path):
    root, db = sweep
    ds = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT.parent), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "scaletrace.cli", "ingest", str(root), "--parquet", str(ds),
                             "--workers", "1", "-q"], env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list((ds / "traces").glob("*.parquet"))) < 3:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    committed = len(list((ds / "traces").glob("*.parquet")))
    assert 3 <= committed < 14, "the driver was not killed mid-ingest"
    report = ingest_parquet([root], ds, workers=2)
    assert not report.errors and report.count("unchanged") == committed and report.count("ok") == 14 - committed
    assert_same_rows(db, ds)  # nothing missing or twice


def test_unreadable_file_on_a_node_says_so(tmp_path):
    missing = tmp_path / "gone" / "rank0.json"
    result = run_task(TraceTask(str(missing), "r", None, 1, 0, None, str(tmp_path / "ds"), on_cluster=True))
    assert result.error.startswith("cannot read file (No such file or directory) on node ")
    assert result.error.endswith("trace paths must be on a filesystem every node mounts")


def test_dataset_directory_refusals(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    result = CliRunner().invoke(main, ["ingest", str(ROOT / "fixtures" / "micro-2rank"), "--parquet",
                                       str(tmp_path / "busy")])
    assert result.exit_code == 1
    assert "exists and is not a scaletrace Parquet dataset" in result.stderr
    result = CliRunner().invoke(main, ["ingest", str(ROOT / "fixtures" / "micro-2rank"), "--engine", "ray"])
    assert result.exit_code == 2 and "--engine ray writes a Parquet dataset" in result.stderr
    result = CliRunner().invoke(main, ["ingest", str(ROOT / "fixtures" / "micro-2rank"), "--db", "x.duckdb",
                                       "--parquet", str(tmp_path / "d")])
    assert result.exit_code == 2 and "not both" in result.stderr


def test_run_json_renaming_the_run_follows(tmp_path):
    """run.json's run_id edited alone: the traces move to the new run, the old run's files go
    (as runsync does in the DuckDB ingest)."""
    src = make_sweep(tmp_path / "src", [2])
    ds = tmp_path / "ds"
    assert not ingest_parquet([src], ds, workers=1).errors
    manifest = src / "ds-2" / "run.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "run_id": "renamed"}))
    report = ingest_parquet([src], ds, workers=1)
    assert not report.errors and report.count("ok") == 2
    db = tmp_path / "ref.duckdb"
    assert not ingest([src], db=db, workers=1).errors
    assert_same_rows(db, ds)
    with connect(ds) as d:
        assert d.sql("SELECT list(run_id) FROM runs").item().to_list() == ["renamed"]
        assert d.sql("SELECT list(DISTINCT run_id) FROM device_events").item().to_list() == ["renamed"]
    assert not list((ds / "device_events").glob("run_id=ds-2/*/*.parquet"))
    assert len(list((ds / "runs").glob("*.parquet"))) == 1
