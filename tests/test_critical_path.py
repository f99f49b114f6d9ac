"""The critical path (queries critical_path, critical_path_summary; queries/analysis/critical_path.py).

Generated traces with a known path: each rank of a step launches one compute kernel (stream 7), a
DP all_reduce (stream 20) that starts when that kernel ends and ends on every rank `transfer` after
the last rank arrived, optionally a second compute kernel that hides the all_reduce, then blocks in
cudaDeviceSynchronize until its GPU work is done.  The expected segments are worked out below from
the scenario's numbers, not from the code under test.  On the eight real DLRM ranks the path is
checked against the raw JSON (the last arrival at each collective, the ranks' step times)."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import SHARED_TRACES, query
from scaletrace.pipeline import ingest
from scaletrace.pipeline.read.vocabulary import RUNTIME_CATS

US = 1000  # ns per µs
AR_NAME = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


class _Recorder:
    """A rank's events as a generator writes them: runtime calls numbered by correlation id, and the
    kernels they launched."""

    def __init__(self):
        self.events, self.corr = [], 0

    def call(self, name, ts, dur) -> int:
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts,
                            "dur": dur, "args": {"correlation": self.corr}})
        return self.corr

    def kernel(self, name, ts, dur, stream, c, **args) -> None:
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
                            "dur": dur, "args": {"device": 0, "stream": stream, "correlation": c, **args}})


def _write_run(run: Path, ranks: int, events) -> Path:
    run.mkdir(parents=True)
    for r in range(ranks):
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
               "distributedInfo": {"rank": r, "world_size": ranks, "backend": "nccl"},
               "traceEvents": events(r)}
        (run / f"rank{r}.json").write_text(json.dumps(doc))
    return run


@dataclass
class Scenario:
    """Times in µs.  Rank r launches its first kernel host_us[r] after its step starts."""

    ranks: int = 3
    steps: int = 2
    step_us: int = 0  # the annotation of every step lasts this long; 0: 20 µs past the last sync
    host_us: dict = field(default_factory=dict)  # rank -> host time before the first launch (default 10)
    compute_us: dict = field(default_factory=dict)  # rank -> the first kernel's duration (default 100)
    launch_delay_us: int = 5  # the first kernel starts this long after its launch call starts
    transfer_us: int = 50
    hide_us: int = 0  # > 0: a second kernel of this length right after the first hides the all_reduce

    def __post_init__(self):
        if not self.step_us:
            self.step_us = 1 << 40  # only for the span: the offsets within a step do not depend on it
            self.step_us = max(v["sync1"] for v in self.times(0).values()) + 20

    def host(self, r):
        return self.host_us.get(r, 10)

    def compute(self, r):
        return self.compute_us.get(r, 100)

    def times(self, step):
        """Per rank: launch, kernel start, kernel end, all_reduce start, all_reduce end, GPU end, sync end."""
        s0 = step * self.step_us
        out = {}
        for r in range(self.ranks):
            launch = s0 + self.host(r)
            k0 = launch + self.launch_delay_us
            k1 = k0 + self.compute(r)
            out[r] = dict(launch=launch, k0=k0, k1=k1, ar0=k1 + 1)
        last = max(v["ar0"] for v in out.values())
        for r, v in out.items():
            v["ar1"] = last + self.transfer_us
            v["h1"] = v["k1"] + self.hide_us if self.hide_us else None
            v["gpu_end"] = max(v["ar1"], v["h1"] or 0)
            v["sync0"] = v["launch"] + 8
            v["sync1"] = v["gpu_end"] + 2
        return out

    def events(self, rank):
        rec = _Recorder()
        ev, call, kernel = rec.events, rec.call, rec.kernel

        for step in range(self.steps):
            t = self.times(step)[rank]
            s0 = step * self.step_us
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": s0, "dur": self.step_us, "args": {}})
            kernel("sm90_xmma_gemm_bf16bf16_bf16f32", t["k0"], t["k1"] - t["k0"], 7,
                   call("cudaLaunchKernel", t["launch"], 2))
            kernel(AR_NAME, t["ar0"], t["ar1"] - t["ar0"], 20, call("cudaLaunchKernel", t["launch"] + 3, 2),
                   **{"Collective name": "allreduce", "Process Group Name": "0", "Group size": self.ranks,
                      "dtype": "Float", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20})
            if self.hide_us:
                kernel("flash_fwd_kernel", t["k1"], self.hide_us, 7, call("cudaLaunchKernel", t["launch"] + 6, 1))
            call("cudaDeviceSynchronize", t["sync0"], t["sync1"] - t["sync0"])
        return ev

    def write(self, root: Path, name: str) -> Path:
        return _write_run(root / name, self.ranks, self.events)


def _paths(tmp_path, scenario: Scenario):
    run = scenario.write(tmp_path, "cp")
    db = tmp_path / "cp.duckdb"
    report = ingest([run], db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return query(db, "critical_path"), query(db, "critical_path_summary")


def _kinds(summary_row: dict) -> dict:
    return {k: summary_row[f"{k}_ns"] for k in ("compute_kernel", "memory", "comm_transfer", "comm_wait",
                                                 "launch_delay", "cpu_op", "host_gap")}


def _expected_through(sc: Scenario, step: int, straggler: int) -> dict:
    """The path of a step that runs through `straggler`'s host, launch and kernel into the all_reduce,
    which every rank leaves `transfer` after the straggler arrived; the step ends on the lowest rank
    of those with the longest step (all annotations are equally long: rank 0), which after the
    all_reduce blocks in cudaDeviceSynchronize (2 µs) and then runs to its annotation's end."""
    t = sc.times(step)[straggler]
    s0 = step * sc.step_us
    return {"host_gap": (t["launch"] - s0) + (s0 + sc.step_us - sc.times(step)[0]["sync1"]),
            "launch_delay": sc.launch_delay_us + 1,  # the launch, and the all_reduce's start after the kernel
            "compute_kernel": sc.compute(straggler), "comm_transfer": sc.transfer_us, "comm_wait": 0,
            "cpu_op": 2, "memory": 0}


def _us(d: dict) -> dict:
    return {k: v * US for k, v in d.items()}


def test_a_rank_whose_host_is_late_bounds_the_step(tmp_path):
    sc = Scenario(ranks=3, host_us={1: 900})
    path, summary = _paths(tmp_path, sc)
    for row in summary.iter_rows(named=True):
        assert row["path_ns"] == row["step_ns"] == sc.step_us * US
        assert _kinds(row) == _us(_expected_through(sc, row["step"], straggler=1))
        assert row["top_rank"] == 1 and row["top_op_kind"] == "host_gap" and row["top_op_rank"] == 1
        assert row["top_op_ns"] == 900 * US
        # the host's wait ends in rank 1's kernel and all_reduce: the path crosses from rank 0 to rank 1
        assert row["num_ranks"] == 2
    step0 = path.filter(path["step"] == 0)
    assert step0["seq"].to_list() == list(range(step0.height))
    assert step0["offset_ns"].to_list() == [0, *step0["dur_ns"].cum_sum().to_list()[:-1]]
    first = step0.row(0, named=True)
    assert (first["rank"], first["kind"], first["dur_ns"], first["lane"]) == (1, "host_gap", 900 * US, "thread 1")
    kernel = step0.filter(step0["kind"] == "compute_kernel").row(0, named=True)
    assert kernel["rank"] == 1 and kernel["lane"] == "stream 7" and kernel["start_ns"] == sc.times(0)[1]["k0"] * US


def test_a_slow_kernel_on_one_rank_bounds_the_step(tmp_path):
    sc = Scenario(ranks=4, compute_us={2: 1500}, transfer_us=40)
    _, summary = _paths(tmp_path, sc)
    for row in summary.iter_rows(named=True):
        assert _kinds(row) == _us(_expected_through(sc, row["step"], straggler=2))
        assert row["top_rank"] == 2 and row["top_op_kind"] == "compute_kernel"
        assert row["top_op"] == "sm90_xmma_gemm_bf16bf16_bf16f32" and row["top_op_ns"] == 1500 * US
        # exposed communication: rank r waits (latest arrival − its own) then transfers, none hidden
        t = sc.times(row["step"])
        waits = [t[2]["ar0"] - t[r]["ar0"] for r in range(sc.ranks)]
        assert row["exposed_comm_ns"] == round(sum(w + sc.transfer_us for w in waits) / sc.ranks * US)
        # on the path: the transfer only (the waiting ranks' wait is off the path), none under compute
        assert row["blocking_comm_ns"] == row["comm_transfer_ns"] == sc.transfer_us * US
        assert row["blocking_comm_pct_of_path_comm"] == pytest.approx(100)


def test_a_collective_whose_transfer_dominates(tmp_path):
    sc = Scenario(ranks=2, transfer_us=3000)
    _, summary = _paths(tmp_path, sc)
    for row in summary.iter_rows(named=True):
        assert _kinds(row) == _us(_expected_through(sc, row["step"], straggler=0))  # all arrive at once: rank 0's own
        assert row["top_op_kind"] == "comm_transfer" and row["top_op_ns"] == 3000 * US
        assert row["comm_transfer_ns"] > 0.5 * row["path_ns"]
        assert row["exposed_comm_ns"] == row["blocking_comm_ns"] == 3000 * US  # all of it on the path
        assert row["blocking_comm_pct_of_path_comm"] == pytest.approx(100)


