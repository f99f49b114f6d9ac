"""A full disk while an ingest writes the DuckDB file or the Parquet dataset (docs/robustness.md,
"A full disk"), on a real size-limited file system: a tmpfs mounted for each test (root only;
skipped with the reason elsewhere).  One line naming the path, the space left and the mount
point, exit status 1; what was stored before is intact; once space is freed the next ingest
completes and equals a clean ingest of the same inputs."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from scaletrace.cli import main
from scaletrace.pipeline import connect, synth
from scaletrace.pipeline.common import diskfull
from scaletrace.pipeline.common.errors import DatabaseError, DatasetError, DiskFull
from scaletrace.pipeline.common.limits import size_text
from scaletrace.pipeline.read.vocabulary import PER_TRACE_TABLES

DISK_MIB = 8  # the first ingest's database takes ~5.5 MB of it (the template's 2 MB, then its blocks)
MICRO = FIXTURES / "micro-2rank"  # the small run: fits
AGAIN = "free space and re-run"


@pytest.fixture
def small_disk(tmp_path):
    """A DISK_MIB tmpfs at tmp_path/disk, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture(scope="module")
def bigger(tmp_path_factory) -> Path:
    """14 synthetic traces (3 runs, ~0.9 MB gzipped): more than the disk holds once MICRO is stored."""
    root = tmp_path_factory.mktemp("bigger")
    for spec in synth.sweep_specs([2, 4, 8], steps=40, kernels_per_step=60, workload="big"):
        synth.write_run(root, spec)
    return root


def _ingest(*args):
    return CliRunner().invoke(main, ["ingest", *map(str, args), "-q"])


def _one_line(result) -> str:
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def _expected(path: Path, mnt: Path, what: str) -> str:
    return f"error: {path}: disk full ({size_text(shutil.disk_usage(mnt).free)} free on {mnt}); {what}: {AGAIN}"


def _stopped(stored: int) -> str:
    return f"the ingest stopped after storing {stored} file{'s' * (stored != 1)}; what was stored before is intact"


def _fill(mnt: Path, leave: int = 0) -> Path:
    """A file that takes all the disk's free space but ``leave`` bytes (rounded to its pages)."""
    filler = mnt / "filler"
    with open(filler, "wb") as out:
        os.posix_fallocate(out.fileno(), 0, max(shutil.disk_usage(mnt).free - leave, 4096))
    assert shutil.disk_usage(mnt).free <= leave
    return filler


def _contents(db: Path, paths: set[str] | None = None) -> dict[str, list[str]]:
    """Every row of the traces, runs and per-trace tables (of the traces from ``paths``, when
    given), a trace's rows keyed by its file's path: trace ids and times of writing differ
    between ingests, and so does stat_key (NULL when a file was read within runsync.RACY_NS of its
    last write: a matter of how soon after the test wrote it)."""
    found = {}
    with connect(db) as database:
        traces = database.sql("SELECT * EXCLUDE (trace_id, ingested_at, stat_key) FROM traces")
        found["traces"] = [row for row in traces.rows(named=True) if paths is None or row["path"] in paths]
        runs = {row["run_id"] for row in found["traces"]}
        found["runs"] = [row for row in database.sql("SELECT * EXCLUDE (updated_at) FROM runs").rows(named=True)
                         if row["run_id"] in runs]
        for table in PER_TRACE_TABLES:
            rows = database.sql(f"SELECT t.path, x.* EXCLUDE (trace_id) FROM {table} x JOIN traces t USING (trace_id)")
            found[table] = [row for row in rows.rows() if paths is None or row[0] in paths]
    return {table: sorted(map(repr, rows)) for table, rows in found.items()}


def _paths(db: Path) -> set[str]:
    with connect(db) as database:
        return set(database.sql("SELECT path FROM traces")["path"])


@pytest.mark.parametrize("target", ["--db", "--parquet"])
def test_a_full_disk_stops_the_ingest_with_one_line_and_the_next_one_completes(small_disk, tmp_path, bigger,
                                                                                target):
    """DuckDB: the bigger set's write-ahead log fills the disk the first run's database left (the
    space is then given back by growing the file system); Parquet: its parts fill what a filler
    file left (then deleted).  Before: DuckDB's `Failed to commit ... No space left on device` as
    the trace's line, pyarrow's `[Errno 28] Error writing bytes to file` as the dataset's; the
    space left was never said."""
    out = small_disk / ("t.duckdb" if target == "--db" else "ds")
    assert _ingest(MICRO, target, out).exit_code == 0  # (a) the small run fits
    first = _paths(out)
    before = _contents(out)
    filler = _fill(small_disk, leave=300 << 10) if target == "--parquet" else None

    line = _one_line(_ingest(bigger, target, out))  # (b) the bigger set does not
    stored = len(_paths(out) - first)  # the bigger set's files stored before the disk was full
    assert line == _expected(out, small_disk, _stopped(stored))
    assert stored < len(list(bigger.rglob("rank*.json.gz")))
    assert _contents(out, first) == before  # (c) what was stored before is intact

    if filler:  # (d) space is freed
        filler.unlink()
    else:
        subprocess.run(["mount", "-o", f"remount,size={8 * DISK_MIB}m", str(small_disk)], check=True)
    result = _ingest(bigger, target, out)
    assert result.exit_code == 0 and not result.stderr.strip(), result.output
    clean = tmp_path / "clean"
    assert _ingest(MICRO, bigger, target, clean).exit_code == 0
    assert _contents(out) == _contents(clean)


