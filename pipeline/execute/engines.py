"""Where a Parquet-dataset ingest runs its tasks (``scaletrace ingest --parquet DIR --engine``).

``local``: this machine's process pool (``pipeline/execute/workers.py``).  ``ray``: a Ray cluster, the
one at ``--ray-address`` / ``RAY_ADDRESS``, else a local one started for the command and shut
down after it.  Each yields (task, result) as tasks finish; a task that raises, or whose worker
or node dies more often than Ray retries it, yields ``failed(reason)``: that file's one line.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Iterator

from scaletrace.pipeline.common.errors import EngineError
from scaletrace.pipeline.common.imports import without_iri_grammar
from scaletrace.pipeline.execute.workers import in_order, pool_size

ENGINES = ("local", "ray")
RETRIES = 3  # Ray runs a task again this often when its worker or node dies
IN_FLIGHT_PER_CPU = 2  # tasks queued per cluster CPU: enough to keep every node busy, few to cancel


def local(workers: int | None) -> Callable:
    def mapper(fn, tasks, failed) -> Iterator:
        yield from zip(tasks, in_order(fn, [(t,) for t in tasks], pool_size(workers, len(tasks)), failed))
    return mapper


def ray_engine(address: str | None, workers: int | None) -> Callable:
    """A mapper over a Ray cluster; the cluster is joined (or started) when the mapper runs."""
    try:
        with without_iri_grammar():  # Ray imports jsonschema (pipeline/common/imports.py)
            import ray
    except ImportError:
        raise EngineError("--engine ray needs Ray: pip install 'scaletrace[cluster]'") from None
    address = address or os.environ.get("RAY_ADDRESS") or None

    def mapper(fn, tasks, failed) -> Iterator:
        own = not ray.is_initialized()
        if own:
            try:
                # "local": a new cluster, never one that happens to run on this machine
                ray.init(address=address or "local", num_cpus=None if address else workers, include_dashboard=False,
                         log_to_driver=False, logging_level=logging.WARNING, configure_logging=True)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"at {address}" if address else "on this machine"
                raise EngineError(f"cannot start or join a Ray cluster {where}: {_first_line(exc)}") from None
        try:
            yield from _ray_map(ray, fn, tasks, failed)
        finally:
            if own:
                ray.shutdown()

    return mapper


def _ray_map(ray, fn, tasks, failed) -> Iterator:
    # SPREAD: every node takes tasks from the start (the default packs the driver's node first);
    # with traces on a shared filesystem no node is closer to the data than another
    remote = ray.remote(fn).options(num_cpus=1, max_retries=RETRIES, retry_exceptions=False,
                                    scheduling_strategy="SPREAD")
    cpus = int(ray.cluster_resources().get("CPU", 1))
    limit = max(2, IN_FLIGHT_PER_CPU * cpus)
    queue = iter(tasks)
    pending: dict = {}
    try:
        while True:
            for task in queue:
                pending[remote.remote(task)] = task
                if len(pending) >= limit:
                    break
            if not pending:
                return
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    # a worker or node that died was retried RETRIES times first; an exception is not
                    result = failed(f"Ray task failed ({_first_line(exc)})")
                yield task, result
    finally:
        for ref in pending:  # interrupted: the cluster drops what is still queued
            ray.cancel(ref, force=True)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
