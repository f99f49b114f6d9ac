"""The Ray engine on a real two-node cluster on this machine (a head and a second node joined to it
on 127.0.0.1, one CPU each): tasks run on both nodes, the dataset answers every query as the
local DuckDB ingest does, a re-run is idempotent, and an ingest whose second node is killed
(SIGKILL) while tasks run still completes with nothing missing or duplicated."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from scaletrace.cli import main
from scaletrace.pipeline import connect, ingest
from scaletrace.pipeline.dataset import ingest_parquet
from test_dataset import assert_same_answers, make_sweep

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'scaletrace[cluster]'; make setup does)")
psutil = pytest.importorskip("psutil")

RANKS = [32, 64, 128]  # 224 rank traces
# Token authentication needs the same token on every node and driver; the test cluster listens on
# 127.0.0.1 only, and lives for this module.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@dataclass
class Cluster:
    address: str
    second_node_port: int  # the second node's raylet --node-manager-port (to kill it)
    temp: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray(*args: str) -> None:
    ray_cli = Path(sys.executable).with_name("ray")
    subprocess.run([str(ray_cli), *args], check=True, env={**os.environ, **RAY_ENV},
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=180)


def _processes(marker: str) -> list:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _kill_tree(procs: list) -> int:
    """SIGKILL the processes and all their descendants; returns how many."""
    victims = {p.pid: p for p in procs}
    for p in procs:
        try:
            victims.update({c.pid: c for c in p.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
    for p in victims.values():
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    return len(victims)


@pytest.fixture(scope="module")
def cluster():
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV)
    temp = Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    port, node_port, object_port = _free_port(), _free_port(), _free_port()
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=80000000",
              "--disable-usage-stats", f"--temp-dir={temp}"]
    try:
        _ray("start", "--head", f"--port={port}", "--include-dashboard=false", *common)
        _ray("start", f"--address=127.0.0.1:{port}", f"--node-manager-port={node_port}",
             f"--object-manager-port={object_port}", *common)
        yield Cluster(f"127.0.0.1:{port}", node_port, temp)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _kill_tree(_processes(str(temp)))
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


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

    again = ingest_parquet([root], ds, engine="ray", ray_address=cluster.address)
    assert again.count("unchanged") == sum(RANKS) and not again.errors and again.count("ok") == 0
    assert_same_answers(db, ds)


def test_second_node_killed_mid_ingest(cluster, sweep, tmp_path):
    """Runs last: the cluster has one node after it."""
    root, db = sweep
    ds = tmp_path / "ds"
    killed = []

    def on_progress(done: int, total: int) -> None:
        if done == 40 and not killed:  # tasks are queued on both nodes now
            killed.append(_kill_tree(_processes(f"--node_manager_port={cluster.second_node_port}")))

    report = ingest_parquet([root], ds, engine="ray", ray_address=cluster.address, on_progress=on_progress)
    assert killed and killed[0] > 0, "the second node was not found"
    assert not report.errors, [o.line() for o in report.errors]
    assert report.count("ok") == sum(RANKS)
    assert_same_answers(db, ds)  # row counts of every table and every query: nothing missing or twice
