"""The ``scaletrace`` command line: thin verbs over the Python API."""

from __future__ import annotations

import errno
import math
import os
import signal
import sys

from scaletrace import INTERRUPTED_LINE, INTERRUPTED_STATUS, _interrupted_at_start, _stop_at_start

if __name__ == "__main__":  # python -m scaletrace.cli (the console script's guard is in __init__.py)
    _stop_at_start()

import time
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING

import click

from scaletrace import queries
from scaletrace.pipeline.common import limits, oneline, openfiles, stdio
from scaletrace.pipeline.read.classify import DEFAULT_RULES, RulesError, load_rules
from scaletrace.pipeline.common.errors import DatabaseError, DatasetError, EngineError
from scaletrace.pipeline.common.interrupt import Interrupt
from scaletrace.pipeline.common.paths import Input, Output, OverwriteError, refuse_overlap

if TYPE_CHECKING:
    import polars as pl
    from rich.console import Console

# DuckDB, polars, pyarrow, rich and the report's libraries are imported by the commands that use
# them: `scaletrace --help` needs none, `ingest` no polars, altair or rich tables.

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DB_OPTION = click.option("--db", default="scaletrace.duckdb", show_default=True, type=click.Path(),
                         help="DuckDB database file (or, for reading, a Parquet directory: `scaletrace export` or `ingest --parquet`).")
FORMAT_OPTION = click.option("--format", "fmt", type=click.Choice(["table", "line", "csv", "json"]),
                             default="table", show_default=True,
                             help="table for terminals; line: one `column: value` per line, a blank line "
                                  "between rows (for wide results); csv / json (one array of row objects) for pipes.")
META_OPTION = click.option("--meta", multiple=True, metavar="KEY=VALUE",
                           help="A run.json fact for every run, where its run.json has none (repeatable; "
                                "dotted for nested keys): workload=llama, parallel.tp=8, model.num_params=7e9.")
class Seconds(click.FloatRange):
    """A finite number of seconds, at least 0: `nan` and `inf` are refused (a wait of nan seconds
    was forever, a time limit of nan none at all; 0 already says "no limit" where it means that)."""

    name = "seconds"

    def __init__(self):
        super().__init__(min=0)

    def convert(self, value, param, ctx):
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


DEFAULT_TIMEOUT_S = 60.0  # sql / query: a reader holds the database, and an ingest waits for it (--wait)
TIMEOUT_OPTION = click.option("--timeout", "timeout_s", type=Seconds(),
                              default=DEFAULT_TIMEOUT_S, show_default=True, metavar="SECONDS",
                              help="Stop the command after this long (one line, exit 1); 0: no limit. While it "
                                   "runs it holds the database, and an ingest waits for it.")
TABLE_MAX_ROWS = 200  # --format table shows this many rows and says how many more
COLUMNS_OPTION = click.option("--columns", default=None, metavar="A,B,...",
                              help="Only these columns, in this order (comma-separated).")

@lru_cache(maxsize=1)
def stderr() -> "Console":
    """The rich console on stderr (made on first use)."""
    from rich.console import Console

    return Console(stderr=True)


def say(message: str, console: "Console | None" = None) -> None:
    """One line on stderr, as written: paths and names from traces are never read as markup, and
    their control characters (terminal escape sequences) are shown escaped."""
    (console or stderr()).print(oneline.printable(message), markup=False, highlight=False, soft_wrap=True)


def echo(line: str = "") -> None:
    """One line on stdout as a terminal must get it: its control characters (terminal escape
    sequences from run ids, workload names, kernel names) shown escaped, as `say` does on stderr."""
    click.echo(oneline.printable(line))


def connect(db, timeout_s: float | None = None):
    """``scaletrace.pipeline.store.db.connect``, imported on first use (it brings polars); a
    ``timeout_s`` of 0 is no limit (--timeout 0)."""
    from scaletrace.pipeline.store.db import connect as connect_db

    return connect_db(db, timeout_s=timeout_s or None)


def is_duckdb_error(exc: BaseException) -> bool:
    """A DuckDB exception (the command line's backstop turns it into one line)."""
    duckdb = sys.modules.get("duckdb")  # not imported: the error cannot be DuckDB's
    return duckdb is not None and isinstance(exc, duckdb.Error)


def _plural(n: int, noun: str) -> str:
    """"1 rank", "2 ranks", "1,024 ranks"."""
    return f"{n:,} {noun}{'s' * (n != 1)}"


def fail(message: str) -> None:
    """One line on stderr, exit 1: a user mistake never shows a traceback."""
    say(f"error: {oneline.one_line(message)}")  # cut as every line is: a 4,000-character name stays a line
    _exit(1)


def no_overwrite(inputs: list[Input], outputs: list[Output]) -> None:
    """No output onto, inside or around an input (pipeline/common/paths.py): one line, exit 1, before
    anything is written."""
    try:
        refuse_overlap(inputs, outputs)
    except OverwriteError as exc:
        fail(str(exc))


def checked_meta(pairs: tuple[str, ...]) -> dict:
    """The --meta KEY=VALUE facts of ingest / run, checked against run.json's keys and types: not
    KEY=VALUE is a usage error (exit 2), a key run.json does not have or a wrong type one line
    and exit 1 (pipeline/read/manifest.py: parse_meta, check_meta)."""
    from scaletrace.pipeline.read.manifest import MetaError, check_meta, parse_meta

    try:
        return check_meta(parse_meta(list(pairs)))
    except MetaError as exc:
        fail(str(exc))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--meta") from None


def engine_lines() -> list[str]:
    """Which extractor and gunzip this installation runs (--version, ingest -v)."""
    from scaletrace.pipeline.read.columns import active_extractor

    return [f"extractor: {active_extractor()}", f"gunzip: {limits.GZIP_DECODER}"]


