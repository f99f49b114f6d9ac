"""What depends on run.json and the side files follows them even when no trace changed.

A trace whose bytes are unchanged is skipped on re-ingest; what its rows do not hold must
still follow an edited run.json, and a changed ``--meta``: the ``runs`` row (workload, world
size, ...; ``meta_keys``, the keys --meta filled), the run id of the trace rows (``"run_id"``
edited) and a rank taken from run.json's ``"ranks"``.  A step or power log that is gone takes
its rows with it.
"""

from __future__ import annotations

from pathlib import Path

from scaletrace.pipeline.read import sidefiles
from scaletrace.pipeline.read.extract import EXTRACT_VERSION


def known_shas(con, runs) -> dict[str, str]:
    """sha256 of each stored trace that may be skipped when its bytes are unchanged: not one
    whose run id, or rank from run.json, is no longer what run.json says (it is parsed again)."""
    current = {str(f): run for run in runs for f in run.files}
    known = {}
    for path, sha, run_id, rank, source, version in con.execute(
            "SELECT path, sha256, run_id, rank, rank_source, extract_version FROM traces").fetchall():
        if version != EXTRACT_VERSION:  # stored by another extract: its rows lack what this one makes
            continue
        run = current.get(path)
        if run is not None and run_id != run.run_id:
            continue
        if run is not None and source == "manifest" and (run.manifest.ranks or {}).get(Path(path).name) != rank:
            continue
        known[path] = sha
    return known


def refresh(con, run) -> None:
    """Rewrite the run's ``runs`` row when run.json (or this ingest's ``--meta``) changed it; drop
    what an old run id of the same directory, or a deleted side file, left behind."""
    row = run.row()
    columns = list(row)
    stored = con.execute(f"SELECT {', '.join(columns)} FROM runs WHERE run_id = ?", [run.run_id]).fetchall()
    if stored and list(stored[0]) != list(row.values()):
        con.execute(f"INSERT OR REPLACE INTO runs ({', '.join(columns)}, updated_at) "
                    f"VALUES ({', '.join('?' * len(columns))}, now())", list(row.values()))
    abandoned = con.execute(
        "SELECT run_id FROM runs WHERE source_dir = ? AND run_id <> ? "
        "AND run_id NOT IN (SELECT run_id FROM traces)", [str(run.path), run.run_id]).fetchall()
    for (old_id,) in abandoned:
        for table in ("runs", "side_files", "step_log", "power_samples"):
            con.execute(f"DELETE FROM {table} WHERE run_id = ?", [old_id])
    present = {str(path) for path, _, _ in sidefiles.side_files(run.path)}
    for path, rank, kind in con.execute("SELECT path, rank, kind FROM side_files WHERE run_id = ?",
                                        [run.run_id]).fetchall():
        if path not in present:
            con.execute(f"DELETE FROM {sidefiles.TABLES[kind][0]} WHERE run_id = ? AND rank = ?", [run.run_id, rank])
            con.execute("DELETE FROM side_files WHERE path = ?", [path])