def test_communication_fully_hidden_is_not_on_the_path(tmp_path):
    sc = Scenario(ranks=2, hide_us=400, transfer_us=100)
    path, summary = _paths(tmp_path, sc)
    for row in summary.iter_rows(named=True):
        step = row["step"]
        t = sc.times(step)[0]
        s0 = step * sc.step_us
        assert _kinds(row) == _us({"host_gap": (t["launch"] - s0) + (s0 + sc.step_us - t["sync1"]),
                                   "launch_delay": sc.launch_delay_us, "compute_kernel": 100 + 400,
                                   "comm_transfer": 0, "comm_wait": 0, "cpu_op": 2, "memory": 0})
        assert row["exposed_comm_ns"] == 0 and row["blocking_comm_ns"] == 0
        assert row["blocking_comm_pct_of_path_comm"] is None  # no communication on the path
        assert row["num_ranks"] == 1
    assert "flash_fwd_kernel" in path["name"].to_list()


def test_the_graph_reads_the_runtime_categories_of_the_vocabulary():
    """The runtime calls are the graph's host nodes; the collective ops and the step annotations are
    the other host events: each list is the vocabulary's."""
    macros = Path(__file__).parents[1] / "queries" / "macros"
    graph, steps = (macros / "critical_path_graph.sql").read_text(), (macros / "critical_path_steps.sql").read_text()

    def listed(sql: str, after: str) -> set:
        return {c.strip().strip("'") for c in sql.split(after, 1)[1].split(")", 1)[0].split(",")}

    assert listed(graph, "lower(c.cat) IN (") == set(RUNTIME_CATS)
    assert listed(graph, "lower(c.cat) NOT IN (") == set(RUNTIME_CATS)
    assert listed(steps, "lower(cat) NOT IN (") == set(RUNTIME_CATS) | {"gpu_user_annotation"}


def test_the_graph_reads_the_collective_ops_of_the_vocabulary():
    from scaletrace.pipeline.read.vocabulary import COLLECTIVE_OP_PREFIXES

    sql = (Path(__file__).parents[1] / "queries" / "macros" / "critical_path_graph.sql").read_text()
    ops = sql.split("coll_ops AS (", 1)[1].split("),", 1)[0]
    assert set(re.findall(r"starts_with\(c\.name, '([^']+)'\)", ops)) == set(COLLECTIVE_OP_PREFIXES)


# --- the eight real DLRM ranks -------------------------------------------------------------------

DLRM = SHARED_TRACES / "param-dlrm-8rank"


def _raw_dlrm():
    """Per rank: the step window (µs: the ProfilerStep's start, the later of its end and the last
    kernel's end) and the NCCL kernels as {index in traceEvents: (k, start)}, k their start order."""
    ranks = {}
    for r in range(8):
        doc = json.loads(gzip.decompress((DLRM / f"rank{r}.json.gz").read_bytes()))
        events = doc["traceEvents"]
        step = next(e for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")
                    and e["cat"] == "user_annotation")
        nccl = sorted((e["ts"], i) for i, e in enumerate(events)
                      if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel"))
        kernels_end = max(e["ts"] + e["dur"] for e in events if e.get("cat") == "kernel")
        ranks[r] = (step["ts"], max(step["ts"] + step["dur"], kernels_end),
                    {i: (k, ts) for k, (ts, i) in enumerate(nccl)})
    return ranks


@pytest.fixture(scope="module")
def dlrm(shared_db):
    """The DLRM run's path and summary, from shared_db (every shared run, ingested once for the suite)."""
    run = DLRM.name
    return (query(shared_db, "critical_path", run_id=run), query(shared_db, "critical_path_summary", run_id=run),
            _raw_dlrm())


def test_dlrm_path_is_the_slowest_rank_step(dlrm):
    path, summary, raw = dlrm
    (row,) = summary.iter_rows(named=True)
    slowest = max(raw, key=lambda r: (raw[r][1] - raw[r][0], -r))
    assert row["slowest_rank"] == slowest
    assert row["path_ns"] == row["step_ns"] == (raw[slowest][1] - raw[slowest][0]) * US
    assert path["dur_ns"].sum() == row["path_ns"] and (path["dur_ns"] > 0).all()


def test_dlrm_path_runs_through_the_rank_that_arrives_last(dlrm):
    path, summary, raw = dlrm
    (row,) = summary.iter_rows(named=True)
    # independently: the k-th NCCL kernel of every rank is one collective; its last arrival
    n = len(raw[0][2])
    assert all(len(raw[r][2]) == n for r in raw)
    starts = {r: {k: ts for k, ts in raw[r][2].values()} for r in raw}
    last = [max(raw, key=lambda r: (starts[r][k], -r)) for k in range(n)]
    most = max(sorted(set(last)), key=last.count)  # the straggler rank_wait names (arrived last most often)
    assert row["top_rank"] == most and most in path["rank"].to_list()
    # each collective the path crosses: its transfer on some rank, and just before it the path is on
    # the collective's last arrival (the members that arrived earlier waited off the path)
    rows = path.rows(named=True)
    crossed = 0
    for before, seg in zip(rows, rows[1:]):
        if seg["kind"] == "comm_transfer" and before["kind"] not in ("comm_transfer", "comm_wait"):
            k, _ = raw[seg["rank"]][2][seg["event_id"]]
            assert before["rank"] == last[k] or seg["rank"] == last[k], (k, before, seg)
            crossed += 1
    assert crossed >= 1


def test_dlrm_path_runs_through_the_device_work_its_host_waited_for(dlrm):
    """Where the path holds a blocking call (a synchronize, a memcpy) in which a device event of its
    rank ended (read from the raw JSON), the call's time on the path starts at the end of the device
    event that ended last inside it, and the segment before is that event's, on its stream."""
    path, _, _ = dlrm
    blocking = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync"}
    raw = {}
    for r in range(8):
        events = json.loads(gzip.decompress((DLRM / f"rank{r}.json.gz").read_bytes()))["traceEvents"]
        calls = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e.get("name") in blocking]
        device = [e["ts"] + e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        raw[r] = calls, device
    rows = path.rows(named=True)
    waits = 0
    for before, seg in zip(rows, rows[1:]):
        if seg["kind"] != "cpu_op" or seg["name"] not in blocking:
            continue
        start, end = seg["start_ns"] // US, (seg["start_ns"] + seg["dur_ns"]) // US
        calls, device = raw[seg["rank"]]
        (call,) = [c for c in calls if c[0] <= start and end <= c[1]]
        ended = [e for e in device if call[0] < e <= call[1]]
        if ended:
            waits += 1
            assert start == max(ended) and before["lane"].startswith("stream"), (before, seg)
            assert before["start_ns"] + before["dur_ns"] == seg["start_ns"]
    assert waits >= 1


# --- HTA 0.5.0's critical_path_analysis as the reference on one rank ------------------------------

def _hta_trace(path: Path) -> Path:
    """One rank, one step (µs): op A launches K1 (400 µs, GPU-bound), op B launches K2 (queued
    behind K1), op C blocks in cudaDeviceSynchronize until K2 ends (a Context Sync event records
    it), op D is host work to the step's end.  Top-level ops are back to back, so HTA's path (which
    leaves out the time between top-level ops) and scaletrace's (which tiles the step) can agree."""
    return _one_rank(path, [
        _step(1000, 900),
        _op("aten::mm", 1000, 100), _rt("cudaLaunchKernel", 1010, 5, 1), _kernel("sm90_xmma_gemm_f32f32", 1020, 400, 1),
        _op("aten::add", 1100, 100), _rt("cudaLaunchKernel", 1110, 5, 2),
        _kernel("void at::native::vectorized_elementwise_kernel<4>", 1420, 100, 2),
        _op("aten::item", 1200, 400), _rt("cudaDeviceSynchronize", 1205, 316, 3),
        _sync("Context Sync", 1205, 315, 3, -1),
        _op("aten::to", 1600, 300),
    ])


# one rank's Kineto events (µs): CPU ops and runtime calls on thread 1, GPU events on device 0
def _step(ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {}}


def _op(name, ts, dur):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}


def _rt(name, ts, dur, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "cbid": 211}}


def _kernel(name, ts, dur, corr, stream=7):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, "grid": [1, 1, 1], "block": [128, 1, 1]}}


def _sync(name, ts, dur, corr, stream, **wait):
    """A CUDA sync event; ``wait``: wait_on_stream, wait_on_cuda_event_record_corr_id (Kineto's args)."""
    return {"ph": "X", "cat": "cuda_sync", "name": name, "pid": 0, "tid": stream if stream >= 0 else 7, "ts": ts,
            "dur": dur, "args": {"device": 0, "stream": stream, "correlation": corr, **wait}}


def _one_rank(path: Path, events: list, rank: int = 0, world_size: int = 1) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
           "distributedInfo": {"rank": rank, "world_size": world_size, "backend": "nccl"}, "traceEvents": events}
    path.mkdir(parents=True, exist_ok=True)
    (path / f"rank{rank}.json").write_text(json.dumps(doc))
    return path


