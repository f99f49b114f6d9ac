"""The collector's step log times steps on the device where the job uses one, and leaves the collector's
own work (the trace's export at the window's end) out of every step.  A fake device module stands for
torch.cuda: one stream whose work runs in order, behind the host or ahead of it, on a fake clock; no
torch is imported.

Per step the job's host queues W ms of device work in H ms.  Device behind (W > H): the host returns
after H, the device ends each step W after the previous one, so the step takes W (60 ms) while its
host time is H (15 ms).  Host-bound (H > W): the device waits for the host, the step takes H.  The
profiler's export at the end of the last active step takes E ms of host time in no step.
"""

from __future__ import annotations

import json
import warnings

import pytest

from scaletrace.collectors import ProfileConfig, Session
from scaletrace.collectors import session as session_module

MS = 1_000_000  # ns


class FakeDevice:
    """torch.cuda's surface the collector uses: is_initialized() and Event(enable_timing=True) with
    record(), query(), synchronize(), elapsed_time(); one stream on the host's fake clock (ms)."""

    def __init__(self, initialized: bool = True) -> None:
        self.host_ms = 0.0
        self.busy_until_ms = 0.0  # the stream's queued work ends here
        self.initialized = initialized
        self.events: list = []
        device = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing and device.initialized  # never creates a context
                self.at_ms = None
                device.events.append(self)

            def record(self) -> None:  # runs when the stream reaches it
                self.at_ms = device.busy_until_ms = max(device.busy_until_ms, device.host_ms)

            def query(self) -> bool:
                return device.host_ms >= self.at_ms

            def synchronize(self) -> None:
                device.host_ms = max(device.host_ms, self.at_ms)

            def elapsed_time(self, end) -> float:
                assert self.query() and end.query()  # as CUDA: both must have completed
                return end.at_ms - self.at_ms

        self.Event = Event

    def is_initialized(self) -> bool:
        return self.initialized

    def launch(self, work_ms: float, host_ms: float) -> None:
        """The host queues ``work_ms`` of device work, taking ``host_ms`` to do it."""
        self.busy_until_ms = max(self.busy_until_ms, self.host_ms) + work_ms
        self.host_ms += host_ms


class FakeProfiler:
    """torch.profiler's step(): the export at the end of the window takes ``export_ms`` of host time."""

    def __init__(self, device: FakeDevice, export_after: int, export_ms: float) -> None:
        self.device, self.export_after, self.export_ms, self.calls = device, export_after, export_ms, 0

    def step(self) -> None:
        self.calls += 1
        if self.calls == self.export_after:
            self.device.host_ms += self.export_ms

    def stop(self) -> None:
        pass


def _run(monkeypatch, tmp_path, work_ms, host_ms, steps=8, export_ms=600.0, device=None):
    device = device or FakeDevice()
    monkeypatch.setattr(session_module, "_now_ns", lambda: round(device.host_ms * MS))
    monkeypatch.setattr(session_module, "_device_module", lambda: device if device.initialized else None)
    config = ProfileConfig(wait=1, warmup=1, active=2)
    s = Session(tmp_path / "run", config=config)
    s.rank = 1  # no run.json (rank 0's): nothing here imports torch
    last_active = config.wait + config.warmup + config.active  # the export runs in this step() call
    s._prof = FakeProfiler(device, export_after=last_active, export_ms=export_ms)
    s._begin_step()  # as start() does, without torch.profiler
    for _ in range(steps):
        device.launch(work_ms, host_ms)
        s.step(tokens=10)
    s.close()
    lines = (tmp_path / "run" / "rank1.steps.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines], device


def test_a_device_behind_the_host_times_its_own_steps(monkeypatch, tmp_path):
    work, host = 60.0, 15.0
    steps, _ = _run(monkeypatch, tmp_path, work, host)
    assert [s["clock"] for s in steps] == ["device"] * 8
    assert [s["dur_ns"] for s in steps] == [round(work * MS)] * 8  # W a step, the export's step too
    assert [s["host_dur_ns"] for s in steps] == [round(host * MS)] * 8  # what the log held before


def test_a_host_bound_step_takes_the_hosts_time(monkeypatch, tmp_path):
    work, host = 5.0, 20.0  # the device waits for the host: the step's events are H apart
    steps, _ = _run(monkeypatch, tmp_path, work, host)
    assert [s["dur_ns"] for s in steps] == [round(host * MS)] * 8


def test_the_export_is_in_no_step_without_a_device(monkeypatch, tmp_path):
    """CPU job: host time, and the step after the window no longer holds the 600 ms export."""
    host = 15.0
    steps, device = _run(monkeypatch, tmp_path, 0.0, host, device=FakeDevice(initialized=False))
    assert [s["clock"] for s in steps] == ["host"] * 8 and not device.events  # no event, no context
    assert [s["dur_ns"] for s in steps] == [round(host * MS)] * 8
    # the log's steps tile the host's time but for the export: Σ steps = 8 H = the clock's end − E
    assert sum(s["dur_ns"] for s in steps) == round((device.host_ms - 600.0) * MS)


def test_a_failing_device_clock_is_one_warning_and_host_time(monkeypatch, tmp_path):
    device = FakeDevice()
    calls = {"n": 0}

    def record_fails_on_third(self, original=device.Event.record):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("CUDA error: an illegal memory access")
        original(self)

    monkeypatch.setattr(device.Event, "record", record_fails_on_third)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        steps, _ = _run(monkeypatch, tmp_path, 60.0, 15.0, device=device)
    said = [str(w.message) for w in caught if "scaletrace" in str(w.message)]
    assert len(said) == 1 and "host time" in said[0]
    assert len(steps) == 8  # training went on, every step logged
    # events 1, 2: step 0's start and end; the third (step 1's start, host 15 ms) failed before the
    # device reached step 0's end (60 ms): no event is trusted after a device error, all host time
    assert [s["clock"] for s in steps] == ["host"] * 8
    assert [s["dur_ns"] for s in steps] == [15 * MS] * 8


@pytest.mark.parametrize("work, host, waited", [(60.0, 15.0, 3), (5.0, 20.0, 0)])
def test_resolved_without_waiting_until_close(monkeypatch, tmp_path, work, host, waited):
    """Each step asks its earlier events, never waits; close waits for the steps still queued.
    Device behind (W 60, H 15): the export (600 ms after step 3) lets the device catch up; steps 4-7
    start at host 660 ms and end on the device at 660 + 60 k = 720, 780, 840, 900 ms, while the host
    closes at 660 + 4 × 15 = 720 ms: step 4 has completed, steps 5, 6, 7 are waited for (3).
    Host-bound (W 5, H 20): every step's end is reached as it is recorded: none is waited for."""
    device = FakeDevice()
    waits = []
    original = device.Event.synchronize
    monkeypatch.setattr(device.Event, "synchronize", lambda self: (waits.append(self), original(self)))
    _run(monkeypatch, tmp_path, work, host, device=device)
    assert len(waits) == waited


def test_ingest_reads_the_device_times(monkeypatch, tmp_path):
    """The log's new keys (clock, host_dur_ns) are no error at ingest: dur_ns is the device's time."""
    from scaletrace.pipeline.read import sidefiles

    steps, _ = _run(monkeypatch, tmp_path, 60.0, 15.0)
    table = sidefiles.decode((tmp_path / "run" / "rank1.steps.jsonl").read_bytes(), "steps")
    assert table.column("dur_ns").to_pylist() == [60 * MS] * 8