@pytest.mark.parametrize("target,cache", [("--db", "elsewhere"), ("--db", "on the full disk"),
                                          ("--parquet", "elsewhere")])
def test_a_new_database_on_a_full_disk_is_one_line_and_leaves_nothing(small_disk, tmp_path, monkeypatch,
                                                                       target, cache):
    """A new database is a copy of the template (cache elsewhere), or is set up in place (the
    cache on the same full disk: no template).  Before: the set-up left a 0-byte new.duckdb that
    DuckDB refused ("not a valid DuckDB database file") at every ingest after space was freed;
    a new dataset's meta.parquet was a traceback."""
    if cache == "on the full disk":
        monkeypatch.setenv("SCALETRACE_CACHE_DIR", str(small_disk / "cache"))
    filler = _fill(small_disk)
    out = small_disk / ("new.duckdb" if target == "--db" else "ds")
    line = _one_line(_ingest(MICRO, target, out))
    assert line == _expected(out, small_disk, "the new database was not created" if target == "--db"
                             else _stopped(0))
    left = {p.name for p in small_disk.iterdir()} - {"filler", "cache", "ds"}
    assert not left and (not out.is_dir() or not any(out.iterdir()))  # no file, no staged copy, no part

    filler.unlink()
    result = _ingest(MICRO, target, out)
    assert result.exit_code == 0 and not result.stderr.strip(), result.output
    clean = tmp_path / "clean"
    assert _ingest(MICRO, target, clean).exit_code == 0
    assert _contents(out) == _contents(clean)


def test_an_empty_database_a_full_disk_cannot_set_up_is_left_as_it_was(small_disk, tmp_path):
    """A DuckDB file made elsewhere (plain duckdb), with no tables yet: scaletrace's tables do not
    fit.  Before: `cannot be used as a scaletrace database (... No space left on device)`."""
    db = small_disk / "empty.duckdb"
    duckdb.connect(str(db)).close()
    filler = _fill(small_disk)
    line = _one_line(_ingest(MICRO, "--db", db))
    assert line == _expected(db, small_disk, _stopped(0))
    with duckdb.connect(str(db), read_only=True) as con:  # as it was: it opens, and holds no table
        assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchall() == [(0,)]

    filler.unlink()
    result = _ingest(MICRO, "--db", db)
    assert result.exit_code == 0 and not result.stderr.strip(), result.output
    assert _ingest(MICRO, "--db", tmp_path / "clean.duckdb").exit_code == 0
    assert _contents(db) == _contents(tmp_path / "clean.duckdb")


# --- which errors are a full disk (no mount needed) -------------------------------------------------

def _raised_from(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception:
            raise outer from None  # as dbcheck and the dataset's driver raise their lines
    except Exception as exc:
        return exc


@pytest.mark.parametrize("exc,full", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device"), True),  # pyarrow
    (duckdb.IOException('IO Error: Could not write file "t.duckdb.wal": No space left on device'), True),
    (_raised_from(DatabaseError("t.duckdb: cannot be used as a scaletrace database"),
                  duckdb.IOException("Could not write file: No space left on device")), True),
    (_raised_from(DatasetError("ds: cannot write"), OSError(errno.ENOSPC, "No space left on device")), True),
    (OSError(errno.EFBIG, "File too large"), False),  # a file-size limit: its own line, as before
    (OSError(errno.EROFS, "Read-only file system"), False),
    (duckdb.IOException("Could not write file: Permission denied"), False),
])
def test_which_errors_are_a_full_disk(exc, full):
    assert diskfull.no_room(exc) is full


def test_the_line_names_the_mount_point_and_its_free_space(tmp_path):
    mount = diskfull.mount_point(tmp_path / "not" / "yet" / "there.duckdb")
    assert os.path.ismount(mount) and tmp_path.resolve().is_relative_to(mount)
    error = diskfull.disk_full(tmp_path / "t.duckdb", "the new database was not created")
    assert isinstance(error, DatabaseError) and isinstance(error, DatasetError) and isinstance(error, DiskFull)
    assert str(error).startswith(f"{tmp_path / 't.duckdb'}: disk full (") and f" free on {mount}); " in str(error)
