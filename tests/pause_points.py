"""``python pause_points.py POINT DIR ARGS...``: ``scaletrace ARGS`` (as the console script runs it),
paused at one point of an ingest so that a test's signal lands there (tests/test_signals.py).

At the point's Nth call, in whichever process makes it (the parent, or a parse worker), the
process writes its pid to ``DIR/paused`` and sleeps until a signal ends the ingest.  The
points, each where an ingest spends its time:

* ``parse``: a worker's extract, the third file's (the parent waits for its result);
* ``write``: the DuckDB writer's rows of its second batch (put in, not yet committed), or a
  Parquet task's parts of its second file (on disk, no commit record yet);
* ``commit``: the DuckDB writer's second batch, its ingest log written, just before COMMIT; or
  the Parquet driver's third trace, its commit record just renamed into place.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import time
from pathlib import Path

from scaletrace import _stop_at_start

_stop_at_start()  # as the console script: Ctrl-C and SIGTERM are one line from the first import

from scaletrace.pipeline.common import interrupt  # noqa: E402
from scaletrace.pipeline.execute import dataset, ingest  # noqa: E402
from scaletrace.pipeline.store import write  # noqa: E402

PAUSE_S = 60  # the test's signal comes long before


def _pause_at(nth: int, out: Path, fn):
    """``fn``, then the pause at its ``nth`` call among all processes."""
    @functools.wraps(fn)
    def paused(*args, **kwargs):
        result = fn(*args, **kwargs)
        if _count(out) == nth:
            (out / "paused.tmp").write_text(str(os.getpid()))
            (out / "paused.tmp").replace(out / "paused")
            _pause()
        return result
    return paused


def _pause() -> None:
    """Until the signal: its KeyboardInterrupt, or, where a step holds it (interrupt.held), the
    request it leaves; a worker ignores it and waits to be stopped."""
    deadline = time.monotonic() + PAUSE_S
    while not interrupt.requested() and time.monotonic() < deadline:
        time.sleep(0.01)


def _count(out: Path) -> int:
    """This call's number: the first free ``DIR/call-N`` (exclusive creation: one per call,
    across the worker processes)."""
    for n in itertools.count(1):
        try:
            os.close(os.open(out / f"call-{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return n
        except FileExistsError:
            continue


def patch(point: str, parquet: bool, out: Path) -> None:
    if point == "parse":  # the forked workers inherit it
        ingest.extract = _pause_at(3, out, ingest.extract)
    elif point == "write" and parquet:
        dataset.write_parts = _pause_at(2, out, dataset.write_parts)
    elif point == "write":
        write.append_rows = _pause_at(2, out, write.append_rows)
    elif point == "commit" and parquet:
        dataset.Dataset.commit = _pause_at(3, out, dataset.Dataset.commit)
    elif point == "commit":
        ingest.log_outcomes = _pause_at(2, out, ingest.log_outcomes)
    else:
        raise SystemExit(f"unknown point {point!r}")


if __name__ == "__main__":
    point, out, *args = sys.argv[1:]
    patch(point, "--parquet" in args, Path(out))
    from scaletrace.cli import main

    sys.argv[0] = "scaletrace"
    main(args)