# HTA's bound_by categories -> the critical_path kinds they cover
HTA_KINDS = {"cpu_bound": ("cpu_op", "host_gap"), "gpu_compute_bound": ("compute_kernel", "memory"),
             "gpu_communication_bound": ("comm_transfer", "comm_wait"),
             "gpu_kernel_launch_overhead": ("launch_delay",), "gpu_kernel_kernel_overhead": ()}


def _hta_breakdown(run_dir: Path, monkeypatch) -> dict:
    hta = pytest.importorskip("hta.trace_analysis")
    import pandas as pd

    # HTA 0.5.0 calls DataFrame.drop(axis=1, columns=...), which pandas 3 refuses ("Cannot specify
    # both 'axis' and 'index'/'columns'"); the axis is redundant, so the call is made without it
    drop = pd.DataFrame.drop

    def drop_without_axis(self, *args, **kwargs):
        if "axis" in kwargs and ("columns" in kwargs or "index" in kwargs):
            kwargs.pop("axis")
        return drop(self, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "drop", drop_without_axis)
    # ... and fills NaN in place through a column (`comb.launch_id.fillna(-1, inplace=True)`: the
    # launch order it matches CUDA sync events by), which under pandas 3's copy-on-write fills a
    # copy, so it finds no cross-stream wait; the fill is made in the frame's own buffer, as pandas 2 did
    fillna = pd.Series.fillna

    def fillna_through(self, value=None, *args, inplace=False, **kwargs):
        values = self._values
        if inplace and isinstance(values, np.ndarray) and values.dtype.kind == "f" and values.flags.writeable:
            values[np.isnan(values)] = value
            return None
        return fillna(self, value, *args, inplace=inplace, **kwargs)

    monkeypatch.setattr(pd.Series, "fillna", fillna_through)
    analysis = hta.TraceAnalysis(trace_dir=str(run_dir))
    graph, ok = analysis.critical_path_analysis(rank=0, annotation="ProfilerStep", instance_id=0)
    assert ok
    df = graph.get_critical_path_breakdown()
    return {k: float(v) * US for k, v in df.groupby("bound_by")["duration"].sum().items() if k}


def test_agrees_with_hta_on_one_rank(tmp_path, monkeypatch):
    run = _hta_trace(tmp_path / "hta")
    db = tmp_path / "hta.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (row,) = query(db, "critical_path_summary").iter_rows(named=True)
    hta = _hta_breakdown(run, monkeypatch)
    assert row["path_ns"] == 900 * US and row["has_sync_events"]
    # HTA gives the sync's return (the GPU -> CPU edge, K2's end to the call's end) no weight: 1 µs
    assert sum(hta.values()) == pytest.approx(row["path_ns"], rel=0.01)
    for category, kinds in HTA_KINDS.items():
        ours = sum(row[f"{k}_ns"] for k in kinds)
        assert ours == pytest.approx(hta.get(category, 0.0), rel=0.01), (category, ours, hta)
    assert row["compute_kernel_ns"] == 500 * US and row["launch_delay_ns"] == 10 * US


# --- exact cross-stream edges from CUDA sync events ------------------------------------------------

K_A, K_B, K_C = 1000, 300, 140  # µs: the three kernels' durations below
WAIT_GAP = 30  # µs from K_A's end to K_B's start: longer than the inferred wait's 20 µs


