"""Zero-code profiling: profile an unmodified script, one step per optimizer step.

`scaletrace collect` starts the command with ``collectors/_boot`` on
PYTHONPATH, so every Python process it launches runs ``install()`` first.
``install()`` does not import torch; it waits for the script to import
``torch.optim.optimizer`` and then registers a global optimizer-step post
hook (``torch.optim.optimizer.register_optimizer_step_post_hook``).

Mechanism and limits:

* the profiling session starts at the first optimizer step, so step 0 is
  never profiled and the step log starts at step 1;
* one step = one ``step()`` of the first optimizer that steps; other
  optimizers (e.g. a second one for embeddings) do not advance the schedule;
* a job that never calls ``optimizer.step()`` (torchrun's launcher, data
  loader workers) is never profiled;
* the session closes at interpreter exit (``atexit``); a process killed by a
  signal writes nothing;
* a sitecustomize already on the path is run after ours.

Configuration comes from the environment that `scaletrace collect` sets:
``SCALETRACE_COLLECT_OUT`` (run directory), ``SCALETRACE_RUN_ID``,
``SCALETRACE_STEPS`` (wait,warmup,active) and ``SCALETRACE_META`` (JSON
object of run.json facts).
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import sys
from dataclasses import fields

from scaletrace.collectors.config import ProfileConfig, RunInfo
from scaletrace.pipeline.read.manifest import COLUMNS

TARGET = "torch.optim.optimizer"
_state: dict = {"session": None, "optimizer": None}


def run_info_from_meta(meta: dict) -> RunInfo:
    """``{"workload": "x", "parallel.dp": 4, "model.num_params": 1e9, "fabric": "IB"}`` -> RunInfo;
    a run.json path (``parallel.dp``, ``model.name``) stands for its column (``dp``, ``model_name``:
    ``pipeline/read/manifest.py``); keys that are not RunInfo fields become labels."""
    names = {f.name for f in fields(RunInfo)}
    column_of = {".".join(path): column for column, path in COLUMNS.items()}
    run, labels = {}, {}
    for key, value in meta.items():
        short = column_of.get(key, key)
        if short in names and short != "labels":
            run[short] = value
        else:
            labels[key] = value
    return RunInfo(**run, labels=labels)


def _hook(optimizer, args, kwargs) -> None:
    try:
        if _state["optimizer"] is None:  # the first step's end starts the session
            _state["optimizer"] = id(optimizer)
            _start()
        elif id(optimizer) == _state["optimizer"] and _state["session"] is not None:
            _state["session"].step()
    except Exception as exc:  # noqa: BLE001 - never break the job
        print(f"scaletrace: collector step failed ({exc})", file=sys.stderr)


def _start() -> None:
    from scaletrace.collectors.session import Session

    meta = json.loads(os.environ.get("SCALETRACE_META") or "{}")
    run = run_info_from_meta(meta)
    run.run_id = os.environ.get("SCALETRACE_RUN_ID") or run.run_id
    config = ProfileConfig.parse_steps(os.environ.get("SCALETRACE_STEPS", "2,1,3"))
    session = Session(os.environ["SCALETRACE_COLLECT_OUT"], run, config)
    session.start()
    _state["session"] = session
    atexit.register(session.close)


def _on_import(module) -> None:
    module.register_optimizer_step_post_hook(_hook)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs ``_on_import`` right after ``torch.optim.optimizer`` is executed."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # one shot: find the real spec without us
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_hook(module):
            exec_module(module)
            try:
                _on_import(module)
            except Exception as exc:  # noqa: BLE001 - never break the job
                print(f"scaletrace: optimizer hook not installed ({exc})", file=sys.stderr)

        spec.loader.exec_module = exec_and_hook
        return spec


def install() -> None:
    if TARGET in sys.modules:
        _on_import(sys.modules[TARGET])
    else:
        sys.meta_path.insert(0, _PostImportFinder())
