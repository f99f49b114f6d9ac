"""Batched writes: several files per transaction, each file whole or not at all.

The ingest writes the parsed files in batches (pipeline/execute/ingest.py ``Batch``).  A real ingest
process is killed with SIGKILL inside a batch of four files (after some of its rows are written,
before its COMMIT): the database holds the batches committed before it, whole, nothing of the
killed batch (rows, traces record or ingest_log line), and a rerun completes the work.  A batch
whose write fails is written again file by file: the bad file costs its own line only.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from scaletrace.pipeline import ingest
from scaletrace.pipeline.synth import SynthRun, write_run

ROOT = Path(__file__).resolve().parents[1]
STEPS = 20
KERNELS_PER_STEP = 3  # the synthetic rank's compute kernel, its all_reduce and its TP collective
RUNS, RANKS, PER_BATCH = 3, 4, 4

# The ingest, in a process of its own, with batches of exactly PER_BATCH files (no commit on a
# slow parse), killed by SIGKILL at the given point of its second batch.
DRIVER = r"""
import os, signal, sys, importlib
ing = importlib.import_module("scaletrace.pipeline.execute.ingest")
from scaletrace.pipeline.store import write as store
ing.BATCH_FIRST = ing.BATCH_FILES = int(sys.argv[3])
ing.BATCH_MIN_S = 3600.0
where, calls = sys.argv[2], {"put_traces": 0, "append_rows": 0}

def killing(name, real, after):
    def patched(*args, **kwargs):
        result = real(*args, **kwargs)
        calls[name] += 1
        if name == where and calls[name] == after:
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    return patched

per_batch = int(sys.argv[3])
# put_traces: the traces and runs rows of the second batch are written, none of their tables' rows;
# append_rows: every row of the second batch is written, its COMMIT has not run
store.put_traces = killing("put_traces", store.put_traces, 2)
store.append_rows = killing("append_rows", store.append_rows, 2)
ing.ingest(sys.argv[4:], db=sys.argv[1], workers=2)
print("not killed")
"""


def make_runs(root: Path) -> list[Path]:
    return [write_run(root, SynthRun(f"b{i}", ranks=RANKS, steps=STEPS, tp_comm_us=10, seed=i)) for i in range(RUNS)]


def stored(db: Path) -> dict:
    """path -> (device events, steps, ingest_log rows) of every stored trace; asserts no row
    belongs to a trace that is not stored."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        for table in ("device_events", "steps", "cpu_events", "collectives"):
            assert con.sql(f"SELECT count(*) FROM {table} WHERE trace_id NOT IN (SELECT trace_id FROM traces)"
                           ).fetchall()[0][0] == 0, f"orphan rows in {table}"
        rows = con.sql("""SELECT t.path,
                              (SELECT count(*) FROM device_events e WHERE e.trace_id = t.trace_id),
                              (SELECT count(*) FROM steps s WHERE s.trace_id = t.trace_id),
                              (SELECT count(*) FROM ingest_log l WHERE l.path = t.path AND l.status = 'ok')
                          FROM traces t ORDER BY t.path""").fetchall()
        logged = {p for (p,) in con.sql("SELECT DISTINCT path FROM ingest_log WHERE status = 'ok'").fetchall()}
        assert logged <= {r[0] for r in rows}, "an 'ok' ingest_log line for a file that is not stored"
        return {path: (events, steps, logs) for path, events, steps, logs in rows}
    finally:
        con.close()


@pytest.mark.parametrize("where", ["put_traces", "append_rows"])
def test_sigkill_inside_a_multi_file_batch_leaves_no_partial_file_and_rerun_completes(tmp_path, where):
    runs = make_runs(tmp_path / "traces")
    files = sorted(str(f) for run in runs for f in run.glob("rank*.json"))
    db = tmp_path / "t.duckdb"
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(db), where, str(PER_BATCH), *map(str, runs)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    whole = (STEPS * KERNELS_PER_STEP, STEPS, 1)
    after_kill = stored(db)
    # the first batch (the first four files in path order) committed, whole; nothing of the second
    assert sorted(after_kill) == files[:PER_BATCH]
    assert set(after_kill.values()) == {whole}
    report = ingest(runs, db=db)
    assert not report.errors
    assert [o.status for o in report.outcomes if o.path in files] == ["unchanged"] * PER_BATCH + \
        ["ok"] * (len(files) - PER_BATCH)
    again = stored(db)
    assert sorted(again) == files and set(again.values()) == {whole}