def _sync_trace(path: Path, waits: bool = True) -> Path:
    """One rank, one step [1000, 2600) µs, three streams.  Op A launches K_A (stream 7,
    [1020, 2020)) and records a CUDA event after it; op B makes stream 20 wait for that event
    (cudaStreamWaitEvent: a `Stream Wait Event` sync event) and launches K_B on stream 20, which
    starts WAIT_GAP after K_A ends; op C, host work, launches K_C (stream 30) that ends 10 µs before
    K_B starts: the stream event that ended last before K_B, and not what it waited for.  Op D
    blocks in cudaDeviceSynchronize until K_B ends; op E is host work to the step's end.
    ``waits=False``: the sync events lack their wait args (a trace without them)."""
    wait = {"wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 2, "wait_on_cuda_event_id": 1} if waits else {}
    k_b = 1020 + K_A + WAIT_GAP
    return _one_rank(path, [
        _step(1000, 1600),
        _op("aten::mm", 1000, 100), _rt("cudaLaunchKernel", 1010, 5, 1), _kernel("sm90_xmma_gemm_f32f32", 1020, K_A, 1),
        _rt("cudaEventRecord", 1030, 3, 2),
        _op("aten::add", 1100, 100), _rt("cudaStreamWaitEvent", 1105, 3, 3),
        _sync("Stream Wait Event", 1106, 0, 3, 20, **wait),
        _rt("cudaLaunchKernel", 1110, 5, 4),
        _kernel("void at::native::vectorized_elementwise_kernel<4>", k_b, K_B, 4, 20),
        _op("aten::relu", 1200, 700), _rt("cudaLaunchKernel", 1890, 5, 5),
        _kernel("void at::native::elementwise_kernel<128>", k_b - 10 - K_C, K_C, 5, 30),
        _op("aten::item", 1900, 500), _rt("cudaDeviceSynchronize", 1905, k_b + K_B + 2 - 1905, 6),
        _sync("Context Sync", 1905, k_b + K_B - 1905, 6, -1),
        _op("aten::to", 2400, 200),
    ])


def _sync_summary(tmp_path, waits: bool) -> tuple[Path, dict, pl.DataFrame]:
    run = _sync_trace(tmp_path / ("waits" if waits else "no-waits"), waits)
    db = tmp_path / f"{run.name}.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (row,) = query(db, "critical_path_summary").iter_rows(named=True)
    return run, row, query(db, "critical_path")


def test_a_stream_wait_event_is_an_exact_edge(tmp_path):
    _, row, path = _sync_summary(tmp_path, waits=True)
    assert row["cross_stream_basis"] == "sync events" and row["path_ns"] == row["step_ns"] == 1600 * US
    # K_B waited for K_A (the event recorded after it), not for K_C that ended 10 µs before K_B:
    # host 10, launch delay 10, K_A, the wait's gap (as launch delay), K_B, the sync's return 2,
    # host from the sync's end (K_B's end + 2) to the step's end
    k_b_end = 1020 + K_A + WAIT_GAP + K_B
    assert _kinds(row) == _us({"host_gap": 10 + (2600 - (k_b_end + 2)), "launch_delay": 10 + WAIT_GAP,
                               "compute_kernel": K_A + K_B, "cpu_op": 2, "memory": 0, "comm_transfer": 0,
                               "comm_wait": 0})
    kernels = path.filter(pl.col("kind") == "compute_kernel")
    assert kernels["lane"].to_list() == ["stream 7", "stream 20"]


def test_without_wait_args_the_wait_is_inferred(tmp_path):
    """The same trace without the sync events' args: the inferred wait takes K_C (ended 10 µs
    before K_B, inside the 20 µs) and misses K_A (WAIT_GAP before it): the path goes through K_C."""
    _, row, path = _sync_summary(tmp_path, waits=False)
    assert row["cross_stream_basis"] == "inferred" and row["path_ns"] == row["step_ns"] == 1600 * US
    assert row["compute_kernel_ns"] == (K_B + K_C) * US
    assert row["launch_delay_ns"] == (10 + 10) * US  # K_B after K_C's end, K_C after its launch
    assert path.filter(pl.col("kind") == "compute_kernel")["lane"].to_list() == ["stream 30", "stream 20"]


def test_exact_edges_agree_with_hta(tmp_path, monkeypatch):
    """HTA's sync edge (K_A's end -> K_B's start) has no weight, so the wait's gap (WAIT_GAP, our
    launch delay) is not on its path, nor the sync's return (2 µs, our cpu_op); the rest agrees."""
    run, row, _ = _sync_summary(tmp_path, waits=True)
    hta = _hta_breakdown(run, monkeypatch)
    assert sum(hta.values()) == pytest.approx(row["path_ns"] - (WAIT_GAP + 2) * US, rel=0.01)
    gap = {"gpu_kernel_launch_overhead": WAIT_GAP * US, "cpu_bound": 2 * US}
    for category, kinds in HTA_KINDS.items():
        ours = sum(row[f"{k}_ns"] for k in kinds) - gap.get(category, 0)
        assert ours == pytest.approx(hta.get(category, 0.0), rel=0.01), (category, ours, hta)
    assert hta["gpu_compute_bound"] == pytest.approx((K_A + K_B) * US, rel=0.01)  # HTA's path runs through K_A too


def test_of_two_waits_the_later_source_and_only_what_was_recorded(tmp_path):
    """Stream 20's K_B waits for two events: one recorded on stream 7 after K_A ([20, 520)), one on
    stream 40 after K_D ([30, 630)).  K_A2, launched on stream 7 after the record, ends at 650:
    later than both and 10 µs before K_B starts (660), so neither "the last event of the recording
    stream" nor the inferred wait would be right.  The path runs through K_D, the source that
    ended last: K_B 100 after 30 µs of launch delay, K_D 600 after its launch delay of 4 µs."""
    run = _one_rank(tmp_path / "two-waits", [
        _step(0, 1000),
        _rt("cudaLaunchKernel", 10, 5, 1), _kernel("sm90_xmma_gemm_f32f32", 20, 500, 1),
        _rt("cudaEventRecord", 16, 2, 2),
        _rt("cudaLaunchKernel", 20, 5, 3), _kernel("void at::native::reduce_kernel<512, 1>", 520, 130, 3),
        _rt("cudaLaunchKernel", 26, 4, 4), _kernel("flash_fwd_kernel", 30, 600, 4, 40),
        _rt("cudaEventRecord", 31, 2, 5),
        _rt("cudaStreamWaitEvent", 34, 2, 6),
        _sync("Stream Wait Event", 34, 0, 6, 20, wait_on_stream=7, wait_on_cuda_event_record_corr_id=2),
        _rt("cudaStreamWaitEvent", 37, 2, 7),
        _sync("Stream Wait Event", 37, 0, 7, 20, wait_on_stream=40, wait_on_cuda_event_record_corr_id=5),
        _rt("cudaLaunchKernel", 40, 5, 8), _kernel("void at::native::elementwise_kernel<128>", 660, 100, 8, 20),
        _rt("cudaDeviceSynchronize", 50, 712, 9),
    ])
    db = tmp_path / "two-waits.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (row,) = query(db, "critical_path_summary").iter_rows(named=True)
    path = query(db, "critical_path")
    assert row["path_ns"] == row["step_ns"] == 1000 * US and row["cross_stream_basis"] == "sync events"
    assert row["compute_kernel_ns"] == (100 + 600) * US and row["launch_delay_ns"] == (30 + 4) * US
    assert path.filter(pl.col("kind") == "compute_kernel")["lane"].to_list() == ["stream 40", "stream 20"]


def test_a_run_with_and_without_sync_events_is_mixed(tmp_path):
    run = tmp_path / "mixed"
    for rank in (0, 1):  # rank 0 records its stream waits, rank 1 does not
        one = _sync_trace(tmp_path / f"r{rank}", waits=rank == 0)
        _one_rank(run, json.loads((one / "rank0.json").read_text())["traceEvents"], rank, world_size=2)
    db = tmp_path / "mixed.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (row,) = query(db, "critical_path_summary").iter_rows(named=True)
    assert row["cross_stream_basis"] == "mixed" and row["path_ns"] == row["step_ns"]


def _event_sync_trace(path: Path, waits: bool = True) -> Path:
    """One rank, one step [0, 1000) µs, top-level ops back to back (as _hta_trace): op A launches K1
    (stream 7, [20, 420)) and records a CUDA event after it, op B launches K2 (stream 30,
    [30, 423)), op C calls cudaEventSynchronize [30, 425) on that event (an `Event Sync` sync
    event): the host waited for K1, although K2 ended later inside the call."""
    wait = {"wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 2} if waits else {}
    return _one_rank(path, [
        _step(0, 1000),
        _op("aten::mm", 0, 20), _rt("cudaLaunchKernel", 10, 5, 1), _kernel("sm90_xmma_gemm_f32f32", 20, 400, 1),
        _rt("cudaEventRecord", 16, 2, 2),
        _op("aten::add", 20, 10), _rt("cudaLaunchKernel", 20, 5, 3),
        _kernel("void at::native::elementwise_kernel<128>", 30, 393, 3, 30),
        _op("aten::item", 30, 970), _rt("cudaEventSynchronize", 30, 395, 4),
        _sync("Event Sync", 30, 394, 4, -1, **wait),
    ])


@pytest.mark.parametrize("waits", [True, False])
def test_an_event_sync_is_an_exact_edge(tmp_path, waits):
    run = _event_sync_trace(tmp_path / "event-sync", waits)
    db = tmp_path / "event-sync.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (row,) = query(db, "critical_path_summary").iter_rows(named=True)
    assert row["path_ns"] == row["step_ns"] == 1000 * US
    if waits:  # host 10, K1's launch delay 10, K1 400, the call's return after K1 (420 -> 425), host to 1000
        assert _kinds(row) == _us({"host_gap": 10 + (1000 - 425), "launch_delay": 10, "compute_kernel": 400,
                                   "cpu_op": 425 - 420, "memory": 0, "comm_transfer": 0, "comm_wait": 0})
    else:  # the blocking-call rule: the device event that ended last inside the call, K2 (393 µs)
        assert row["compute_kernel_ns"] == 393 * US and row["cpu_op_ns"] >= (425 - 423) * US


def test_an_event_sync_agrees_with_hta(tmp_path, monkeypatch):
    """HTA's GPU -> CPU sync edge (K1's end -> the call's end) has no weight: the call's return
    (5 µs, our cpu_op) is not on its path; the rest agrees."""
    run = _event_sync_trace(tmp_path / "event-sync")
    db = tmp_path / "event-sync.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (row,) = query(db, "critical_path_summary").iter_rows(named=True)
    hta = _hta_breakdown(run, monkeypatch)
    assert sum(hta.values()) == pytest.approx(row["path_ns"] - 5 * US, rel=0.01)
    for category, kinds in HTA_KINDS.items():
        ours = sum(row[f"{k}_ns"] for k in kinds) - (5 * US if category == "cpu_bound" else 0)
        assert ours == pytest.approx(hta.get(category, 0.0), rel=0.01), (category, ours, hta)


def test_explain_names_the_rank_and_the_op_that_cost_the_most_path_time(tmp_path):
    from scaletrace.pipeline import connect
    from scaletrace.reports.run_explain import describe_runs

    sc = Scenario(ranks=3, compute_us={2: 1500})
    run = sc.write(tmp_path, "slow-kernel")
    db = tmp_path / "x.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    with connect(db) as database:
        said = describe_runs(database).filter(pl.col("about") == "critical path")["sentence"].to_list()
    (text,) = said
    step = sc.times(0)
    path = max(v["sync1"] for v in step.values()) + 20
    on_rank_2 = 10 + 5 + 1500 + 1  # its host gap, launch delay, kernel, and the all_reduce's start after it
    # both steps' paths are as long; the first profiled step is left out where later ones exist
    assert text.startswith("Step 1's critical path") and f"rank 2 holds {round(100 * on_rank_2 / path)} %" in text
    assert "rank 2's compute kernels in sm90_xmma_gemm_bf16bf16_bf16f32" in text
    assert "rank 2 holds the most path time in 2 of the 2 steps" in text
    assert text.endswith("; its cross-stream waits are inferred from the times (no CUDA sync events in the trace).")


@pytest.mark.parametrize("waits", [True, False])
def test_explain_says_where_cross_stream_waits_came_from(tmp_path, waits):
    from scaletrace.pipeline import connect
    from scaletrace.reports.run_explain import describe_runs

    run = _sync_trace(tmp_path / "t", waits)
    db = tmp_path / "t.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    with connect(db) as database:
        (text,) = describe_runs(database).filter(pl.col("about") == "critical path")["sentence"].to_list()
    assert ("inferred from the times" in text) == (not waits), text


def test_the_report_chart_draws_the_path_by_kind_per_gpu_count(tmp_path):
    from conftest import spec_values
    from scaletrace.pipeline import connect
    from scaletrace.reports.charts_critical_path import build_critical_path, path_parts

    runs = {"cp-2": Scenario(ranks=2), "cp-4": Scenario(ranks=4, compute_us={3: 900}, transfer_us=300)}
    for name, sc in runs.items():
        sc.write(tmp_path, name)
    db = tmp_path / "sweep.duckdb"
    assert not ingest([tmp_path / name for name in runs], db=db, workers=1).errors
    best = pl.DataFrame({"run_id": list(runs), "sweep": ["cp", "cp"], "world_size": [2, 4]})
    with connect(db) as database:
        parts = path_parts(database, best)
        summary = database.query("critical_path_summary")
    for run, part in parts.group_by("run_id"):
        assert part["pct"].sum() == pytest.approx(100)
        mine = summary.filter(pl.col("run_id") == run[0])
        gemm = 100 * mine["compute_kernel_ns"].sum() / mine["path_ns"].sum()
        assert part.filter(pl.col("kind") == "compute kernels")["pct"].item() == pytest.approx(gemm)
    assert parts["label"].unique(maintain_order=True).to_list() == ["cp · 2 GPUs", "cp · 4 GPUs"]
    rows = spec_values(build_critical_path(parts).to_dict())
    assert {(r["label"], r["kind"]) for r in rows} == set(zip(parts["label"], parts["kind"]))


def test_every_shared_run_has_a_path_as_long_as_its_slowest_step(shared_db):
    path, summary = query(shared_db, "critical_path"), query(shared_db, "critical_path_summary")
    assert summary.height > 0
    assert (summary["path_ns"] == summary["step_ns"]).all()
    sums = path.group_by("run_id", "step").agg(pl.col("dur_ns").sum(), pl.col("seq").max(), pl.len())
    joined = summary.join(sums, on=["run_id", "step"])
    assert joined.height == summary.height and (joined["dur_ns"] == joined["path_ns"]).all()
    assert (joined["seq"] + 1 == joined["len"]).all() and (path["dur_ns"] > 0).all()


def test_compute_on_the_path_agrees_with_hta_on_a_real_trace(tmp_path, monkeypatch, shared_db):
    """hta-ns-resolution's first step is GPU-bound: the kernels and copies on the path agree with
    HTA's gpu_compute_bound within 1.5 % (HTA rounds this trace's ns timestamps to whole µs, start
    up and end down, so each of the ~1,000 events on its path is up to 1 µs shorter: 1.0 % here);
    the gaps between kernels (launch delay here, HTA's launch and kernel-kernel overhead) within
    5 %.  HTA's path is shorter than the step by the host time between top-level ops (its
    zero-weight edges), which scaletrace's path keeps."""
    run = tmp_path / "ns"
    run.mkdir()
    (run / "rank0.json.gz").write_bytes((SHARED_TRACES / "hta-ns-resolution" / "rank0.json.gz").read_bytes())
    hta = _hta_breakdown(run, monkeypatch)
    row = query(shared_db, "critical_path_summary", run_id="hta-ns-resolution").row(0, named=True)
    assert row["compute_kernel_ns"] + row["memory_ns"] == pytest.approx(hta["gpu_compute_bound"], rel=0.015)
    hta_gaps = hta.get("gpu_kernel_launch_overhead", 0) + hta.get("gpu_kernel_kernel_overhead", 0)
    assert row["launch_delay_ns"] == pytest.approx(hta_gaps, rel=0.05)
    assert sum(hta.values()) < row["path_ns"] == row["step_ns"]


# --- a sweep with a slow rank whose host waits for its GPU work -----------------------------------

FORWARD = (("sm90_xmma_gemm_bf16bf16_bf16f32", 120), ("void at::native::vectorized_elementwise_kernel<4>", 30),
           ("flash_fwd_kernel", 90))
BACKWARD = (("flash_bwd_dq_dk_dv_loop_kernel", 180), ("sm90_xmma_gemm_bf16bf16_bf16f32", 240),
            ("void at::native::reduce_kernel<512, 1>", 40))


@dataclass
class SlowRankSweep:
    """A data-parallel run (times in µs, one clock for every rank): each step, every rank's host does
    `host_us` of work, then launches the forward and backward kernels (stream 7) every `launch_gap_us`
    (each call lasts 4 µs); a kernel starts `launch_delay_us` after its call, or when the one before
    it ends.  Rank `slow` runs every kernel `slow_factor` times longer.  Then the host launches the
    DP all_reduce (stream 20) inside a `record_param_comms` op; it starts 1 µs after its rank's last
    compute kernel and ends on every rank `transfer_us` after the last rank arrived.  The host then
    waits for it, by `wait`:

    * "sync": in a cudaDeviceSynchronize that returns 2 µs after the all_reduce ends;
    * "collective": in the collective op itself, which returns 2 µs after the all_reduce ends;
    * "launch": in the launch of the optimizer kernel (stream 7, 8 µs), which cannot be issued
      until the all_reduce ends (the launch queue is full) and returns 2 µs after it.

    After the wait the host works `tail_us` more until the step's annotation ends.  No CUDA sync
    events: the all_reduce's wait for compute is inferred, as on most traces."""

    ranks: int
    wait: str
    slow: int = 1
    slow_factor: float = 1.5
    steps: int = 3
    host_us: int = 10
    launch_gap_us: int = 6
    launch_delay_us: int = 5
    transfer_us: int = 50
    tail_us: int = 30

    def kernels(self, rank: int) -> list[tuple[str, int]]:
        factor = self.slow_factor if rank == self.slow else 1
        return [(name, round(dur * factor)) for name, dur in FORWARD + BACKWARD]

    def arrival(self, rank: int) -> int:
        """The all_reduce's start on a rank, after the step's start: its compute kernels run back to
        back from the first launch's start + launch delay (each is longer than the launch gap)."""
        return self.host_us + self.launch_delay_us + sum(d for _, d in self.kernels(rank)) + 1

    def step_us(self) -> int:
        """Every rank's step: the last arrival, the transfer, the 2 µs return of the wait, the tail."""
        return max(self.arrival(r) for r in range(self.ranks)) + self.transfer_us + 2 + self.tail_us

    def events(self, rank: int) -> list[dict]:
        rec = _Recorder()
        ev, call, kernel = rec.events, rec.call, rec.kernel

        span = self.step_us()
        last = max(self.arrival(r) for r in range(self.ranks))
        for step in range(self.steps):
            s0 = step * span
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": s0, "dur": span, "args": {}})
            launch, k_end = s0 + self.host_us, 0
            for name, dur in self.kernels(rank):
                k0 = max(launch + self.launch_delay_us, k_end)
                kernel(name, k0, dur, 7, call("cudaLaunchKernel", launch, 4))
                k_end, launch = k0 + dur, launch + self.launch_gap_us
            ar0, ar1 = s0 + self.arrival(rank), s0 + last + self.transfer_us
            assert ar0 == k_end + 1
            resume = ar1 + 2  # the host's wait returns
            op_end = resume if self.wait == "collective" else launch + 6
            ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": launch,
                       "dur": op_end - launch, "args": {}})
            kernel(AR_NAME, ar0, ar1 - ar0, 20, call("cudaLaunchKernel", launch + 1, 4),
                   **{"Collective name": "allreduce", "Process Group Name": "0", "Group size": self.ranks,
                      "dtype": "Float", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20})
            if self.wait == "sync":
                call("cudaDeviceSynchronize", op_end + 1, resume - (op_end + 1))
            elif self.wait == "launch":
                kernel("void at::native::multi_tensor_apply_kernel", resume + 1, 8, 7,
                       call("cudaLaunchKernel", op_end + 1, resume - (op_end + 1)))
            assert resume + self.tail_us == s0 + span
        return ev

    def write(self, root: Path) -> Path:
        return _write_run(root / f"slow-{self.wait}-{self.ranks}", self.ranks, self.events)


