"""What depends on run.json and the side files follows them even when no trace changed.

A trace whose bytes are unchanged is skipped on re-ingest; what its rows do not hold must
still follow an edited run.json, and a changed ``--meta``: the ``runs`` row (workload, world
size, ...; ``meta_keys``, the keys --meta filled), the run id of the trace rows (``"run_id"``
edited) and a rank taken from run.json's ``"ranks"``.  A step or power log that is gone takes
its rows with it.

A stored trace whose file's stat is what it was when the file was read (``stat_key``: size,
mtime, ctime, inode and device, as git's index keeps them) is not even read: its sha256 is
taken only when the stat differs.  The racy case: a file changed within the timestamps'
granularity after it was read keeps its mtime and ctime, so a stat taken less than
``RACY_NS`` after the file's last change is not stored, and the next ingest hashes the file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from scaletrace.pipeline.read import sidefiles
from scaletrace.pipeline.read.version import EXTRACT_VERSION
from scaletrace.pipeline.store.write import drop_trace, put_run


# A stat taken this soon after the file's mtime or ctime is not trusted on the next ingest: a write in
# the same timestamp tick would leave both as they are (ext4 and XFS stamp from a clock that ticks
# every few ms; FAT's mtime ticks every 2 s, some NFS servers' every second).
RACY_NS = 2_000_000_000


def stat_key(info: os.stat_result, taken_ns: int) -> str | None:
    """What a later ingest compares to skip the file unread: its size, mtime, ctime, inode and
    device; None when the file changed less than RACY_NS before ``taken_ns`` (the wall clock read
    before the stat), so that the next ingest hashes it.  ctime is in it because no call sets it:
    an edit that puts size and mtime back (``touch -d``) still changes the key."""
    if max(info.st_mtime_ns, info.st_ctime_ns) >= taken_ns - RACY_NS:
        return None
    return f"{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}:{info.st_dev}"


def current_stat_key(path) -> str | None:
    """``stat_key`` of the file at ``path`` now (following symlinks, as the read does); None when
    it cannot be stat'ed (the read then says why)."""
    taken_ns = time.time_ns()
    try:
        return stat_key(os.stat(path), taken_ns)
    except (OSError, ValueError):
        return None


def extract_identity(rules=None, keep_python: bool = False) -> str:
    """What made a trace's stored rows, as ``traces.extract_version`` records it: this version's
    extract (``EXTRACT_VERSION``), and where the options that change the rows are not the
    defaults (``--rules``: the kind of each event; ``--keep-python``: Python function events),
    ``+`` a digest of them.  A stored trace made with other options is parsed again: the same
    bytes under other options are other rows.  (A reader takes what precedes ``+``:
    ``dbcheck.stale_traces``.)"""
    import hashlib

    from scaletrace.pipeline.read.classify import DEFAULT_RULES

    rules = DEFAULT_RULES if rules is None else tuple(rules)
    if rules == DEFAULT_RULES and not keep_python:
        return EXTRACT_VERSION
    options = repr((rules, bool(keep_python))).encode()
    return f"{EXTRACT_VERSION}+{hashlib.sha256(options).hexdigest()[:12]}"


def known_shas(con, runs, identity: str = EXTRACT_VERSION) -> dict[str, str]:
    """sha256 of each stored trace that may be skipped when its bytes are unchanged (``known_files``)."""
    return {path: sha for path, (sha, _) in known_files(con, runs, identity).items()}


def known_files(con, runs, identity: str = EXTRACT_VERSION) -> dict[str, tuple[str, str | None]]:
    """(sha256, stat_key) of each stored trace that may be skipped when unchanged: not one whose
    rows another extract, or other options, made (``identity``: this ingest's, ``extract_identity``),
    nor one whose run id, or rank from run.json, is no longer what run.json says (it is parsed
    again).  One query."""
    current = {str(f): run for run in runs for f in run.files}
    known = {}
    for path, sha, key, run_id, rank, source, version in con.execute(
            "SELECT path, sha256, stat_key, run_id, rank, rank_source, extract_version FROM traces").fetchall():
        if version != identity:  # stored by another extract or other options: its rows are not this ingest's
            continue
        run = current.get(path)
        if run is not None and run_id != run.run_id:
            continue
        if run is not None and source == "manifest" and (run.manifest.ranks or {}).get(Path(path).name) != rank:
            continue
        known[path] = (sha, key)
    return known


def drop_stale(con, runs, on_drop=None) -> list[tuple[str, str]]:
    """(path, run id) of each trace of ``runs`` whose rows an older extract made and that this
    ingest could not read again (its file's error line says why): its rows are dropped, so that
    the file holds one version's rows (readers refuse a file holding an older version's;
    ``dbcheck.stale_traces``).  ``on_drop(path)``: a dataset uncommits it."""
    ids = [run.run_id for run in runs]
    if not ids:
        return []
    dropped = con.execute(
        "SELECT path, run_id FROM traces WHERE list_contains(?, run_id) "
        "AND split_part(coalesce(extract_version, ''), '+', 1) <> ? ORDER BY path", [ids, EXTRACT_VERSION]).fetchall()
    for path, _ in dropped:
        drop_trace(con, path)
        if on_drop:
            on_drop(path)
    return dropped


def refresh(con, run) -> None:
    """``refresh_runs`` of one run."""
    refresh_runs(con, [run])


def refresh_runs(con, runs: list) -> None:
    """Rewrite each run's ``runs`` row when run.json (or this ingest's ``--meta``) changed it; drop
    what an old run id of the same directory, or a deleted side file, left behind (a few queries
    for all the runs, not a few per run)."""
    if not runs:
        return
    ids = [run.run_id for run in runs]
    _rewrite_changed_rows(con, runs)
    by_dir = {str(run.path): run.run_id for run in runs}
    abandoned = con.execute(
        "SELECT run_id, source_dir FROM runs WHERE list_contains(?, source_dir) "
        "AND run_id NOT IN (SELECT run_id FROM traces)", [list(by_dir)]).fetchall()
    for old_id, source_dir in abandoned:
        if old_id != by_dir[source_dir]:
            for table in ("runs", "side_files", "step_log", "power_samples"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [old_id])
    stored = con.execute("SELECT path, run_id, rank, kind FROM side_files WHERE list_contains(?, run_id)",
                         [ids]).fetchall()
    if not stored:
        return
    present = {str(path) for run in runs for path, _, _ in sidefiles.side_files(run.path)}
    for path, run_id, rank, kind in stored:
        if path not in present:
            con.execute(f"DELETE FROM {sidefiles.TABLES[kind][0]} WHERE run_id = ? AND rank = ?", [run_id, rank])
            con.execute("DELETE FROM side_files WHERE path = ?", [path])


def _rewrite_changed_rows(con, runs) -> None:
    """The ``runs`` rows of ``runs`` that differ from what their run.json (and --meta) say now."""
    rows = {run.run_id: run.row() for run in runs}
    columns = list(next(iter(rows.values())))  # manifest.run_row: the same keys for every run
    stored = {row[columns.index("run_id")]: list(row) for row in con.execute(
        f"SELECT {', '.join(columns)} FROM runs WHERE list_contains(?, run_id)", [list(rows)]).fetchall()}
    for run_id, row in rows.items():
        if run_id in stored and stored[run_id] != list(row.values()):
            put_run(con, row)