def test_a_failed_batch_is_written_file_by_file(tmp_path, monkeypatch):
    """One file whose rows the database refuses (a conversion error here, as a value beyond its
    column would give) fails its batch: the batch is rolled back, each of its files is written
    again alone, and only the bad file has an error line."""
    from scaletrace.pipeline.store import write as store
    import importlib

    ing = importlib.import_module("scaletrace.pipeline.execute.ingest")
    runs = make_runs(tmp_path / "traces")
    files = sorted(str(f) for run in runs for f in run.glob("rank*.json"))
    bad = files[5]
    real, sizes = store.append_rows, []

    def refusing(con, parts):
        sizes.append(len(parts))
        if any(trace.path == bad for _, trace, _ in parts):
            raise duckdb.ConversionException("Conversion Error: a value out of range for its column")
        return real(con, parts)

    monkeypatch.setattr(store, "append_rows", refusing)
    monkeypatch.setattr(ing, "BATCH_MIN_S", 3600.0)
    monkeypatch.setattr(ing, "BATCH_FILES", PER_BATCH)
    monkeypatch.setattr(ing, "BATCH_FIRST", PER_BATCH)
    db = tmp_path / "t.duckdb"
    report = ingest(runs, db=db, workers=1)
    assert max(sizes) == PER_BATCH  # the files were written in batches
    assert [o.line() for o in report.errors] == [
        f"{bad}: cannot store: Conversion Error: a value out of range for its column"]
    assert [o.path for o in report.outcomes if o.status == "ok"] == [f for f in files if f != bad]
    after = stored(db)
    assert sorted(after) == [f for f in files if f != bad]
    assert set(after.values()) == {(STEPS * KERNELS_PER_STEP, STEPS, 1)}


def test_a_rank_taken_earlier_in_the_same_batch_is_a_duplicate(tmp_path, monkeypatch):
    """The rows of a batch are written together at its end: a file that claims a rank an earlier file of
    the same open batch took is refused as a duplicate, as it is when that file is already stored."""
    import importlib
    import shutil

    ing = importlib.import_module("scaletrace.pipeline.execute.ingest")
    run = write_run(tmp_path / "traces", SynthRun("dup", ranks=RANKS, steps=2, seed=1))
    shutil.copy(run / "rank0.json", run / "zcopy.json")  # distributedInfo says rank 0 too; sorts last
    monkeypatch.setattr(ing, "BATCH_MIN_S", 3600.0)
    monkeypatch.setattr(ing, "BATCH_FIRST", 2 * RANKS)  # every file of the run in one batch
    monkeypatch.setattr(ing, "BATCH_FILES", 2 * RANKS)
    db = tmp_path / "t.duckdb"
    report = ingest([run], db=db, workers=1)
    assert [o.line() for o in report.errors] == [
        f"{run / 'zcopy.json'}: duplicate rank 0 in run 'dup': also in {run / 'rank0.json'}"]
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.sql("SELECT list(rank ORDER BY rank) FROM traces").fetchall() == [(list(range(RANKS)),)]


def test_a_rank_written_by_a_failed_batchs_file_by_file_pass_is_still_held(tmp_path, monkeypatch):
    """A batch that fails is written again file by file; the ranks those files took are held for
    the files of later batches as the ranks of a committed batch are."""
    import importlib
    import shutil

    from scaletrace.pipeline.store import write as store

    ing = importlib.import_module("scaletrace.pipeline.execute.ingest")
    run = write_run(tmp_path / "traces", SynthRun("dup", ranks=RANKS, steps=2, seed=1))
    shutil.copy(run / "rank0.json", run / "zcopy.json")  # rank 0 again, in the last batch
    bad = str(run / "rank1.json")
    real = store.append_rows

    def refusing(con, parts):
        if any(trace.path == bad for _, trace, _ in parts):
            raise duckdb.ConversionException("Conversion Error: a value out of range for its column")
        return real(con, parts)

    monkeypatch.setattr(store, "append_rows", refusing)
    monkeypatch.setattr(ing, "BATCH_MIN_S", 3600.0)
    monkeypatch.setattr(ing, "BATCH_FIRST", 2)  # [rank0, rank1] fails and is written file by file,
    monkeypatch.setattr(ing, "BATCH_FILES", 2)  # then [rank2, rank3], then [zcopy]
    report = ingest([run], db=tmp_path / "t.duckdb", workers=1)
    assert [o.line() for o in report.errors] == [
        f"{bad}: cannot store: Conversion Error: a value out of range for its column",
        f"{run / 'zcopy.json'}: duplicate rank 0 in run 'dup': also in {run / 'rank0.json'}"]