@pytest.mark.parametrize("wait", ["sync", "collective", "launch"])
def test_a_slow_ranks_kernels_and_its_all_reduce_bound_every_step(tmp_path, wait):
    """Worked out by hand: every rank's step is as long (the annotations are; rank 0, the lowest,
    is the slowest on the tie), and ends `tail` after its host's wait returned, 2 µs after the
    all_reduce ended.  The all_reduce ended `transfer` after the slow rank arrived, 1 µs after its
    last compute kernel; its kernels ran back to back from its first launch's start + launch delay,
    which its host issued `host_us` into the step.  So the path, from the step's start: the slow
    rank's host (host_us), its first launch delay, its six kernels (each `slow_factor` times the base),
    1 µs until its all_reduce started, the transfer, the wait's return (2 µs), the tail on rank 0."""
    sweep = [SlowRankSweep(ranks=n, wait=wait) for n in (2, 3, 4)]
    runs = [sc.write(tmp_path) for sc in sweep]
    db = tmp_path / "slow.duckdb"
    report = ingest(runs, db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    path, summary = query(db, "critical_path"), query(db, "critical_path_summary")
    for sc, run in zip(sweep, runs):
        mine = summary.filter(pl.col("run_id") == run.name)
        assert mine.height == sc.steps
        slow_kernels = [(sc.slow, name, dur * US) for name, dur in sc.kernels(sc.slow)]
        compute = sum(d for _, d in sc.kernels(sc.slow))
        for row in mine.iter_rows(named=True):
            span = sc.step_us() * US
            assert row["slowest_rank"] == 0 and row["step_ns"] == span
            assert abs(row["path_ns"] - span) <= 0.001 * span
            assert _kinds(row) == _us({"host_gap": sc.host_us + sc.tail_us, "launch_delay": sc.launch_delay_us + 1,
                                       "compute_kernel": compute, "comm_transfer": sc.transfer_us,
                                       "comm_wait": 0, "cpu_op": 2, "memory": 0})
            assert row["top_rank"] == sc.slow
            step = path.filter((pl.col("run_id") == run.name) & (pl.col("step") == row["step"]))
            assert step["dur_ns"].sum() == span
            device = step.filter(pl.col("kind").is_in(["compute_kernel", "comm_transfer"]))
            # the slow rank's compute kernels in launch order, then the all_reduce
            assert list(device.select("rank", "name", "dur_ns").iter_rows())[:-1] == slow_kernels
            assert device.row(-1, named=True)["kind"] == "comm_transfer"
            assert (device.row(-1, named=True)["name"], device.row(-1, named=True)["dur_ns"]) == (
                AR_NAME, sc.transfer_us * US)


# --- a host that waits for its GPU with no call recorded: launches just in time ---------------------

JIT_KERNELS = (("sm90_xmma_gemm_bf16bf16_bf16f32", 120), ("flash_fwd_kernel", 150),
               ("void at::native::vectorized_elementwise_kernel<4>", 90), ("flash_bwd_dq_dk_dv_loop_kernel", 200),
               ("sm90_xmma_gemm_bf16bf16_bf16f32", 110), ("void at::native::reduce_kernel<512, 1>", 160))


@dataclass
class JustInTimeSweep:
    """A data-parallel run (µs, one clock) whose hosts are held by their GPUs with nothing recorded:
    each host launches its next kernel only as its stream drains (a host that polls, a throttled
    launch queue), so no call blocks and no host gap holds a call.  Each step: `host_us` of host
    work, then the six compute kernels of JIT_KERNELS on stream 7 (each launch call lasts 4 µs),
    rank `slow`'s `slow_factor` times longer.  Kernel 1 starts `launch_delay_us` after its call.
    Kernel n > 1 is launched just in time: for even n `launch_delay_us` before kernel n-1 ends (it
    starts as that one ends: the GPU does not idle), for odd n `late_us` after it ends (it starts
    `late_us` + `launch_delay_us` after: the GPU idles only the launch's latency).  The all_reduce
    (stream 20) is launched `launch_delay_us` before the last kernel ends and starts 1 µs after it,
    ending on every rank `transfer_us` after the last rank arrived.  The step's end, by `end`:

    * "sync": the host waits in a cudaDeviceSynchronize that returns 2 µs after the all_reduce
      ends, then works `tail_us` more;
    * "poll": the host waits for the all_reduce with nothing recorded and leaves the step 2 µs
      after it ends (the step's last host gap is a wait as well)."""

    ranks: int
    end: str
    slow: int = 1
    slow_factor: float = 1.5
    steps: int = 3
    host_us: int = 10
    call_us: int = 4
    launch_delay_us: int = 5
    late_us: int = 2
    transfer_us: int = 50
    tail_us: int = 30

    def kernels(self, rank: int) -> list[tuple[str, int]]:
        factor = self.slow_factor if rank == self.slow else 1
        return [(name, round(dur * factor)) for name, dur in JIT_KERNELS]

    def late(self, n: int) -> bool:
        """Kernel n (1-based) is launched after kernel n - 1 ended (odd n > 1)."""
        return n > 1 and n % 2 == 1

    def schedule(self, rank: int) -> list[tuple[str, int, int, int]]:
        """(name, launch call start, kernel start, kernel end), after the step's start."""
        out, k_end = [], None
        for n, (name, dur) in enumerate(self.kernels(rank), 1):
            if n == 1:
                launch = self.host_us
            else:
                launch = k_end + self.late_us if self.late(n) else k_end - self.launch_delay_us
            k0 = max(launch + self.launch_delay_us, k_end or 0)
            out.append((name, launch, k0, k0 + dur))
            k_end = k0 + dur
        return out

    def arrival(self, rank: int) -> int:
        return self.schedule(rank)[-1][3] + 1

    def step_us(self) -> int:
        last = max(self.arrival(r) for r in range(self.ranks))
        return last + self.transfer_us + 2 + (self.tail_us if self.end == "sync" else 0)

    def events(self, rank: int) -> list[dict]:
        rec = _Recorder()
        ev, call, kernel = rec.events, rec.call, rec.kernel

        span = self.step_us()
        last = max(self.arrival(r) for r in range(self.ranks))
        for step in range(self.steps):
            s0 = step * span
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": s0, "dur": span, "args": {}})
            sched = self.schedule(rank)
            for name, launch, k0, k1 in sched:
                kernel(name, s0 + k0, k1 - k0, 7, call("cudaLaunchKernel", s0 + launch, self.call_us))
            ar_launch = s0 + sched[-1][3] - self.launch_delay_us
            ar0, ar1 = s0 + self.arrival(rank), s0 + last + self.transfer_us
            kernel(AR_NAME, ar0, ar1 - ar0, 20, call("cudaLaunchKernel", ar_launch, self.call_us),
                   **{"Collective name": "allreduce", "Process Group Name": "0", "Group size": self.ranks,
                      "dtype": "Float", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20})
            if self.end == "sync":
                sync0 = ar_launch + self.call_us + 1
                call("cudaDeviceSynchronize", sync0, ar1 + 2 - sync0)
        return ev

    def write(self, root: Path) -> Path:
        return _write_run(root / f"jit-{self.end}-{self.ranks}", self.ranks, self.events)


@pytest.mark.parametrize("end", ["sync", "poll"])
def test_a_host_held_by_its_gpu_puts_the_slow_ranks_kernels_on_the_path(tmp_path, end):
    """Worked out by hand.  Every rank's step is as long (rank 0, the lowest, is the slowest on the
    tie) and ends 2 µs after the all_reduce (+ the tail after a sync).  The all_reduce ended
    `transfer` after the slow rank arrived, 1 µs after its last kernel.  Back from there on the slow
    rank: a kernel launched early started as the one before it ended (stream order); a kernel
    launched late waited `launch_delay` for its launch, and the host gap before that launch (no call
    in it, at least 50 µs, stream 7 busy through it) ended `late_us` after the kernel before it
    ended: the host waited for that kernel, so the path goes on through it, not along the host.  So
    the path, from the step's start: the slow rank's host (host_us), the first launch delay, its six
    kernels, and for each late launch its `late_us` of host and its launch delay; 1 µs until its
    all_reduce started, the transfer; the wait's return (2 µs: the sync's, or the host gap after a
    poll) and the tail on rank 0."""
    sweep = [JustInTimeSweep(ranks=n, end=end) for n in (2, 4)]
    runs = [sc.write(tmp_path) for sc in sweep]
    db = tmp_path / "jit.duckdb"
    report = ingest(runs, db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    path, summary = query(db, "critical_path"), query(db, "critical_path_summary")
    for sc, run in zip(sweep, runs):
        mine = summary.filter(pl.col("run_id") == run.name)
        assert mine.height == sc.steps
        lates = sum(sc.late(n) for n in range(1, len(JIT_KERNELS) + 1))
        compute = sum(d for _, d in sc.kernels(sc.slow))
        returned = {"cpu_op": 2, "host_gap": sc.tail_us} if end == "sync" else {"cpu_op": 0, "host_gap": 2}
        expected = {"host_gap": sc.host_us + lates * sc.late_us + returned["host_gap"],
                    "launch_delay": sc.launch_delay_us + lates * sc.launch_delay_us + 1,
                    "compute_kernel": compute, "comm_transfer": sc.transfer_us, "comm_wait": 0,
                    "cpu_op": returned["cpu_op"], "memory": 0}
        assert sum(expected.values()) == sc.step_us()
        for row in mine.iter_rows(named=True):
            assert row["slowest_rank"] == 0 and row["path_ns"] == row["step_ns"] == sc.step_us() * US
            assert _kinds(row) == _us(expected)
            assert row["top_rank"] == sc.slow and row["top_op_kind"] == "compute_kernel"
            step = path.filter((pl.col("run_id") == run.name) & (pl.col("step") == row["step"]))
            kernels = step.filter(pl.col("kind") == "compute_kernel")
            assert list(kernels.select("rank", "name", "dur_ns").iter_rows()) == [
                (sc.slow, name, dur * US) for name, dur in sc.kernels(sc.slow)]


@dataclass
class BehindTrace:
    """One rank (µs) whose GPU falls further behind its host every step, nothing synchronizing:
    each step's annotation lasts `cpu_us` (back to back); `host_us` into it the host launches the
    kernels of JIT_KERNELS on stream 7, a 4 µs call every `launch_gap_us`; each kernel starts
    `launch_delay_us` after its call, or when the one before it (of this step or an earlier one)
    ends.  The kernels of a step take longer than the step's annotation, so step n's kernels start
    when step n-1's end."""

    steps: int = 5
    cpu_us: int = 600
    host_us: int = 5
    launch_gap_us: int = 6
    launch_delay_us: int = 5

    def device_us(self) -> int:
        return sum(d for _, d in JIT_KERNELS)

    def device_end(self, step: int) -> int:
        """The end of step n's kernels: step 0's run back to back from its first launch + delay, each
        later step's from the end of the one before (its launches came earlier: the host is ahead)."""
        return self.host_us + self.launch_delay_us + (step + 1) * self.device_us()

    def events(self, rank: int) -> list[dict]:
        rec = _Recorder()
        k_end = 0
        for step in range(self.steps):
            s0 = step * self.cpu_us
            rec.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1,
                               "tid": 1, "ts": s0, "dur": self.cpu_us, "args": {}})
            launch = s0 + self.host_us
            for name, dur in JIT_KERNELS:
                k0 = max(launch + self.launch_delay_us, k_end)
                rec.kernel(name, k0, dur, 7, rec.call("cudaLaunchKernel", launch, 4))
                k_end, launch = k0 + dur, launch + self.launch_gap_us
            assert k_end == self.device_end(step)
        return rec.events


