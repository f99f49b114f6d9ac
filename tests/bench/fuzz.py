"""Long fuzzing run of the parser and of whole ingests (a script; the test suite runs a short budget).

    .venv/bin/python tests/bench/fuzz.py [--examples 10000] [--batch 25] [--workers 2]

Mutates the project's micro traces (and hta-triton when ../shared is present) by truncation,
byte flips, insertions and number replacements (including the hostile values of issues 11 and 21:
overflowing sizes, shapes and times, a group size of 0, nesting 300 to 200,000 deep), gzipped or
not.  Every mutated file is parsed alone (parsing never raises: rows or one error
line) and, ``--batch`` at a time, ingested together with two good runs in one mixed batch
(``ingest`` in a process pool): no exception escapes, every error is one line, every file is in
the ingest log, the good runs are always stored, and the queries that compute with the stored
values (collectives, op_efficiency, hta_*, idle_breakdown, run_summary, scaling) still answer.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import duckdb  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import test_robustness as fuzz  # noqa: E402
from conftest import FIXTURES  # noqa: E402

GOOD_RUNS = ("micro-2rank", "micro-cpu-gloo")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=25, help="mutated files per mixed ingest (0: parse only)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    counts = {"rows": 0, "errors": 0, "batches": 0}
    tmp = Path(tempfile.mkdtemp())
    pending: list[bytes] = []

    @settings(max_examples=args.examples, deadline=None, database=None)
    @given(seed=st.sampled_from(range(len(fuzz.SEEDS))), ops=st.lists(fuzz.mutation, min_size=1, max_size=6),
           gz=st.booleans())
    def run(seed, ops, gz):
        fuzz.test_fuzzed_traces_never_raise.hypothesis.inner_test(seed=seed, ops=ops, gz=gz, tmp_path=tmp)
        counts["rows" if _parsed(tmp / "rank0.json") else "errors"] += 1
        if args.batch:
            pending.append((tmp / "rank0.json").read_bytes())
            if len(pending) >= args.batch:
                batch, pending[:] = list(pending), []
                _mixed_batch(batch, Path(tempfile.mkdtemp(dir=tmp)), args.workers)
                counts["batches"] += 1

    start = time.perf_counter()
    run()
    if pending:
        _mixed_batch(pending, Path(tempfile.mkdtemp(dir=tmp)), args.workers)
        counts["batches"] += 1
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.examples} mutated traces in {time.perf_counter() - start:.0f} s: no exception; "
          f"{counts['rows']} parsed, {counts['errors']} rejected with one line; {counts['batches']} mixed "
          f"batches ingested (--workers {args.workers}), the good runs stored in every one")


def _parsed(path: Path) -> bool:
    from scaletrace.pipeline.read.classify import DEFAULT_RULES
    from scaletrace.pipeline.execute.ingest import parse_file

    return parse_file(str(path), None, DEFAULT_RULES, False).extracted is not None


def _mixed_batch(mutated: list[bytes], root: Path, workers: int) -> None:
    """Ingest the mutated files (a run each) with good runs; raise if the batch breaks a promise."""
    from scaletrace.pipeline import ingest

    for i, data in enumerate(mutated):
        run = root / f"m{i:03d}"
        run.mkdir()
        (run / ("rank0.json.gz" if data[:2] == b"\x1f\x8b" else "rank0.json")).write_bytes(data)
    for name in GOOD_RUNS:
        shutil.copytree(FIXTURES / name, root / name)
    db = root / "t.duckdb"
    report = ingest([root], db=db, workers=workers)
    bad = [o.line() for o in report.errors if "\n" in o.line() or not o.message]
    assert not bad, bad
    con = duckdb.connect(str(db), read_only=True)
    try:
        stored = {r[0] for r in con.sql("SELECT DISTINCT run_id FROM traces").fetchall()}
        logged = con.sql("SELECT count(DISTINCT path) FROM ingest_log WHERE path LIKE '%.json%'").fetchall()[0][0]
        orphans = con.sql("SELECT count(*) FROM device_events WHERE trace_id NOT IN (SELECT trace_id FROM traces)")
        assert orphans.fetchall()[0][0] == 0
    finally:
        con.close()
    assert set(GOOD_RUNS) <= stored, f"{root}: good runs missing: {set(GOOD_RUNS) - stored}"
    _queries_answer(db)
    files = len(mutated) + sum(len([p for p in (FIXTURES / n).glob("*.json*") if p.name != "run.json"])
                               for n in GOOD_RUNS)
    assert logged == files, f"{root}: {logged} of {files} files in the ingest log"
    shutil.rmtree(root)


# issue 21, item 2: a value one mutated file holds must never break a query for the other runs
EVERY_RUN_QUERIES = ("collectives", "op_efficiency", "hta_temporal_breakdown", "hta_idle_time_breakdown",
                     "idle_breakdown", "run_summary", "rank_breakdown", "scaling")


def _queries_answer(db: Path) -> None:
    from scaletrace.pipeline.store.db import connect

    with connect(db) as database:
        for name in EVERY_RUN_QUERIES:
            database.query(name)


if __name__ == "__main__":
    main()
