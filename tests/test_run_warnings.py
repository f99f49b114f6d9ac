"""run_summary.warnings: a CPU run with more ranks per host than cores partly measures contention."""

from __future__ import annotations

import json

import duckdb

from conftest import cpu, kernel, query, write_trace
from scaletrace.pipeline import ingest


def _run(root, name, cores, ranks_per_host, gpu=False, nodes=1):
    run = root / name
    for rank in range(ranks_per_host * nodes):
        events = [cpu("ProfilerStep#1", 0, 100), cpu("aten::mm", 10, 50)]
        events += [kernel("gemm", 20, 30)] if gpu else [cpu("gloo:all_reduce", 60, 20, cat="user_annotation", tid=9)]
        write_trace(run / f"rank{rank}.json", events, rank=rank)
    (run / "run.json").write_text(json.dumps({
        "world_size": ranks_per_host * nodes, "num_nodes": nodes, "cpu_cores": cores}))
    return run


def _warnings(db):
    return {r["run_id"]: r["warnings"] for r in query(db, "run_summary").iter_rows(named=True)}


def test_more_ranks_than_cores_is_a_warning(tmp_path):
    runs = [_run(tmp_path, "crowded", cores=1, ranks_per_host=2),  # 2 ranks on 1 core
            _run(tmp_path, "fits", cores=2, ranks_per_host=2),  # 2 ranks on 2 cores
            _run(tmp_path, "two-hosts", cores=1, ranks_per_host=1, nodes=2),  # 2 ranks, 1 per host
            _run(tmp_path, "gpu", cores=1, ranks_per_host=2, gpu=True)]  # cores do not run GPU kernels
    db = tmp_path / "w.duckdb"
    assert not ingest(runs, db=db, workers=1).errors
    warnings = _warnings(db)
    assert warnings["crowded"] == ("CPU run with 2 ranks per host on 1 core: ranks compete for cores, so "
                                   "its step time partly measures contention, not scaling")
    assert warnings["fits"] is None and warnings["two-hosts"] is None
    # cores do not run GPU kernels: no contention clause; its one 100 µs step's device work is the
    # GEMM [20,50), 30 µs = 30 % of the step (under 1 ÷ 1.5): the shares describe that window only,
    # which the step model's short-window warning says (the other 70 µs of the step)
    assert warnings["gpu"] == ("the device's step period (the profiled steps' device window, 30 µs a step) covers "
                               "30 % of the profiled steps' CPU time 100 µs: the step's shares (compute 100 %, idle "
                               "0 %) are of that window; the other 70 µs of the step ran no traced device work (the "
                               "step-time chart draws the device period)")


def test_old_database_gains_the_column(tmp_path):
    """A file written before runs.cpu_cores existed still takes new runs (the column is added)."""
    db = tmp_path / "old.duckdb"
    assert not ingest([_run(tmp_path, "first", cores=4, ranks_per_host=2)], db=db, workers=1).errors
    with duckdb.connect(str(db)) as con:
        con.execute("ALTER TABLE runs DROP COLUMN cpu_cores")
        # a file that old was set up by an older schema: its set-up digest is not this version's
        con.execute("DELETE FROM meta WHERE key = 'setup_sha256'")
    assert not ingest([_run(tmp_path, "crowded", cores=1, ranks_per_host=2)], db=db, workers=1).errors
    assert _warnings(db)["crowded"].startswith("CPU run with 2 ranks per host on 1 core:")


def test_unknown_cores_no_warning(tmp_path):
    run = _run(tmp_path, "r", cores=1, ranks_per_host=2)
    (run / "run.json").write_text(json.dumps({"world_size": 2}))  # traces from elsewhere: no cpu_cores
    db = tmp_path / "u.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    assert _warnings(db)["r"] is None
