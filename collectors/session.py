"""The profiling session: a context manager around a training loop.

    with collectors.profile("runs/llama-8", run=RunInfo(workload="llama", dp=8)) as p:
        for batch in data:
            train_step(batch)
            p.step(tokens=batch.numel())

Per rank it writes ``rank{r}.{host}.{pid}.pt.trace.json.gz`` (the Kineto
trace of the active window), ``rank{r}.steps.jsonl`` (the time and tokens of
every step: on the device where the job uses one, ``_DeviceClock``) and, on
CUDA with NVML, ``rank{r}.power.jsonl``; rank
0 writes ``run.json`` (through ``pipeline/read/manifest.py``'s ``Manifest``, the
type ingest reads).  The collector never breaks the job: any failure of the
profiler, NVML or the disk turns into one warning and training goes on
unprofiled.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import asdict, fields
from pathlib import Path

from scaletrace.collectors import environment
from scaletrace.collectors.config import ProfileConfig, RunInfo
from scaletrace.collectors.power import PowerSampler
from scaletrace.pipeline.read.manifest import Manifest, write_manifest  # msgspec only: no DuckDB in the job

COLLECTOR_VERSION = "1"
DEVICE_MODULES = ("cuda", "xpu")  # torch.<name>: CUDA (and ROCm, through torch.cuda), Intel XPU
_now_ns = time.time_ns  # the host's clock (a test's fake clock replaces it)


def _device_module():
    """The ``torch.<name>`` device module the job has initialised (it runs on that device), else None.
    Never initialises one itself: a CPU job on a GPU machine gets no device context from the collector."""
    torch = sys.modules.get("torch")
    for name in DEVICE_MODULES if torch is not None else ():
        module = getattr(torch, name, None)
        try:
            if module is not None and module.is_initialized():
                return module
        except Exception:  # noqa: BLE001 - a broken device module is no device to time on
            continue
    return None


class _DeviceClock:
    """Each step's time on the device, from two timing events on the current stream: one recorded when
    the step starts (after the collector's own work at the previous boundary), one when it ends.

    The host returns from a step as soon as its work is queued, so where the device runs behind, host
    time is the launch time (15 ms where the device took 60 ms); the events complete when the device
    reaches them, so their distance is the step's time on the device: its work, and any wait for the
    host (a host-bound step's events are as far apart as the host's). No synchronize: each step asks
    its earlier steps' events whether they completed (``query``, never blocking), so the job's host
    and device overlap as without the collector; ``finish`` waits for the last ones at close.
    """

    def __init__(self) -> None:
        self.pending: list[tuple[dict, object, object]] = []  # (step record, start event, end event)

    @staticmethod
    def mark():
        """A timing event recorded on the device's current stream, or None (no device in use)."""
        module = _device_module()
        if module is None:
            return None
        event = module.Event(enable_timing=True)
        event.record()
        return event

    def timed(self, record: dict, start, end) -> None:
        if start is not None and end is not None:
            self.pending.append((record, start, end))

    def resolve(self, wait: bool = False) -> None:
        """Device time into the records of the steps whose events completed (all of them: ``wait``)."""
        while self.pending:
            record, start, end = self.pending[0]
            if wait:
                end.synchronize()
            elif not end.query():
                return
            self.pending.pop(0)
            record["host_dur_ns"] = record["dur_ns"]
            record["dur_ns"] = max(1, round(start.elapsed_time(end) * 1e6))  # ms -> ns
            record["clock"] = "device"


class Session:
    def __init__(self, out_dir: str | Path, run: RunInfo | None = None,
                 config: ProfileConfig | None = None, model=None):
        self.out_dir = Path(out_dir)
        self.root_dir = self.out_dir  # the directory asked for; a later profiling window gets one of its own
        self.window = 0  # which profiling window of the directory this is (1, 2, ...); 0: not chosen yet
        self.run = run or RunInfo()
        self.config = config or ProfileConfig()
        self.model = model
        self.steps: list[dict] = []
        self.failed: str | None = None
        self._prof = None
        self._power: PowerSampler | None = None
        self._closed = False
        self._step_start_ns = _now_ns()
        self._clock: _DeviceClock | None = _DeviceClock()  # None once it failed: host time from then on
        self._step_start_event = None
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
        self._begin_step()

    def step(self, tokens: int | None = None) -> None:
        """Mark the end of one training step (call after optimizer.step())."""
        now = _now_ns()
        end = self._on_clock(_DeviceClock.mark)
        index = len(self.steps)
        record = {"step": index, "start_ns": self._step_start_ns, "dur_ns": now - self._step_start_ns,
                  "tokens": tokens, "profiled": self._in_window(index), "clock": "host"}
        self.steps.append(record)
        if self._clock is not None:
            self._clock.timed(record, self._step_start_event, end)
        if self._prof is not None:
            self._guard("profiler step", self._prof.step)  # the trace's export runs here, at the window's end
        self._power_at(index + 1)
        self._begin_step()  # after the collector's own work: no step's time holds an export or a start
        if self._clock is not None:
            self._on_clock(self._clock.resolve)

    def _begin_step(self) -> None:
        self._step_start_ns = _now_ns()
        self._step_start_event = self._on_clock(_DeviceClock.mark)

    def _on_clock(self, fn, *args):
        """``fn(*args)`` of the device clock; a failure is one warning and host time from then on."""
        if self._clock is None:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the job must go on whatever failed
            self._clock = None
            warnings.warn(f"scaletrace: timing steps on the device failed ({type(exc).__name__}: {exc}); "
                          "the step log holds host time from here on", RuntimeWarning, stacklevel=3)
            return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._prof is not None:
            self._guard("stopping the profiler", self._prof.stop)
        if self._power is not None:
            self._power.stop()
        if self._clock is not None:
            self._on_clock(self._clock.resolve, True)  # the last steps' events: the device's time of them too
        if not self.window:  # the start failed before choosing: never over an earlier window's logs
            self._guard("choosing the run directory", self._own_window)
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
        self._own_window()
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

    def _own_window(self) -> None:
        """Each profiling window is a run of its own: where the directory already holds this rank's
        trace or step log (a job that trains twice, in one process or two, into one directory:
        two rank-0 traces made its run fail to ingest, "duplicate rank 0"), this window goes to
        ``DIR/window-N`` and its run id gets ``-window-N``.  Every rank counts its own earlier
        windows, so the ranks of one window agree without talking; ``scaletrace ingest DIR`` finds
        every window (a run per directory)."""
        self.window = 1
        while _holds_rank(self.out_dir, self.rank):
            self.window += 1
            self.out_dir = self.root_dir / f"window-{self.window}"
        if self.window > 1 and self.rank == 0:
            warnings.warn(f"scaletrace: {self.root_dir} holds an earlier profiling window; this one is written to "
                          f"{self.out_dir} as run '{self._run_id()}'", RuntimeWarning, stacklevel=4)

    def _run_id(self) -> str:
        """run.json's run_id: the one given, else the directory's name; ``-window-N`` from the second window on."""
        base = self.run.run_id or self.root_dir.name
        return base if self.window <= 1 else f"{base}-window-{self.window}"

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
            run_id=self._run_id(), world_size=self.world,
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


def _holds_rank(directory: Path, rank: int) -> bool:
    """Whether ``directory`` holds a trace or a step log of ``rank`` (an earlier profiling window's)."""
    return (directory / f"rank{rank}.steps.jsonl").exists() or any(directory.glob(f"rank{rank}.*.pt.trace.json*"))


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