def test_a_gpu_behind_its_host_has_a_path_of_its_step_period(tmp_path):
    """Worked out by hand.  Step n's window runs from the end of step n-1's (its kernels' end) to the
    end of its own kernels: the device's step period, Σ of the six kernels, for every step after the
    first; the first runs from its annotation's start (host_us of host, the launch delay, then its
    kernels).  The path is the step's kernels in stream order.  Measured from the annotation's start
    instead, the window would grow by (device − cpu) every step as the GPU falls behind."""
    sc = BehindTrace()
    assert sc.device_us() > sc.cpu_us  # the GPU falls behind by device − cpu every step
    run = _write_run(tmp_path / "behind", 1, sc.events)
    db = tmp_path / "behind.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    summary = query(db, "critical_path_summary")
    assert summary["step"].to_list() == list(range(sc.steps))
    for row in summary.iter_rows(named=True):
        n = row["step"]
        if n == 0:
            expected = {"host_gap": sc.host_us, "launch_delay": sc.launch_delay_us, "compute_kernel": sc.device_us()}
        else:
            expected = {"compute_kernel": sc.device_us()}
            assert sc.device_end(n) - sc.device_end(n - 1) == sc.device_us()
        assert row["path_ns"] == row["step_ns"] == sum(expected.values()) * US
        assert _kinds(row) == _us({"host_gap": 0, "launch_delay": 0, "cpu_op": 0, "memory": 0, "comm_transfer": 0,
                                   "comm_wait": 0, **expected})
    # the windows tile the trace from the first step's start to the last kernel's end
    assert summary["path_ns"].sum() == sc.device_end(sc.steps - 1) * US
    # explain names the steady state: the first step (its host time before the first launch as well)
    # is left out where later steps exist, and the later ones are all the device's period
    from scaletrace.pipeline import connect
    from scaletrace.reports.run_explain import describe_runs

    with connect(db) as database:
        (text,) = describe_runs(database).filter(pl.col("about") == "critical path")["sentence"].to_list()
    assert text.startswith(f"Step 1's critical path ({sc.device_us()} µs, "), text


