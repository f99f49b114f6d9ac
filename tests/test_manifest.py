"""One run.json shape (pipeline/read/manifest.py): the collector and the generator write through the
``Manifest`` type that ingest reads, and the ``runs`` table holds its columns."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import duckdb
import msgspec
import pytest

from scaletrace.collectors.config import RunInfo
from scaletrace.pipeline.read.manifest import COLUMNS, Manifest, read_manifest, run_row, write_manifest
from scaletrace.pipeline.store.schema import SCHEMA_SQL
from scaletrace.pipeline.synth import SynthRun, write_run

ROOT = Path(__file__).resolve().parent.parent


def _read_back(run_dir: Path) -> tuple[dict, Manifest]:
    """What the file says (plain JSON) and what ingest reads from it; no warnings allowed."""
    written = json.loads((run_dir / "run.json").read_text())
    manifest, raw, warnings = read_manifest(run_dir)
    assert warnings == [] and raw is not None
    return written, manifest


def test_synth_run_json_reads_back_whole(tmp_path):
    spec = SynthRun("synth-4", ranks=4, tp=2, workload="w", tokens_per_step=4096, num_params=2e9,
                    parallel={"dp": 2, "tp": 2, "pp": 1, "cp": 1})
    written, manifest = _read_back(write_run(tmp_path, spec))
    assert msgspec.to_builtins(manifest) == written  # nothing dropped, nothing unknown
    assert (manifest.run_id, manifest.workload, manifest.world_size) == (spec.run_id, spec.workload, spec.ranks)
    assert (manifest.parallel.dp, manifest.parallel.tp) == (spec.ranks // spec.tp, spec.tp)
    assert manifest.tokens_per_step == spec.tokens_per_step and manifest.model.num_params == spec.num_params
    assert (manifest.device.name, manifest.device.peak_flops) == (spec.device_name, spec.peak_flops)


def test_collector_run_json_reads_back_whole(tmp_path, monkeypatch):
    """A session closed without profiling (rank 0) writes run.json from its RunInfo."""
    pytest.importorskip("torch")
    from scaletrace.collectors import Session

    monkeypatch.delenv("RANK", raising=False)
    run = RunInfo(run_id="c-1", workload="w", scaling="weak", dp=2, tp=3, pp=1, cp=1, global_batch_size=8,
                  seq_len=128, model_name="m", num_params=1e6, num_layers=2, hidden_size=64,
                  flops_per_token=6e6, peak_flops=1e12, dtype="bf16", labels={"fabric": "IB"})
    session = Session(tmp_path / "run", run=run)
    session.close()
    assert session.failed is None
    written, manifest = _read_back(tmp_path / "run")
    assert msgspec.to_builtins(manifest) == written
    columns = manifest.columns()
    for f in fields(RunInfo):  # every fact given to the collector lands in its runs column
        if f.name != "labels":
            assert columns[f.name] == getattr(run, f.name), f.name
    assert manifest.labels == run.labels and manifest.device.peak_flops_source == "manifest"
    assert manifest.collector["steps_logged"] == 0 and manifest.world_size == 1


def test_write_manifest_round_trip(tmp_path):
    manifest = Manifest.from_columns({"run_id": "r", "dp": 4, "model_name": "llama", "peak_flops": 989e12,
                                      "device_name": "H100", "tokens_per_step": 10},
                                     labels={"a": "b"}, ranks={"x.json": 3})
    assert (manifest.parallel.dp, manifest.model.name, manifest.device.name) == (4, "llama", "H100")
    write_manifest(tmp_path, manifest)
    assert read_manifest(tmp_path)[0] == manifest


def test_from_columns_refuses_an_unknown_column():
    with pytest.raises(KeyError, match="model"):
        Manifest.from_columns({"model": "llama"})


def _runs_columns() -> dict[str, str]:
    con = duckdb.connect()
    con.execute(SCHEMA_SQL.read_text())  # the DDL with its later `ALTER TABLE runs ADD COLUMN`s
    return {name: typ for name, typ, *_ in con.execute("DESCRIBE runs").fetchall()}


def test_runs_table_columns_are_the_manifest_columns():
    table = _runs_columns()
    assert set(table) == set(COLUMNS) | {"source_dir", "manifest", "meta_keys", "updated_at"}
    row = run_row("r", "dir", Manifest(), None)
    assert set(row) == set(table) - {"updated_at"}  # the row the store inserts fills every column


def test_runs_column_types_hold_the_manifest_types():
    table = _runs_columns()
    duck = {msgspec.inspect.IntType: {"INTEGER", "BIGINT"}, msgspec.inspect.FloatType: {"DOUBLE"},
            msgspec.inspect.StrType: {"VARCHAR"}}
    for column, path in COLUMNS.items():
        info = msgspec.inspect.type_info(Manifest)
        for key in path:
            info = next(f.type for f in info.fields if f.name == key)
        (kind,) = [type(t) for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        assert table[column] in duck[kind], (column, table[column], kind)


def test_collector_run_info_fields_are_manifest_columns():
    """RunInfo (what a user tells the collector) is a subset of the manifest, by column name."""
    assert {f.name for f in fields(RunInfo)} - {"labels"} <= set(COLUMNS)


def test_collectors_need_no_duckdb():
    """The collector runs inside the training job: writing run.json must not import DuckDB or polars."""
    code = ("import sys, scaletrace.collectors.session, scaletrace.collectors.autostart, "
            "scaletrace.pipeline.read.manifest; "
            "print(sorted(m for m in ('duckdb', 'polars', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_pipeline_public_names_survive_their_submodule_import():
    """pipeline/__init__ imports on first use (for the test above); importing the submodule
    ``pipeline.execute.ingest`` first must still leave ``pipeline.execute.ingest`` the function."""
    code = ("import inspect, scaletrace.pipeline.execute.ingest, scaletrace.pipeline as p; "
            "from scaletrace.pipeline import ingest, connect; "
            "print(inspect.isfunction(ingest), inspect.isfunction(p.ingest), inspect.isfunction(connect))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"], out.stderr


def test_collect_meta_keys_map_through_the_manifest_columns():
    """``scaletrace collect --meta``: run.json paths stand for their columns; other keys are labels."""
    from scaletrace.collectors.autostart import run_info_from_meta

    run = run_info_from_meta({"workload": "w", "parallel.dp": 4, "tp": 2, "model.name": "llama",
                              "model.num_params": 1e9, "device.peak_flops": 1e12, "device.name": "H100",
                              "fabric": "IB"})
    assert (run.workload, run.dp, run.tp, run.model_name) == ("w", 4, 2, "llama")
    assert (run.num_params, run.peak_flops) == (1e9, 1e12)
    assert run.labels == {"device.name": "H100", "fabric": "IB"}  # the device name is measured, not told
