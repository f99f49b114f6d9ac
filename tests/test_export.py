"""Parquet export: every query and the report give the same answers on the export as on the DuckDB file."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from scaletrace import queries
from conftest import FIXTURES
from scaletrace.pipeline import connect, ingest
from scaletrace.cli import main
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.reports import build_report


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    for n in (2, 4):
        write_run(tmp / "traces", SynthRun(f"x{n}", ranks=n, steps=2, kernels_per_step=5, tp=2, tp_comm_us=20,
                                           straggler_rank=1, straggler_delay_us=30, workload="x", power_watts=200))
    db = tmp / "t.duckdb"
    assert not ingest([tmp / "traces", *sorted(FIXTURES.glob("micro-*"))], db=db, workers=1).errors
    result = CliRunner().invoke(main, ["export", "--db", str(db), "--parquet", str(tmp / "pq")])
    assert result.exit_code == 0, result.output
    return db, tmp / "pq"


def _rows(df):
    """Rows as text; floats to 12 significant digits (a mean over ranks may sum in another order)."""
    return sorted(tuple(f"{v:.12g}" if isinstance(v, float) else str(v) for v in row) for row in df.rows())


@pytest.fixture(scope="module")
def connected(exported):
    """The DuckDB file and its export, each opened once for every query's test (they only read)."""
    db, pq = exported
    with connect(db) as a, connect(pq) as b:
        yield a, b


@pytest.mark.parametrize("name", queries.names())
def test_every_query_agrees_on_the_export(name, connected):
    a, b = connected
    left, right = a.query(name), b.query(name)
    assert left.columns == right.columns
    assert left.height > 0 or name in ("layouts", "run_diff")  # run_diff: no rows without two runs
    assert _rows(left) == _rows(right)


def test_event_tables_are_partitioned_by_run_and_rank(exported):
    _, pq = exported
    assert (pq / "device_events" / "run_id=x4" / "rank=3").is_dir()
    assert (pq / "runs.parquet").is_file()


def test_report_from_the_export(exported, tmp_path):
    _, pq = exported
    result = build_report(pq, tmp_path / "r.html")
    assert "throughput" in result.charts and "energy" in result.charts


def test_not_an_export(tmp_path):
    result = CliRunner().invoke(main, ["query", "rank_breakdown", "--db", str(tmp_path)])
    assert result.exit_code == 1 and "not a scaletrace Parquet export" in result.stderr