def test_blocking_communication_is_a_share_of_the_communication_on_the_path(tmp_path):
    """Two ranks; rank 1's kernel is 200 µs slower, so rank 0's all_reduce [116, 366) waits for it
    (rank 1 arrives at 10 + 5 + 300 + 1 = 316; the transfer ends at 316 + 50 = 366).  Rank 0's second
    kernel (hide) runs [115, 336): the path's transfer segment, [316, 366) on rank 0, is under rank
    0's compute for 336 − 316 = 20 µs, so 30 µs of it blocks: 60 % of the communication on the path
    (the transfer, no wait).  The step's exposed communication, a mean over the ranks, is another
    frame (rank 0's exposed 366 − 336 = 30 µs; rank 1's all_reduce [316, 366) is under its own hide
    kernel [315, 536): 0; the mean 15 µs), and no share of it is given."""
    sc = Scenario(ranks=2, compute_us={1: 300}, hide_us=221)
    t = sc.times(0)
    assert (t[0]["k1"], t[0]["h1"], t[1]["ar0"], t[0]["ar1"]) == (115, 336, 316, 366)
    _, summary = _paths(tmp_path, sc)
    for row in summary.iter_rows(named=True):
        assert row["path_comm_ns"] == row["comm_transfer_ns"] + row["comm_wait_ns"] == 50 * US
        assert row["blocking_comm_ns"] == 30 * US
        assert row["blocking_comm_pct_of_path_comm"] == pytest.approx(60)
        assert row["exposed_comm_ns"] == (30 + 0) // 2 * US
        assert "blocking_comm_pct_of_exposed_comm" not in row


# --- the step model: the step's exposed communication, the step explain names ------------------

SPILL_STEPS = ((0, 90), (90, 110), (200, 200))  # (start, length) of each ProfilerStep's annotation, µs


