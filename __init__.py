"""scaletrace: where does step time go as distributed PyTorch training scales?

The one import package.  Its subpackages are the repository's folders:
``scaletrace.collectors`` (profile training steps), ``scaletrace.pipeline``
(ingest traces into DuckDB), ``scaletrace.queries`` (the SQL metric files),
``scaletrace.reports`` (the HTML report); ``scaletrace.cli`` is the command
line over them.  The public API is importable from here::

    import scaletrace
    scaletrace.ingest(["runs/llama-64"], db="runs.duckdb")
    scaletrace.connect("runs.duckdb").query("run_summary")      # a polars DataFrame
    scaletrace.build_report("runs.duckdb", "report.html")
    with scaletrace.profile("runs/llama-8", run=scaletrace.RunInfo(workload="llama")) as p: ...

Names are imported on first use, so ``import scaletrace`` (and the CLI's
start-up) does not pay for polars, altair or torch until they are needed.
"""

from __future__ import annotations

import os
import sys

import _signal  # built in: `signal` itself takes ~10 ms to import (its enums), a window for Ctrl-C

INTERRUPTED_LINE, INTERRUPTED_STATUS = "interrupted", 130  # 128 + SIGINT, as a shell reports Ctrl-C
TERMINATED_LINE, TERMINATED_STATUS = "terminated", 143  # 128 + SIGTERM


def _interrupted_at_start(signum, frame) -> None:
    """Ctrl-C while the command line starts (its imports), or SIGTERM outside an ingest: nothing
    to clean up, one line and out (Python's own handler would print a KeyboardInterrupt traceback
    from some import; SIGTERM's default ends the process without a word)."""
    terminated = signum == _signal.SIGTERM
    line, status = (TERMINATED_LINE, TERMINATED_STATUS) if terminated else (INTERRUPTED_LINE, INTERRUPTED_STATUS)
    os.write(2, f"{line}\n".encode())
    os._exit(status)


def _stop_at_start() -> None:
    """Ctrl-C and SIGTERM are one line and 128 + N from here on; the command group hands Ctrl-C
    back to KeyboardInterrupt (cli.py), an ingest takes both (pipeline/common/interrupt.py)."""
    _signal.signal(_signal.SIGINT, _interrupted_at_start)
    _signal.signal(_signal.SIGTERM, _interrupted_at_start)


# The console entry point (pip's script imports scaletrace.cli, which imports this first).
if sys.argv and os.path.basename(sys.argv[0]) == "scaletrace":
    _stop_at_start()

import importlib  # noqa: E402

_API = {  # public name -> (module, attribute; None: the module itself)
    "ingest": ("scaletrace.pipeline.execute.ingest", "ingest"),
    "IngestReport": ("scaletrace.pipeline.execute.ingest", "IngestReport"),
    "connect": ("scaletrace.pipeline.store.db", "connect"),
    "Database": ("scaletrace.pipeline.store.db", "Database"),
    "DatabaseError": ("scaletrace.pipeline.store.schema", "DatabaseError"),
    "Rule": ("scaletrace.pipeline.read.classify", "Rule"),
    "DEFAULT_RULES": ("scaletrace.pipeline.read.classify", "DEFAULT_RULES"),
    "load_rules": ("scaletrace.pipeline.read.classify", "load_rules"),
    "export_parquet": ("scaletrace.pipeline.store.export", "export_parquet"),
    "ingest_parquet": ("scaletrace.pipeline.execute.dataset", "ingest_parquet"),
    "QueryError": ("scaletrace.queries", "QueryError"),
    "QueryTimeout": ("scaletrace.pipeline.store.db", "QueryTimeout"),
    "build_report": ("scaletrace.reports", "build_report"),
    "headline": ("scaletrace.reports", "headline"),
    "ReportError": ("scaletrace.reports", "ReportError"),
    "profile": ("scaletrace.collectors", "profile"),
    "RunInfo": ("scaletrace.collectors", "RunInfo"),
    "ProfileConfig": ("scaletrace.collectors", "ProfileConfig"),
    "load_sweep": ("scaletrace.collectors.sweep", "load"),
    "run_sweep": ("scaletrace.collectors.sweep", "run_sweep"),
    "synth": ("scaletrace.pipeline.synth", None),
    "ProjectionError": ("scaletrace.queries.analysis.projection", "ProjectionError"),
    "NotIdentifiableError": ("scaletrace.queries.analysis.projection", "NotIdentifiableError"),
}

__all__ = sorted([*_API, "critical_path", "project"])


def project(db, workload: str | None = None, to: list[int] | None = None, what_if=None):
    """The projection table (docs: Projection) of a database path or an open Database, as a polars
    DataFrame: one row per sweep × GPU count × scenario (``scaletrace project``)."""
    from scaletrace.pipeline.store.db import Database, connect
    from scaletrace.queries.analysis.projection_sweeps import project as project_table

    if isinstance(db, Database):
        return project_table(db, workload, to, what_if)
    with connect(db) as database:
        return project_table(database, workload, to, what_if)


def critical_path(db, run_id: str | None = None, summary: bool = False):
    """The ``critical_path`` query (``summary``: ``critical_path_summary``) as a polars DataFrame;
    ``db`` is a Database or the path of one."""
    from scaletrace.pipeline.store.db import Database, connect

    name = "critical_path_summary" if summary else "critical_path"
    if isinstance(db, Database):
        return db.query(name, run_id=run_id)
    with connect(db) as database:
        return database.query(name, run_id=run_id)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'scaletrace' has no attribute {name!r}")
    module_name, attribute = _API[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