def _version(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    click.echo("\n".join([f"scaletrace {version('scaletrace')}", *engine_lines()]))
    ctx.exit()


class _Main(click.Group):
    """The command group: Ctrl-C anywhere in parsing or a command that does not catch it is one
    line and exit 130 (click itself would print `Aborted!` and exit 1)."""

    def main(self, *args, **kwargs):
        if signal.getsignal(signal.SIGINT) is _interrupted_at_start:  # commands see KeyboardInterrupt
            signal.signal(signal.SIGINT, signal.default_int_handler)
        stdio.guard()  # a closed, full or Latin-1 stdout: one line, never a traceback
        try:
            try:
                return super().main(*args, **kwargs)
            finally:
                stdio.flush()  # the last block, here rather than at exit, where its failure is a traceback
        except stdio.StdoutError as exc:
            say(f"error: cannot write to standard output: {exc.strerror}")
            _exit(1)

    def make_context(self, *args, **kwargs):
        with _interrupt_is_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with _interrupt_is_one_line(), _out_of_files_is_one_line():
            openfiles.ensure()  # a tiny `ulimit -n`: raised to the hard limit, or one line before any work
            return super().invoke(ctx)


@contextmanager
def _out_of_files_is_one_line():
    """Running out of file descriptors midway (a hard limit near the minimum, many workers) is one line:
    Python's OSError, or the Rust panic a compiled library raises instead (a BaseException)."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        fail(exc.strerror if isinstance(exc, openfiles.TooFewFiles) else openfiles.too_few_line())
    except BaseException as exc:
        if type(exc).__name__ != "PanicException" or "Too many open files" not in str(exc):
            raise
        fail(openfiles.too_few_line())


@contextmanager
def _interrupt_is_one_line():
    try:
        yield
    except KeyboardInterrupt:
        say(INTERRUPTED_LINE)
        _exit(INTERRUPTED_STATUS)


def _exit(status: int) -> None:
    """sys.exit, unless a query thread would not stop: then out at once (exiting would wait for it,
    or tear DuckDB down under it)."""
    db = sys.modules.get("scaletrace.pipeline.store.db")
    if db is not None and db.query_running():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


@click.group(cls=_Main, context_settings=CONTEXT)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version, the trace extractor (compiled or Python) and the gunzip in use.")
def main() -> None:
    """scaletrace: where does step time go as distributed PyTorch training scales?

    \b
    Example:
      scaletrace ingest runs/ --db runs.duckdb
      scaletrace query rank_breakdown --db runs.duckdb
    """


@main.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False))
@DB_OPTION
@click.option("--keep-python", is_flag=True, help="Keep python_function events (skipped by default).")
@click.option("--rules", type=click.Path(exists=True, dir_okay=False),
              help="JSON rule table replacing the default kernel classification.")
@click.option("--workers", type=int, default=None, help="Parser processes (default: one per core).")
@click.option("--max-trace-size", default=None, metavar="SIZE",
              help="Refuse a trace file larger than this, or whose JSON decompresses to more (e.g. 2G, 500M; "
                   "default: a sixteenth of this machine's memory).")
@click.option("--parquet", "parquet", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Write a Parquet dataset DIR (hive layout, one part per trace and table) instead of a DuckDB "
                   "file; every reading command takes DIR as --db.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where --parquet tasks run: this machine's processes, or a Ray cluster.")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="Ray cluster to join (default: $RAY_ADDRESS, else a local cluster for this command).")
@META_OPTION
@click.option("--wait", "wait_s", type=Seconds(), default=limits.LOCK_WAIT_S, show_default=True,
              metavar="SECONDS", help="While another process holds the database (a query, another ingest), "
                                      "wait this long for it, naming it; 0: do not wait (one line, exit 1).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar; only errors are printed.")
@click.option("-v", "--verbose", is_flag=True, help="Say which extractor and gunzip parse the files.")
@click.pass_context
def ingest(ctx, paths, db, keep_python, rules, workers, max_trace_size, parquet, engine, ray_address, meta,
           wait_s, quiet, verbose) -> None:
    """Ingest Chrome/Kineto trace files or run directories into DuckDB.

    A directory holding traces (*.json, *.json.gz, *.pt.trace.json.gz) is one
    run: run_id is the directory name unless its run.json says otherwise.
    Directories are searched recursively.  Re-ingesting an unchanged file does
    nothing; a changed file replaces its rows.  A file that cannot be ingested
    prints one line `PATH: reason`; the others still ingest; exit status 1.
    Ctrl-C stops at once (exit status 130), SIGTERM too (143); the files
    stored are whole, and re-running finishes the work.
    While another process holds the database (a `sql` or `query` holds it up to
    its --timeout), the ingest says which and waits up to --wait seconds.

    With --parquet DIR, each file is parsed by a task that writes its rows as
    Parquet parts into DIR (the layout of `scaletrace export --parquet`); tasks
    run in local processes, or with --engine ray on every node of a Ray cluster
    (trace paths and DIR must then be on a filesystem every node mounts).

    --meta KEY=VALUE gives every run of this ingest a run.json fact its run.json
    lacks (run.json wins; the trace's own inference comes last); run_summary's
    *_basis columns then say `--meta`.  A re-ingest with other --meta values
    (or none) rewrites the runs' facts.

    \b
    Example:
      scaletrace ingest ../shared/traces --db traces.duckdb
      scaletrace ingest runs/llama-64 --meta workload=llama --meta parallel.tp=8 --meta model.num_params=7e9
      scaletrace ingest run-64gpu/rank0.json.gz run-64gpu/rank1.json.gz -q
      scaletrace ingest /shared/runs --parquet /shared/runs.pq --engine ray --ray-address head:6379
      scaletrace query run_summary --db /shared/runs.pq
    """
    try:
        rule_table = load_rules(rules) if rules else DEFAULT_RULES
    except RulesError as exc:
        fail(str(exc))
    try:
        max_trace_bytes = limits.parse_size(max_trace_size) if max_trace_size is not None else None
        if max_trace_bytes is not None and max_trace_bytes <= 0:  # 0 used to mean the default, silently
            raise ValueError(f"wants a size above zero (e.g. 2G, 500M), got {max_trace_size!r}")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-trace-size") from None
    if not parquet and (not str(db).strip() or str(db).startswith(":memory:")):
        # DuckDB would ingest into a throw-away in-memory database (and each file fail on its tables)
        raise click.BadParameter(f"{db!r} is not a usable database path: give a file, e.g. --db runs.duckdb",
                                 param_hint="--db")
    if parquet and ctx.get_parameter_source("db") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("give --db (a DuckDB file) or --parquet DIR (a Parquet dataset), not both")
    if engine == "ray" and not parquet:
        raise click.UsageError("--engine ray writes a Parquet dataset: give --parquet DIR")
    target = parquet or db
    facts = checked_meta(meta)
    if verbose:
        for line in engine_lines():
            say(line)
    counts = {"ok": 0, "unchanged": 0, "error": 0, "note": 0}
    stop = Interrupt()
    progress = _progress_bar(quiet)
    started, json_bytes = time.monotonic(), 0

    def on_outcome(outcome) -> None:
        nonlocal json_bytes
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
        json_bytes += outcome.json_bytes
        stop.check()  # a file DuckDB's interrupt failed is not an error: the ingest stops
        if outcome.status == "error":
            line = _outcome_line(outcome)
        elif quiet:
            return
        elif outcome.status == "note":
            line = "note: " + _outcome_line(outcome)
        elif outcome.warning:
            line = "note: " + oneline.file_line(outcome.path, outcome.warning)
        else:
            return
        say(line, progress.console)

    task = progress.add_task("ingest", total=None, rate="")

    def on_progress(done: int, total: int) -> None:
        rate = json_bytes / 1e6 / max(time.monotonic() - started, 1e-3)
        failed = f", {counts['error']} failed" if counts["error"] else ""
        progress.update(task, completed=done, total=total, rate=f"{rate:,.0f} MB/s{failed}")

    options = dict(rules=rule_table, keep_python=keep_python, on_outcome=on_outcome, on_progress=on_progress,
                   on_wait=lambda msg: say(msg, progress.console), lock_wait_s=wait_s,
                   max_trace_bytes=max_trace_bytes, meta=facts)
    try:
        with stop, progress:
            if parquet:
                from scaletrace.pipeline.execute.dataset import ingest_parquet

                stop.check()  # a signal during the import (remembered there, see interrupt.py)
                report = ingest_parquet(paths, parquet, engine=engine, ray_address=ray_address, workers=workers,
                                        **options)
            else:
                from scaletrace.pipeline.execute.ingest import ingest as run_ingest

                stop.check()
                report = run_ingest(paths, db, workers=workers, **options)
            stop.check()  # a signal whose KeyboardInterrupt DuckDB swallowed after the last file's outcome
    except (KeyboardInterrupt, Exception) as exc:
        # after Ctrl-C or SIGTERM, whatever DuckDB raised instead ("Query interrupted") is the interrupt
        if isinstance(exc, KeyboardInterrupt) or stop.hit:
            say(f"{stop.line}; {_plural(counts['ok'], 'file')} stored, re-run to finish")
            sys.exit(stop.status)
        if isinstance(exc, (DatabaseError, DatasetError, EngineError, OverwriteError)):
            fail(str(exc))
        if is_duckdb_error(exc):  # the backstop: a database error is one line, never a traceback
            fail(f"{target}: {oneline.message(exc)}")
        raise
    if not quiet:
        rate = json_bytes / 1e6 / max(time.monotonic() - started, 1e-3)
        say(f"{counts['ok']} ingested, {counts['unchanged']} unchanged, {counts['error']} failed -> {target}"
            + (f" ({json_bytes / 1e6:,.1f} MB of JSON at {rate:,.1f} MB/s)" if json_bytes else ""))
    if not counts["ok"] and not counts["unchanged"]:
        _say_if_empty(target)
    sys.exit(1 if report.errors else 0)


class _NoBar:
    """What ``ingest`` uses of rich's Progress, when there is no bar: rich.progress is not imported,
    nor rich's console until a line is printed (a quiet no-op ingest prints none)."""

    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc) -> None:
        return None

    @property
    def console(self) -> "Console":
        return stderr()

    def add_task(self, *args, **kwargs) -> None:
        return None

    def update(self, *args, **kwargs) -> None:
        return None


def _progress_bar(quiet: bool):
    """ingest's progress bar on stderr; none with --quiet or off a terminal (a bar is noise there,
    and rich would leave a blank line)."""
    if quiet or not stderr().is_terminal:
        return _NoBar()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("ingest"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                    TimeElapsedColumn(), console=stderr(), transient=True)


def _outcome_line(outcome) -> str:
    """A file's line, its reason cut at oneline.MAX_MESSAGE_CHARS whichever ingest (DuckDB, Parquet, Ray) made it."""
    return oneline.file_line(outcome.path, outcome.message)


def _say_if_empty(db) -> None:
    """A database left without traces (e.g. every file of a first ingest failed) is said to be empty."""
    try:
        with connect(db) as database:
            empty = database.num_traces() == 0
    except (DatabaseError, queries.QueryError):
        return
    if empty:
        say(f"{db} holds no traces: nothing could be ingested (its ingest_log table records why)")


def _select(df: pl.DataFrame, columns: str | None, what: str) -> pl.DataFrame:
    """The --columns of ``df`` in the order given; an unknown name is a user mistake."""
    if not columns:
        return df
    wanted = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in df.columns]
    if unknown or not wanted:
        fail(f"{what} has no column {', '.join(unknown) or '(none given)'}; its columns: {', '.join(df.columns)}")
    return df.select(wanted)


