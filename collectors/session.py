"""The profiling session: a context manager around a training loop.

    with collectors.profile("runs/llama-8", run=RunInfo(workload="llama", dp=8)) as p:
        for batch in data:
            train_step(batch)
            p.step(tokens=batch.numel())

Per rank it writes ``rank{r}.{host}.{pid}.pt.trace.json.gz`` (the Kineto
trace of the active window), ``rank{r}.steps.jsonl`` (wall-clock time and
tokens of every step) and, on CUDA with NVML, ``rank{r}.power.jsonl``; rank
0 writes ``run.json`` (through ``pipeline/read/manifest.py``'s ``Manifest``, the
type ingest reads).  The collector never breaks the job: any failure of the
profiler, NVML or the disk turns into one warning and training goes on
unprofiled.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import asdict, fields
from pathlib import Path

from scaletrace.collectors import environment
from scaletrace.collectors.config import ProfileConfig, RunInfo
from scaletrace.collectors.power import PowerSampler
from scaletrace.pipeline.read.manifest import Manifest, write_manifest  # msgspec only: no DuckDB in the job

COLLECTOR_VERSION = "1"


class Session:
    def __init__(self, out_dir: str | Path, run: RunInfo | None = None,
                 config: ProfileConfig | None = None, model=None):
        self.out_dir = Path(out_dir)
        self.run = run or RunInfo()
        self.config = config or ProfileConfig()
        self.model = model
        self.steps: list[dict] = []
        self.failed: str | None = None
        self._prof = None
        self._power: PowerSampler | None = None
        self._closed = False
        self._step_start_ns = time.time_ns()
        self.rank, self.world, self.local_world = 0, 1, 1
        self._backend: str | None = None  # read at start: a job may destroy its process group before close

    # -- the public surface -------------------------------------------------
    def __enter__(self) -> "Session":
        self.start()
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False  # never swallow the training job's own exception

    def start(self) -> None:
        self._guard("starting the profiler", self._start)
        self._step_start_ns = time.time_ns()

    def step(self, tokens: int | None = None) -> None:
        """Mark the end of one training step (call after optimizer.step())."""
        now = time.time_ns()
        index = len(self.steps)
        self.steps.append({"step": index, "start_ns": self._step_start_ns,
                           "dur_ns": now - self._step_start_ns, "tokens": tokens,
                           "profiled": self._in_window(index)})
        self._step_start_ns = now
        if self._prof is not None:
            self._guard("profiler step", self._prof.step)
        self._power_at(index + 1)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._prof is not None:
            self._guard("stopping the profiler", self._prof.stop)
        if self._power is not None:
            self._power.stop()
        self._guard("writing the step log", self._write_logs)
        if self.rank == 0:
            self._guard("writing run.json", self._write_manifest)

    # -- internals ------------------------------------------------------------
    def _guard(self, what: str, fn) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - the job must go on whatever failed
            self._prof = None
            if self.failed is None:
                self.failed = f"{what} failed: {type(exc).__name__}: {exc}"
                warnings.warn(f"scaletrace: {self.failed}; training continues without profiling",
                              RuntimeWarning, stacklevel=3)

    def _in_window(self, index: int) -> bool:
        first = self.config.wait + self.config.warmup
        return first <= index < first + self.config.active

    def _start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        self.rank, self.world, self.local_world = environment.rank_and_world()
        self._backend = environment.backend()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        probe = self.out_dir / f".write-test-{self.rank}"
        probe.write_text("")  # fail now, not after the active window, on a read-only dir
        probe.unlink()
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        c = self.config
        sync = _cuda_sync_events() if torch.cuda.is_available() else None
        self._prof = profile(
            activities=activities,
            schedule=schedule(wait=c.wait, warmup=c.warmup, active=c.active, repeat=1),
            on_trace_ready=self._export,
            record_shapes=c.record_shapes,
            with_stack=c.with_stack,
            profile_memory=c.profile_memory,
            **({"experimental_config": sync} if sync is not None else {}),
        )
        self._prof.start()
        if c.sample_power and torch.cuda.is_available():
            self._power = PowerSampler(torch.cuda.current_device(), c.power_interval_s)
        self._power_at(0)

    def _power_at(self, index: int) -> None:
        if self._power is None:
            return
        if index == self.config.wait + self.config.warmup:
            self._power.start()
        elif index == self.config.wait + self.config.warmup + self.config.active:
            self._power.stop()

    def trace_path(self) -> Path:
        import os

        return self.out_dir / f"rank{self.rank}.{environment.host()}.{os.getpid()}.pt.trace.json.gz"

    def _export(self, prof) -> None:
        prof.export_chrome_trace(str(self.trace_path()))

    def _write_logs(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        lines = "".join(json.dumps(s) + "\n" for s in self.steps)
        (self.out_dir / f"rank{self.rank}.steps.jsonl").write_text(lines)
        if self._power is not None and self._power.samples:
            lines = "".join(json.dumps({"ts_ns": t, "watts": w}) + "\n" for t, w in self._power.samples)
            (self.out_dir / f"rank{self.rank}.power.jsonl").write_text(lines)

    def _power_status(self) -> dict:
        if self._power is None:
            reason = "no CUDA device" if self.config.sample_power else "disabled"
            return {"source": None, "reason": reason}
        if self._power.unavailable:
            return {"source": None, "reason": self._power.unavailable}
        return {"source": "nvml", "interval_s": self.config.power_interval_s}

    def _write_manifest(self) -> None:
        r = self.run
        facts = environment.device_facts()
        num_params = r.num_params
        if num_params is None and self.model is not None:
            num_params = float(sum(p.numel() for p in self.model.parameters()))
        peak, source = r.peak_flops, "manifest" if r.peak_flops else None
        if peak is None and facts["on_cpu"]:  # no table knows a CPU's peak: measure it
            peak, source = environment.measure_peak_flops(), "measured"
        columns = {f.name: getattr(r, f.name) for f in fields(r) if f.name != "labels"}  # RunInfo: column names
        columns.update(
            run_id=r.run_id or self.out_dir.name, world_size=self.world,
            num_nodes=max(1, self.world // max(1, self.local_world)), gpus_per_node=self.local_world,
            cpu_cores=environment.cpu_cores(), num_params=num_params, device_name=facts["device"],
            peak_flops=peak, peak_flops_source=source)
        facts["backend"] = facts["backend"] or self._backend  # (run.json is written at close, maybe after
        # destroy_process_group: the zero-code collector closes at exit)
        software = {k: None if facts[k] is None else str(facts[k]) for k in ("torch", "nccl", "backend")}
        manifest = Manifest.from_columns(
            columns, software=software, hosts=[environment.host()], labels=r.labels, power=self._power_status(),
            collector={"version": COLLECTOR_VERSION, "schedule": asdict(self.config),
                       "steps_logged": len(self.steps), "problem": self.failed})
        write_manifest(self.out_dir, manifest)


def profile(out_dir: str | Path, run: RunInfo | None = None, config: ProfileConfig | None = None,
            model=None) -> Session:
    """A profiling session for a training loop (see the module docstring)."""
    return Session(out_dir, run, config, model)


def _cuda_sync_events():
    """Kineto's CUDA synchronization events on (stream waits, event and device syncs: the exact
    cross-stream edges of the critical path), or None where this torch has no such option."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except (ImportError, TypeError):  # older torch: no experimental config, or no such keyword
        return None
