"""The Ray engine on a real two-node cluster on this machine (a head and a second node joined to it
on 127.0.0.1, one CPU each): tasks run on both nodes, the dataset answers every query as the
local DuckDB ingest does, a re-run is idempotent, and an ingest whose second node is killed
(SIGKILL) while tasks run still completes with nothing missing or duplicated."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from scaletrace.cli import main
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.common.imports import without_iri_grammar
from scaletrace.pipeline.execute.dataset import ingest_parquet
from conftest import FIXTURES
from test_dataset import assert_same_answers, assert_same_rows, make_sweep, parts

pytest.importorskip("psutil")
from raycluster import LocalCluster, processes, ray_env  # noqa: E402

with without_iri_grammar():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'scaletrace[cluster]'; make setup does)")

# 224 rank traces: enough work that the second node, whose worker starts seconds after the head's
# (a new one for each ingest: Ray's workers belong to one driver), has taken tasks on a loaded
# machine when the head has done KILL_AT; of 28, it took none on one run, 1 on another
RANKS = [32, 64, 128]
KILL_AT = 40


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(cpus=1) as c:
        c.add_node()
        yield c


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = make_sweep(tmp_path_factory.mktemp("sweep"), RANKS)
    db = tmp_path_factory.mktemp("local") / "local.duckdb"
    assert not ingest([root], db=db, workers=2).errors
    return root, db


def _nodes(dataset: Path) -> dict[str, int]:
    with connect(dataset) as d:
        return dict(d.sql("SELECT node, count(*) FROM ingest_log WHERE status = 'ok' GROUP BY node").rows())


def test_ray_ingest_on_two_nodes_matches_local(cluster, sweep, tmp_path):
    root, db = sweep
    ds = tmp_path / "ds"
    result = CliRunner().invoke(main, ["ingest", str(root), "--parquet", str(ds), "--engine", "ray",
                                       "--ray-address", cluster.address, "-q"])
    assert result.exit_code == 0, result.output
    nodes = _nodes(ds)
    assert len(nodes) == 2 and sum(nodes.values()) == sum(RANKS), nodes  # both nodes parsed files
    assert_same_answers(db, ds)

    before = parts(ds)
    again = ingest_parquet([root], ds, engine="ray", ray_address=cluster.address)
    assert again.count("unchanged") == sum(RANKS) and not again.errors and again.count("ok") == 0
    assert parts(ds) == before  # no part written again or gone
    assert_same_rows(db, ds)


def test_without_an_address_a_local_cluster_lives_for_the_command(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", ray_env()["PYTHONPATH"])  # the local cluster's processes: raycluster.SITE
    raylets = len(processes("raylet/raylet"))
    ds = tmp_path / "ds"
    result = CliRunner().invoke(main, ["ingest", str(FIXTURES / "micro-2rank"), "--parquet", str(ds),
                                       "--engine", "ray", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "2 ingested, 0 unchanged, 0 failed" in result.stderr
    assert len(_nodes(ds)) == 1
    assert not ray.is_initialized() and len(processes("raylet/raylet")) == raylets  # shut down after it


def test_second_node_killed_mid_ingest(cluster, sweep, tmp_path):
    """Runs last: the cluster has one node after it."""
    root, db = sweep
    ds = tmp_path / "ds"
    killed = []

    def on_progress(done: int, total: int) -> None:
        if done == KILL_AT and not killed:  # tasks are queued on both nodes now
            killed.append(cluster.kill_node(1))

    report = ingest_parquet([root], ds, engine="ray", ray_address=cluster.address, on_progress=on_progress)
    assert killed and killed[0] > 0, "the second node was not found"
    assert not report.errors, [o.line() for o in report.errors]
    assert report.count("ok") == sum(RANKS)
    assert_same_rows(db, ds)  # nothing missing or twice (test_ray_ingest_on_two_nodes_matches_local: every query)