def _csv(df: pl.DataFrame, include_header: bool = True) -> str:
    """``df`` as CSV, each nested value (list, array, struct) one JSON text in its cell: polars' CSV
    writer refuses nested columns, and JSON reads back where DuckDB's ``[a, b]`` text is ambiguous."""
    import json

    import polars as pl

    nested = [name for name, dtype in df.schema.items() if dtype.is_nested()]
    if nested:
        df = df.with_columns(pl.Series(name, [None if v is None else json.dumps(v, ensure_ascii=False, default=str)
                                              for v in df[name].to_list()], dtype=pl.String) for name in nested)
    return df.write_csv(include_header=include_header)


def _emit(df: pl.DataFrame, fmt: str) -> None:
    if fmt == "csv":  # color=True: click would strip ANSI sequences from stored names; pipes get exact text
        click.echo(_csv(df), nl=False, color=True)
    elif fmt == "json":
        click.echo(df.write_json(), color=True)
    elif fmt == "line":
        width = max((len(name) for name in df.columns), default=0) + 1
        blocks = ["\n".join(f"{name + ':':<{width}} {_cell(v)}" for name, v in row.items())
                  for row in df.iter_rows(named=True)]
        click.echo("\n\n".join(blocks), nl=bool(blocks))
    else:
        _table(df.head(TABLE_MAX_ROWS), df.height - min(df.height, TABLE_MAX_ROWS))