def _spill_events(rank: int) -> list[dict]:
    """One rank (µs).  Step 0 launches a GEMM [10, 20) on stream 7 and two all_reduces on their own
    streams, [20, 100) and [22, 102), both exposed and overlapping each other.  Step 1 launches, as
    soon as it starts, an all_reduce [95, 135) that runs while step 0's are still running, then a
    GEMM [140, 190).  Step 2 (the last, 200 µs of host time: an export, an evaluation) launches no
    device work."""
    rec = _Recorder()
    for n, (ts, dur) in enumerate(SPILL_STEPS):
        rec.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
                           "ts": ts, "dur": dur, "args": {}})
    ar = {"Collective name": "allreduce", "Process Group Name": "0", "Group size": 1, "dtype": "Float",
          "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20}
    for name, call_us, start, end, stream, extra in (
            ("sm90_xmma_gemm_bf16bf16_bf16f32", 5, 10, 20, 7, {}), (AR_NAME, 8, 20, 100, 20, ar),
            (AR_NAME, 12, 22, 102, 21, ar), (AR_NAME, 92, 95, 135, 22, ar),
            ("sm90_xmma_gemm_bf16bf16_bf16f32", 94, 140, 190, 7, {})):
        rec.kernel(name, start, end - start, stream, rec.call("cudaLaunchKernel", call_us, 2), **extra)
    return rec.events


@pytest.fixture(scope="module")
def spill(tmp_path_factory) -> Path:
    run = _write_run(tmp_path_factory.mktemp("spill") / "spill", 1, _spill_events)
    db = run.parent / "spill.duckdb"
    report = ingest([run], db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


def test_a_steps_exposed_communication_is_the_exposed_time_of_its_slot(spill):
    """Worked out by hand on the trace above.  Step 0's device work ends at 102, step 1's at 190: the
    slots (the step model) are [10, 102) (92 µs) and [102, 190) (88 µs); the critical path's windows
    [0, max(90, 102)) = 102 µs and [102, max(200, 190)) = 98 µs, and step 2's [200, 400) = 200 µs.
    Exposed communication in a slot = |U(comm) \\ U(compute)| inside it: slot 0 holds the all_reduces
    [20, 102) (step 1's [95, 102) is under step 0's), none under the GEMM [10, 20): 82 µs; slot 1 the
    rest of step 1's all_reduce [102, 135), the GEMM after it: 33 µs; step 2 has no slot: 0.  Summed
    per event over the steps that launched them it would be 80 + 80 = 160 µs for step 0 (longer than
    its 102 µs window) and 40 µs for step 1."""
    summary = query(spill, "critical_path_summary")
    by_step = {r["step"]: r for r in summary.iter_rows(named=True)}
    assert {n: r["step_ns"] for n, r in by_step.items()} == _us({0: 102, 1: 98, 2: 200})
    assert {n: r["exposed_comm_ns"] for n, r in by_step.items()} == _us({0: 82, 1: 33, 2: 0})
    # the same figure, over the same slots, as rank_step_breakdown's
    per_step = query(spill, "rank_step_breakdown")
    assert dict(zip(per_step["step"], per_step["span_ns"])) == _us({0: 92, 1: 88})
    assert dict(zip(per_step["step"], per_step["exposed_comm_ns"])) == _us({0: 82, 1: 33})


def test_explain_names_a_step_of_the_steady_state_never_an_empty_one(spill):
    """The steps the steady-state step period is the median over are those with a device slot, the
    first left out where later ones exist: step 1 alone here.  Step 2 launched no device work: its
    200 µs path is host time, the longest of the run's, yet it is not the step; neither is step 0
    (its window holds the host's time before its first launch)."""
    from scaletrace.reports.critical_path_words import path_sentence

    summary = query(spill, "critical_path_summary")
    assert dict(zip(summary["step"], summary["steady_state"])) == {0: False, 1: True, 2: False}
    assert summary.filter(pl.col("step") == 2)["path_ns"].item() == max(summary["path_ns"]) == 200 * US
    text = path_sentence(summary)
    assert text.startswith("Step 1's critical path (98 µs, the slowest rank's step: rank 0)"), text
    assert "in 3 of the 3 steps" in text  # the other steps still count for the rank that holds the path


# --- the identities on the real traces ------------------------------------------------------------

def _raw_step_windows(path: Path) -> dict:
    """Per ProfilerStep of one rank's raw JSON (µs): its annotation's start and end, and the end of
    the device events it launched (their runtime call, by correlation, inside the annotation)."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
    calls = {e["args"]["correlation"]: e["ts"] for e in events
             if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ends = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") in calls:
            ts = calls[e["args"]["correlation"]]
            for n, (a, b) in steps.items():
                if a <= ts < b:
                    ends[n] = max(ends.get(n, 0), e["ts"] + e["dur"])
    return {n: (a, b, ends.get(n, b)) for n, (a, b) in steps.items()}


def test_a_real_trace_whose_gpu_falls_behind_has_paths_of_its_step_period(shared_db):
    """hta-ns-resolution's GPU falls behind its host (the annotations grow to 95.6 ms; each step's
    kernels end up to 185 ms after its annotation starts).  From the raw JSON: each step's window
    runs from the later of its annotation's start and the previous step's end to the later of its
    annotation's end and its device work's end; the path is that long (within 2 µs: the trace's
    timestamps are fractional µs), never longer than the longer of the CPU step and the device's
    step period after the first step, and never grows as the GPU falls further behind."""
    raw = _raw_step_windows(SHARED_TRACES / "hta-ns-resolution" / "rank0.json.gz")
    summary = query(shared_db, "critical_path_summary", run_id="hta-ns-resolution")
    assert summary["step"].to_list() == sorted(raw)
    previous = None
    for row in summary.iter_rows(named=True):
        start, host_end, device_end = raw[row["step"]]
        end = max(host_end, device_end, previous or 0)
        window = end - max(start, previous or start)
        assert abs(row["path_ns"] - window * US) <= 2 * US and row["path_ns"] == row["step_ns"]
        if previous is not None:
            assert row["path_ns"] <= max(host_end - start, device_end - previous) * US + 2 * US
        assert device_end - start < 2 * window  # measured from the annotation's start it would not be
        previous = end
    later = summary["path_ns"][1:]
    assert later.max() - later.min() < 0.01 * later.mean()  # the device's period, not a growing lag


def test_every_shared_run_keeps_the_identities_of_its_path(shared_db):
    """On every rank of every shared run the step windows tile its timeline: each lies in
    [annotation start, max(annotation end, device end)), starts at the later of its annotation's
    start and the previous window's end, and is no longer than the longer of the CPU step and the
    device's step period.  Each step's path is its slowest rank's window; the blocking communication
    is part of the communication on the path, and its share of it at most 100 %."""
    from scaletrace.pipeline import connect

    with connect(shared_db) as database:
        steps = database.sql("SELECT * FROM critical_path_steps(NULL) ORDER BY trace_id, host_start_ns, step")
    assert steps.height > 0
    for part in steps.partition_by("trace_id"):
        previous, previous_device = None, None
        for r in part.iter_rows(named=True):
            device_end = r["device_end_ns"] if r["device_end_ns"] is not None else r["host_end_ns"]
            assert r["end_ns"] == max(r["host_end_ns"], device_end, previous or 0)
            assert r["start_ns"] == max(r["host_start_ns"], previous or 0)
            assert r["step_ns"] == max(0, r["end_ns"] - r["start_ns"])
            if previous is not None:
                assert r["step_ns"] <= max(r["host_end_ns"] - r["host_start_ns"], device_end - previous_device)
            previous = r["end_ns"]
            previous_device = max(previous_device or 0, device_end)
    summary = query(shared_db, "critical_path_summary")
    slowest = steps.filter(pl.col("is_slowest")).group_by("run_id", "step").agg(pl.col("step_ns").max())
    joined = summary.join(slowest, on=["run_id", "step"], suffix="_slowest")
    assert joined.height == summary.height and (joined["path_ns"] == joined["step_ns_slowest"]).all()
    on_path = summary["comm_transfer_ns"] + summary["comm_wait_ns"]
    assert (summary["path_comm_ns"] == on_path).all()
    assert (summary["blocking_comm_ns"] >= 0).all() and (summary["blocking_comm_ns"] <= on_path).all()
    pct = summary["blocking_comm_pct_of_path_comm"].drop_nulls()
    assert ((pct >= 0) & (pct <= 100)).all()
    assert summary.filter(on_path == 0)["blocking_comm_pct_of_path_comm"].null_count() == (on_path == 0).sum()


def test_every_shared_runs_exposed_communication_is_its_steps_slots(shared_db):
    """On every shared run each step's exposed communication is rank_step_breakdown's over the same
    slots, the mean over the ranks with the step (a rank whose step launched no device work: 0), so
    never longer than the longest of the ranks' slots nor than the step's path.  The step explain
    names is one of the steady state's where the run has one (tracelens-mi300x step 16: 11.96 ms
    exposed of its 18.98 ms step, not the 21.14 ms of the comm kernels it launched; hta-mi250-rocm:
    step 1's 9.29 ms path, not the 49 µs of step 2, which launched no device work)."""
    from scaletrace.pipeline import connect
    from scaletrace.reports.critical_path_words import path_sentence

    summary = query(shared_db, "critical_path_summary")
    per_rank = query(shared_db, "rank_step_breakdown")
    with connect(shared_db) as database:
        ranks = database.sql("SELECT run_id, step, count(DISTINCT rank) AS ranks FROM critical_path_steps(NULL) "
                             "GROUP BY ALL")
    slots = per_rank.group_by("run_id", "step").agg(pl.col("exposed_comm_ns").sum().alias("exposed_sum"),
                                                     pl.col("span_ns").max().alias("longest_slot"))
    joined = summary.join(ranks, on=["run_id", "step"]).join(slots, on=["run_id", "step"], how="left")
    assert joined.height == summary.height and joined["exposed_comm_ns"].sum() > 0
    for r in joined.iter_rows(named=True):
        assert r["exposed_comm_ns"] == round((r["exposed_sum"] or 0) / r["ranks"]), r
        assert r["exposed_comm_ns"] <= min(r["longest_slot"] or 0, r["step_ns"]), r
    for (run,), part in summary.partition_by("run_id", as_dict=True).items():
        named = int(re.match(r"Step (\d+)'s", path_sentence(part)).group(1))
        assert part.filter(pl.col("step") == named)["steady_state"].item() or not part["steady_state"].any(), run


@pytest.mark.parametrize("k1_us", [30, 60])
def test_a_host_gap_is_a_wait_only_when_it_is_longer_than_a_hosts_overhead(tmp_path, k1_us):
    """One rank, one step (µs).  L1 [10, 14) launches K1 [15, 15 + k1); L2 starts 2 µs after K1 ends
    and launches K2 (100 µs, 5 µs after); a cudaDeviceSynchronize returns 2 µs after K2; the step
    ends 20 µs later.  The host gap before L2, [14, 17 + k1), holds no call, stream 7 is busy
    through it and drains 2 µs before L2.  Of 33 µs (k1 = 30) it is the host's own overhead: the
    path stays on the host (its gap, L1's call, the time before it).  Of 63 µs (k1 = 60, over the
    50 µs floor) the host waited for K1: the path is K1, its launch delay and the time before L1."""
    l2 = 15 + k1_us + 2
    k2 = l2 + 5
    end = k2 + 100 + 2 + 20
    run = _one_rank(tmp_path / "gap", [
        _step(0, end),
        _rt("cudaLaunchKernel", 10, 4, 1), _kernel("sm90_xmma_gemm_f32f32", 15, k1_us, 1),
        _rt("cudaLaunchKernel", l2, 4, 2), _kernel("flash_fwd_kernel", k2, 100, 2),
        _rt("cudaDeviceSynchronize", l2 + 5, k2 + 100 + 2 - (l2 + 5), 3),
    ])
    db = tmp_path / "gap.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (row,) = query(db, "critical_path_summary").iter_rows(named=True)
    if k1_us + 3 < 50:
        expected = {"host_gap": 10 + (l2 - 14) + 20, "cpu_op": 4 + 2, "launch_delay": 5, "compute_kernel": 100}
    else:
        expected = {"host_gap": 10 + 2 + 20, "cpu_op": 2, "launch_delay": 5 + 5, "compute_kernel": k1_us + 100}
    assert row["path_ns"] == row["step_ns"] == end * US == sum(expected.values()) * US
    assert _kinds(row) == _us({"memory": 0, "comm_transfer": 0, "comm_wait": 0, **expected})


@pytest.mark.parametrize("bubble_us", [3, 40])
def test_a_stream_busy_through_the_gap_may_idle_only_briefly(tmp_path, bubble_us):
    """One rank, one step (µs).  The host launches A, B, C, D (100 µs each, stream 7) at 10, 16, 22,
    28 (4 µs calls); A runs [15, 115), B and C each 3 µs after the one before, D `bubble` after C.
    The host launches E (50 µs, 5 µs after its call) 2 µs after D ends and waits for it in a
    cudaDeviceSynchronize that returns 2 µs after; the step ends 20 µs later.  The host gap before
    E's launch starts at 32.  With 3 µs bubbles stream 7 was busy through it (every idle piece under
    20 µs): the host waited for D, and the path runs back through D, C, B and A (each 3 µs apart,
    launch delay: their stream was free, they had not started) to A's launch.  A 40 µs bubble is
    an idle stream: the gap is host time, and the path is E and the host's calls and gaps."""
    a, b, c = 15, 15 + 100 + 3, 15 + 2 * (100 + 3)
    d = c + 100 + bubble_us
    l_e = d + 100 + 2
    e = l_e + 5
    end = e + 50 + 2 + 20
    events = [_step(0, end)]
    for n, (ts, start) in enumerate(zip((10, 16, 22, 28), (a, b, c, d)), 1):
        events += [_rt("cudaLaunchKernel", ts, 4, n), _kernel("sm90_xmma_gemm_f32f32", start, 100, n)]
    events += [_rt("cudaLaunchKernel", l_e, 4, 5), _kernel("flash_fwd_kernel", e, 50, 5),
               _rt("cudaDeviceSynchronize", l_e + 5, e + 50 + 2 - (l_e + 5), 6)]
    run = _one_rank(tmp_path / "bubbles", events)
    db = tmp_path / "bubbles.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    (row,) = query(db, "critical_path_summary").iter_rows(named=True)
    if bubble_us <= 20:
        expected = {"host_gap": 10 + 2 + 20, "launch_delay": 5 + 3 + 3 + bubble_us + 5, "compute_kernel": 4 * 100 + 50,
                    "cpu_op": 2}
    else:  # E's launch delay; the host: before L_a, its four calls and the 2 µs between them, the gap, the tail
        expected = {"host_gap": 10 + 3 * 2 + (l_e - 32) + 20, "launch_delay": 5, "compute_kernel": 50,
                    "cpu_op": 4 * 4 + 2}
    assert row["path_ns"] == row["step_ns"] == end * US == sum(expected.values()) * US
    assert _kinds(row) == _us({"memory": 0, "comm_transfer": 0, "comm_wait": 0, **expected})