def _table(df: pl.DataFrame, more: int = 0) -> None:
    """``df`` as a rich table on stdout; ``more`` rows not shown are said on stderr."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False)
    for name in df.columns:
        table.add_column(Text(oneline.printable(name)), overflow="fold")
    for row in df.iter_rows():  # Text: names from traces are shown as written, never as markup
        table.add_row(*[Text(_cell(v)) for v in row])
    Console(width=None if sys.stdout.isatty() else 400).print(table)
    if more:
        say(f"... {_plural(more, 'more row')} not shown (--format csv or json prints every row)")


class _Streamed:
    """An ad-hoc result written batch by batch as it arrives (``Database.stream``): csv / json / line
    never hold more than one batch; a table keeps its first TABLE_MAX_ROWS rows and counts the rest."""

    def __init__(self, fmt: str) -> None:
        self.fmt, self.rows, self.head, self.more = fmt, 0, None, 0

    def batch(self, df: pl.DataFrame) -> None:
        import polars as pl

        if df.height == 0:
            return
        if self.fmt == "table":
            keep = max(0, TABLE_MAX_ROWS - self.rows)
            if keep:
                self.head = df.head(keep) if self.head is None else pl.concat([self.head, df.head(keep)])
            self.more += df.height - min(keep, df.height)
        elif self.fmt == "csv":  # color=True: click would strip ANSI sequences; pipes get exact text
            click.echo(_csv(df, include_header=not self.rows), nl=False, color=True)
        elif self.fmt == "json":  # one array of row objects, written a batch at a time
            click.echo(("[" if not self.rows else ",") + df.write_json()[1:-1], nl=False, color=True)
        else:
            click.echo(("\n" if self.rows else ""), nl=False)  # the blank line between rows (_emit ends in \n)
            _emit(df, "line")
        self.rows += df.height

    def finish(self, names: list[str]) -> None:
        import polars as pl

        empty = pl.DataFrame(schema={name: pl.Utf8 for name in names})
        if self.fmt == "table":
            _table(self.head if self.head is not None else empty, self.more)
        elif self.fmt == "csv" and not self.rows:
            _emit(empty, "csv")
        elif self.fmt == "json":
            click.echo("]" if self.rows else "[]", color=True)


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.2f}"
    return oneline.printable(str(value))  # a trace's terminal escape sequences are shown, not obeyed


@main.command(context_settings=CONTEXT)
@click.argument("name", required=False)
@DB_OPTION
@click.option("-p", "--param", "params", multiple=True, nargs=2, metavar="KEY VALUE",
              help="Query parameter, e.g. -p run_id llama-64.")
@click.option("--list", "list_", is_flag=True, help="List the queries with one line each.")
@click.option("--show", is_flag=True, help="Print the query's SQL instead of running it.")
@FORMAT_OPTION
@COLUMNS_OPTION
@TIMEOUT_OPTION
def query(name, db, params, list_, show, fmt, columns, timeout_s) -> None:
    """Run one of the metric queries (SQL files in queries/).

    Parameters are typed in the query's header (--show): a run_id or workload
    must name one in the database; a number outside its range is one line.
    A note on stderr says why rows may be missing (e.g. CPU-only runs in the
    hta_* queries).  The query stops after --timeout seconds (0: no limit);
    Ctrl-C stops it at once (exit 130).

    \b
    Example:
      scaletrace query --list
      scaletrace query rank_breakdown --db demo.duckdb
      scaletrace query rank_step_breakdown --db demo.duckdb -p run_id demo-gpt-ddp-2 --format csv
      scaletrace query run_summary --db demo.duckdb --format line
      scaletrace query run_summary --db demo.duckdb --columns run_id,tokens_per_s,mfu_pct
      scaletrace query rank_wait --db runs.duckdb --timeout 600
    """
    try:
        if list_:
            for qname in queries.names():
                click.echo(f"{qname:28} {queries.load(qname).description}")
            return
        if not name:
            raise click.UsageError("give a query NAME or --list")
        q = queries.load(name)
        if show:
            click.echo(q.sql)
            return
        with connect(db, timeout_s) as database, database.time_limit():  # the query and its notes
            result = _select(database.query(name, **dict(params)), columns, f"query '{name}'")
            notes = database.notes(name, **dict(params))
        for note in notes:
            say(f"note: {note}")
        _emit(result, fmt)
    except (queries.QueryError, DatabaseError) as exc:
        fail(str(exc))


@main.command(context_settings=CONTEXT)
@click.argument("statement")
@DB_OPTION
@FORMAT_OPTION
@COLUMNS_OPTION
@TIMEOUT_OPTION
def sql(statement, db, fmt, columns, timeout_s) -> None:
    """Run one ad-hoc read-only SQL statement against the database.

    Several statements at once are refused (only one result could be shown).
    csv, json and line are written as the rows arrive; a table shows the first
    200 rows and says how many more.  Repeated column names (a join's) get
    _2, _3; values polars cannot hold (INTERVAL, UNION, an infinite DATE) are
    shown as DuckDB's text, and so are BLOBs in csv and json; lists and
    structs in csv are one JSON text per cell (as in `query`).
    The query stops after --timeout seconds (0: no limit); Ctrl-C stops it at
    once (exit 130).

    \b
    Example:
      scaletrace sql "SELECT kind, count(*) AS n FROM device_events GROUP BY kind" --db demo.duckdb
      scaletrace sql "SELECT path, message FROM ingest_log WHERE status = 'error'" --db demo.duckdb --format json
      scaletrace sql "SELECT * FROM runs" --db demo.duckdb --format line
      scaletrace sql "SELECT * FROM device_events" --db runs.duckdb --format csv --timeout 600 > events.csv
    """
    wanted = [c.strip() for c in columns.split(",") if c.strip()] if columns is not None else None
    out = _Streamed(fmt)
    try:
        with connect(db, timeout_s) as database:
            # csv: nested values arrive nested and _csv writes them as JSON, as `query` does
            names = database.stream(statement, out.batch, "json" if fmt == "csv" else fmt, wanted)
        out.finish(names)
    except (queries.QueryError, DatabaseError) as exc:
        fail(str(exc))


@main.command(context_settings={**CONTEXT, "ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Run directory for the traces (default: runs/<run-id> or runs/collect-<time>).")
@click.option("--run-id", default=None, help="run_id written to run.json (default: the directory name).")
@click.option("--steps", default="2,1,3", show_default=True,
              help="Profiler schedule in optimizer steps: WAIT,WARMUP,ACTIVE.")
@click.option("--meta", multiple=True, metavar="KEY=VALUE",
              help="A run.json fact, e.g. workload=llama, tokens_per_step=524288, parallel.dp=8.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def collect(out_dir, run_id, steps, meta, command) -> None:
    """Profile an unmodified training script, one step per optimizer step.

    Every Python process the command starts gets a global optimizer-step hook
    (see collectors/autostart.py for the mechanism and its limits); each rank
    writes its trace and step log into the run directory, rank 0 writes
    run.json.  The exit status is the command's, as a shell reports it: a
    command killed by signal N exits 128 + N (SIGKILL 137, SIGSEGV 139,
    SIGTERM 143).  Ctrl-C is the command's to handle: collect waits for it.

    \b
    Example:
      scaletrace collect --out runs/ddp-4 --meta workload=mymodel --meta tokens_per_step=65536 \\
          -- torchrun --nproc-per-node 4 train.py --epochs 1
      scaletrace collect --steps 5,1,3 -- python train.py
    """
    import time
    from pathlib import Path

    from scaletrace.collectors import wrapper

    facts = checked_meta(meta)  # before the job starts: a bad fact found after training lost them all
    try:
        target = Path(out_dir or f"runs/{run_id or time.strftime('collect-%Y%m%d-%H%M%S')}")
        rc = wrapper.run(list(command), target, run_id, steps, facts)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        fail(f"cannot start {command[0]}: {exc.strerror or exc}")
    say(f"traces: {target}  (scaletrace ingest {target})")
    sys.exit(rc)


@main.command(context_settings=CONTEXT)
@click.argument("sweep_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--force", is_flag=True, help="Rerun runs that finished earlier.")
@click.option("--ingest", "ingest_db", type=click.Path(dir_okay=False), default=None,
              help="Ingest each finished run into this database as the sweep goes.")
@click.option("--dry-run", is_flag=True, help="List the planned runs and their commands only.")
@click.option("-q", "--quiet", is_flag=True, help="No progress display.")
def sweep(sweep_file, force, ingest_db, dry_run, quiet) -> None:
    """Run the same job over a matrix of world sizes and layouts (a SWEEP.toml).

    Each combination is one run directory; finished runs are skipped unless
    --force; a summary says which runs failed and why (exit status 1 if any).

    \b
    Example:
      scaletrace sweep collectors/demo_sweep.toml --ingest demo.duckdb
      scaletrace sweep my_sweep.toml --dry-run
    """
    from scaletrace.collectors import sweep as sweeps

    try:
        spec = sweeps.load(sweep_file)
        planned = sweeps.plan(spec)
    except sweeps.SweepError as exc:  # every mistake of the file, one line each, before anything runs
        for problem in exc.problems[:-1]:
            say(f"error: {problem}")
        fail(exc.problems[-1])
    if dry_run:
        for line in sweeps.plan_lines(planned):
            echo(line)
        return
    id_width = max((len(run.run_id) for run in planned), default=0)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=stderr(), disable=quiet or not stderr().is_terminal,
                        transient=True)  # off a terminal a bar is noise (rich would leave a blank line)
    task = progress.add_task("sweep", total=len(planned))

    def on_start(run) -> None:
        progress.update(task, description=f"running {run.run_id}")

    def on_result(run, result) -> None:
        progress.advance(task)
        if not quiet or result.status == "failed":
            say(sweeps.result_line(result, id_width), progress.console)

    with progress:
        results = sweeps.run_sweep(spec, force=force, on_result=on_result, on_start=on_start, ingest_db=ingest_db)
    failed = [r for r in results if r.status == "failed"]
    counts = {s: sum(r.status == s for r in results) for s in ("done", "skipped", "not_applicable", "failed")}
    say(", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items()) + f" -> {spec.out_dir}")
    for r in failed:
        say(f"failed: {r.run_id}: {r.message}")
    sys.exit(1 if failed else 0)


@main.command(context_settings=CONTEXT)
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--ranks", default="8", show_default=True, help="Ranks per run; a list (8,16,32) makes a sweep.")
@click.option("--steps", default=5, show_default=True, help="ProfilerSteps per rank.")
@click.option("--kernels-per-step", default=20, show_default=True, help="Compute kernels per step (a mix).")
@click.option("--tp", default=1, show_default=True, help="Tensor-parallel degree (DP × TP process groups).")
@click.option("--straggler", type=int, default=None, help="Rank that arrives late at every all_reduce.")
@click.option("--delay-us", default=200, show_default=True, help="The straggler's delay (µs).")
@click.option("--clock-offset-us", default=0, show_default=True, help="Per-rank clock offset (µs).")
@click.option("--workload", default="synth", show_default=True, help="Sweep label in run.json.")
@click.option("--seed", default=0, show_default=True)
@click.option("--gzip/--no-gzip", "gz", default=True, show_default=True)
def synth(out_dir, ranks, steps, kernels_per_step, tp, straggler, delay_us, clock_offset_us, workload, seed, gz):
    """Generate seeded, valid Kineto trace sets with known answers (tests, benchmarks).

    Each rank: ProfilerSteps, a mix of compute kernels, a DP all_reduce that
    overlaps the end of compute, a TP all_gather, NCCL kernel args, runtime
    launches linked by correlation, optional clock offsets and a straggler
    (pipeline/synth.py documents the layout and the expected numbers).

    \b
    Example:
      scaletrace synth /tmp/big --ranks 1024 --steps 4
      scaletrace synth /tmp/sweep --ranks 8,16,32 --tp 2 --straggler 3
    """
    from scaletrace.pipeline.synth import sweep_specs, write_run

    try:
        sizes = [int(x) for x in ranks.split(",")]
    except ValueError:
        raise click.UsageError(f"--ranks wants integers, got {ranks!r}") from None
    try:
        specs = sweep_specs(sizes, steps=steps, kernels_per_step=kernels_per_step, tp=tp, straggler=straggler,
                            delay_us=delay_us, clock_offset_us=clock_offset_us, workload=workload, seed=seed,
                            gzip=gz)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    for spec in specs:
        run = write_run(out_dir, spec)
        say(f"{run}: {_plural(spec.ranks, 'rank')} × {_plural(steps, 'step')}")


@main.command(context_settings=CONTEXT)
@DB_OPTION
@click.option("--parquet", "parquet_dir", required=True, type=click.Path(file_okay=False),
              help="Directory to write (event tables partitioned by run_id and rank).")
def export(db, parquet_dir) -> None:
    """Export the database as Parquet; queries and reports accept the directory as --db.

    \b
    Example:
      scaletrace export --db runs.duckdb --parquet runs-parquet/
      scaletrace query rank_breakdown --db runs-parquet/
    """
    from scaletrace.pipeline.store.export import export_parquet

    try:
        counts = export_parquet(db, parquet_dir)
    except (DatabaseError, OverwriteError) as exc:
        fail(str(exc))
    except OSError as exc:  # e.g. DIR under a regular file, a read-only file system
        fail(f"cannot write {exc.filename or parquet_dir}: {exc.strerror or exc}")
    except Exception as exc:
        if not is_duckdb_error(exc):
            raise
        fail(f"cannot export to {parquet_dir}: {oneline.message(exc)}")
    say(f"{_plural(sum(counts.values()), 'row')} in {_plural(len(counts), 'table')} -> {parquet_dir}")


def _write_report(db, out, runs, png, svg, quiet) -> None:
    from scaletrace.reports import build_report

    result = build_report(db, out, runs=list(runs) or None, png_dir=png, svg_dir=svg)
    for directory in result.created_dirs:
        say(f"created directory {directory}")
    for warning in result.warnings:
        say(f"warning: {warning}")
    if not quiet:
        for line in result.headline:
            echo(line)
        for note in result.omitted:
            say(f"not shown: {note}")
    images = f", {len(result.images)} images" if result.images else ""
    say(f"report: {result.path} ({result.bytes / 1e6:.1f} MB, {len(result.charts)} charts{images})")


@main.command(context_settings=CONTEXT)
@DB_OPTION
@click.option("-o", "--out", default="report.html", show_default=True, type=click.Path(dir_okay=False),
              help="HTML file to write (self-contained, opens offline).")
@click.option("--runs", multiple=True, metavar="RUN_ID", help="Only these runs (repeatable; default all).")
@click.option("--png", type=click.Path(file_okay=False), default=None, help="Also write each chart as PNG here.")
@click.option("--svg", type=click.Path(file_okay=False), default=None, help="Also write each chart as SVG here.")
@click.option("-q", "--quiet", is_flag=True, help="Only print where the report went.")
def report(db, out, runs, png, svg, quiet) -> None:
    """Write one self-contained HTML report of scaling trends.

    Charts: throughput (total and per GPU) against ideal scaling, efficiency
    and marginal throughput, MFU, step time and where it goes (ms and % of
    step), communication vs compute per step, exposed communication by
    process group, collectives vs GPUs, parallel layouts (bars and a
    heatmap), collective bandwidth, per-rank transfer vs waiting, and tokens
    per joule, with warnings and findings in plain sentences and a summary
    table.  Charts whose data is absent are listed with what would enable
    them.  --runs filters everything; an unknown run, or a database with no
    runs, is an error (exit 1) and writes nothing.  Missing directories for
    -o, --png and --svg are created (said on stderr).

    \b
    Example:
      scaletrace report --db demo.duckdb -o demo.html
      scaletrace report --db runs.duckdb --runs llama-8 --runs llama-16 --png figures/
    """
    from scaletrace.reports import ReportError

    try:  # build_report refuses an output onto the database (or into a dataset) before any work
        _write_report(db, out, runs, png, svg, quiet)
    except (DatabaseError, queries.QueryError, ReportError, OverwriteError) as exc:
        fail(str(exc))
    except OSError as exc:  # a read-only file system, a file where a directory should be, a full disk
        fail(f"cannot write {exc.filename or out}: {exc.strerror or exc}")


@main.command(context_settings=CONTEXT)
@DB_OPTION
@click.option("--runs", multiple=True, metavar="RUN_ID", help="Only these runs (repeatable; default all).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="table: the card's lines; csv / json: its rows (one per sweep and GPU count), for pipes.")
def card(db, runs, fmt) -> None:
    """The decision card: per sweep and GPU count the best layout and where adding GPUs stops paying.

    One line per sweep (runs sharing run.json `workload`) and GPU count: the
    fastest run and its layout, tokens/s, tokens/s per GPU, efficiency vs the
    sweep's baseline (its run with the fewest GPUs), MFU (with (!) where
    run_summary warns), GPU-hours per 1e9 tokens and tokens per joule where
    power was sampled.  Then, per sweep, where adding GPUs stops paying: the
    first GPU count whose tokens/s per added GPU is below 50 % of a baseline
    GPU's tokens/s, the efficiency points lost there and the part of the step
    that lost most of them (query scaling_attribution); or that it has not
    stopped.  The same card opens `scaletrace report`'s page.

    \b
    Example:
      scaletrace card --db demo.duckdb
      scaletrace card --db runs.duckdb --runs llama-8 --runs llama-16 --format csv
    """
    from scaletrace.reports.card import card_from_db, card_lines
    from scaletrace.reports.data import ReportError, select_runs

    try:
        with connect(db) as database:
            wanted = select_runs(database.query("run_summary"), list(runs) or None)
            result = card_from_db(database, wanted)
    except (DatabaseError, queries.QueryError, ReportError) as exc:
        fail(str(exc))
    if fmt in ("csv", "json"):
        _emit(result.rows.drop("prev_run", "prev_gpus"), fmt)
        return
    for line in card_lines(result):
        click.echo(oneline.printable(line))


def _say_errors(outcome) -> None:
    if outcome.status == "error":
        say(_outcome_line(outcome))


@main.command(name="run", context_settings=CONTEXT)
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False))
@click.option("-o", "--out", "out_dir", default="scaletrace-out", show_default=True,
              type=click.Path(file_okay=False), help="Directory for scaletrace.duckdb and report.html.")
@click.option("--png", is_flag=True, help="Also write each chart as PNG under OUT/figures.")
@META_OPTION
@click.option("-q", "--quiet", is_flag=True, help="No progress; only errors and where the report went.")
def run_all(paths, out_dir, png, meta, quiet) -> None:
    """Ingest traces and write the report in one go (for batch use).

    Exit status 1 if any file failed to ingest (the report is still written
    from everything that did), or if no run ingested at all (no report then).

    \b
    Example:
      scaletrace run fixtures/demo-sweep -o demo-report
      scaletrace run /data/traces/llama-* -o llama-report --png
      scaletrace run traces/ -o report --meta workload=llama --meta parallel.tp=2
    """
    from pathlib import Path

    from scaletrace.reports import ReportError

    facts = checked_meta(meta)
    out = Path(out_dir)
    from scaletrace.pipeline.execute.ingest import trace_inputs

    no_overwrite(trace_inputs(list(paths)),
                 [Output(out / "scaletrace.duckdb", "database"), Output(out / "report.html", "report"),
                  Output(out / "figures" if png else None, "PNG folder")])
    if not out.is_dir():
        say(f"created directory {out}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create {exc.filename or out}: {exc.strerror or exc}")
    db = out / "scaletrace.duckdb"
    try:
        from scaletrace.pipeline.execute.ingest import ingest as run_ingest

        report_ = run_ingest(paths, db, on_outcome=_say_errors, meta=facts)
        _write_report(db, out / "report.html", (), out / "figures" if png else None, None, quiet)
    except (DatabaseError, queries.QueryError, ReportError, OverwriteError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {exc.filename or out}: {exc.strerror or exc}")
    except Exception as exc:
        if not is_duckdb_error(exc):
            raise
        fail(f"{db}: {oneline.message(exc)}")
    sys.exit(1 if report_.errors else 0)


@main.command(context_settings=CONTEXT)
@click.argument("run_a")
@click.argument("run_b")
@DB_OPTION
@click.option("--top", type=click.IntRange(min=1), default=None, metavar="N",
              help="Only the N families that changed most (N at least 1).")
@FORMAT_OPTION
@COLUMNS_OPTION
def diff(run_a, run_b, db, top, fmt, columns) -> None:
    """What changed between two runs, per kernel family (query run_diff).

    Per family (GEMM, attention, elementwise, norm, optimizer, each collective
    × process group, memcpy, ...; templated kernel names grouped): launches and
    kernel time per step per GPU in RUN_A and RUN_B, and the change, largest
    first.  Normalised per profiled step and per traced rank, so runs of
    different sizes compare.

    \b
    Example:
      scaletrace diff demo-gpt-ddp-2 demo-gpt-ddp-4 --db demo.duckdb
      scaletrace diff llama-64 llama-128 --db runs.duckdb --top 10 --format csv
    """
    from scaletrace.reports.explain import run_diff

    try:
        with connect(db) as database:
            result = run_diff(database, run_a, run_b)
    except (queries.QueryError, DatabaseError) as exc:
        fail(str(exc))
    if top is not None:
        result = result.head(top)
    _emit(_select(result, columns, "diff"), fmt)


@main.command(context_settings=CONTEXT)
@click.argument("run", required=False)
@DB_OPTION
@click.option("--run", "run_option", default=None, metavar="RUN", help="Only this run (the same as the RUN argument).")
@click.option("--workload", default=None, help="Only this sweep (run.json `workload`; default: every sweep).")
@FORMAT_OPTION
def explain(run, db, run_option, workload, fmt) -> None:
    """Why a run spends its time where it does, and why efficiency drops across a sweep.

    Every run on its own, sweep or not (a single trace from someone else's job
    too): ranks, steps, step time and where the traced span goes; a device
    busy for a sliver of the step; idle time and what it waited for
    (idle_breakdown); exposed communication by process group and collective
    (run_exposed_comm_by_group); the straggler (rank_wait); compute efficiency
    (compute_efficiency, op_efficiency); kernel time by family (kernel_summary).
    Then, for each sweep, between the best runs of consecutive GPU counts: the
    change of GPU-time per token and the points of scaling efficiency (vs the
    sweep's baseline) lost to compute, exposed communication (of which
    waiting), exposed memory, other and idle (query scaling_attribution), the
    process group behind it and the kernel families that grew.  --format
    csv/json prints only the table: the sweeps' attribution, or where no
    sweep has two GPU counts, the run sentences (run_id, about, sentence).

    \b
    Example:
      scaletrace explain --db demo.duckdb
      scaletrace explain demo-gpt-ddp-4 --db demo.duckdb
      scaletrace explain --db runs.duckdb --workload llama7b --format csv
    """
    from scaletrace.reports.explain import explain as explain_runs, table
    from scaletrace.reports.run_explain import lines

    if run and run_option and run != run_option:
        raise click.UsageError(f"two runs given: {run!r} and --run {run_option!r}")
    run = run or run_option
    try:
        with connect(db) as database:
            if workload:
                database._check_known("workload", workload)
            result = explain_runs(database, workload, run=run)
    except (queries.QueryError, DatabaseError) as exc:
        fail(str(exc))
    if not result.sentences and result.runs.is_empty():
        fail(f"nothing to explain: {db} holds no runs with traces (ingest some with `scaletrace ingest PATH`)")
    if fmt in ("csv", "json"):
        _emit(table(result.attribution) if not result.attribution.is_empty() else result.runs, fmt)
        return
    for sentence in result.sentences:
        echo(sentence)
    if result.sentences:
        click.echo()
    for line in lines(result.runs):
        echo(line)
    if not result.attribution.is_empty():
        click.echo()
        _emit(table(result.attribution), fmt)


@main.command(context_settings=CONTEXT)
@DB_OPTION
@click.option("--workload", default=None, help="Only this sweep (run.json `workload`; default: every sweep).")
@click.option("--to", "to", default=None, metavar="N[,N...]",
              help="GPU counts to project to (default: 2× and 4× the largest measured count).")
@click.option("--what-if", "what_if", default=None, metavar="compute=F,network=F",
              help="Also project with compute F× faster and/or inter-node bandwidth × F.")
@click.option("--format", "fmt", type=click.Choice(["table", "line", "csv", "json"]), default="table",
              show_default=True, help="table for terminals; csv / json for pipes.")
@COLUMNS_OPTION
def project(db, workload, to, what_if, fmt, columns) -> None:
    """Project step time, tokens/s, MFU and scaling efficiency to GPU counts not yet run.

    Per sweep and layout family, from at least three measured GPU counts: compute
    a + b/N (strong scaling) or constant (weak), an α–β ring model of each
    collective's transfer time inside and across nodes, overlap capacity from
    where collectives start under compute, waiting carried forward (README
    "Projection").  Measured rows carry the measured values, the in-sample
    prediction and the leave-one-out error; projected rows the largest LOO error,
    and "not a prediction" in notes (fits false) when it exceeds 50 %.  MFU of a
    measured row is run_summary's (the run's own peak); efficiency is named by
    its baseline: vs the layout family's fewest GPUs, vs the sweep's (`scaling`).

    \b
    Example:
      scaletrace project --db runs.duckdb --to 64,128
      scaletrace project --db runs.duckdb --workload llama7b --to 256 --what-if compute=2,network=0.5
      scaletrace project --db runs.duckdb --format csv
    """
    from scaletrace.queries.analysis.projection import NotIdentifiableError, ProjectionError, parse_what_if
    from scaletrace.queries.analysis.projection_sweeps import MAX_SKIPPED_LINES, project as project_table
    from scaletrace.reports.charts_projection import not_projected_line

    try:
        sizes = [int(x) for x in to.split(",")] if to else None
    except ValueError:
        raise click.UsageError(f"--to wants integers, got {to!r}") from None
    try:
        with connect(db) as database:
            if workload:
                database._check_known("workload", workload)
            result = project_table(database, workload, sizes, parse_what_if(what_if))
    except NotIdentifiableError as exc:  # many sweeps left out: one summary line, not one per sweep
        many = len(exc.skipped) > MAX_SKIPPED_LINES
        fail(not_projected_line(list(exc.skipped), []).removeprefix("Projection: ").rstrip(".") if many else str(exc))
    except (queries.QueryError, DatabaseError, ProjectionError) as exc:
        fail(str(exc))
    _emit(_select(result, columns, "project"), fmt)


if __name__ == "__main__":
    main()
