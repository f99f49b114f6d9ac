"""Accelerators are never silently CPU: device activity in categories other than CUDA's.

* MTIA (``mtia_ccp_events`` kernels launched from ``mtia_runtime``): device lanes, and
  ``hta_idle_time_breakdown`` / ``hta_temporal_breakdown`` equal HTA's own answer on the same file;
* a category the vocabulary does not know whose events carry a ``stream`` / ``device`` arg: device
  lanes, said in the ingest log;
* a category without such args (the CUPTI range profiler's ``cuda_profiler_range``): stored CPU-only,
  and the ingest log line names the category and the ``--rules`` that would make it device activity.

Both extractors (compiled scanner and the reference) must read these traces alike.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict

import duckdb
import pytest
from click.testing import CliRunner

from conftest import cpu, kernel, query, write_trace
from scaletrace.cli import main
from scaletrace.pipeline.read import columns
from scaletrace.pipeline.read.classify import DEFAULT_RULES

LAUNCH = "runFunction - job_prep_and_submit_for_execution"  # MTIA's launch call (HTA's trace_symbol_table)

# (name, stream, launch_ts, ts, dur) in µs; one MTIA device, compute stream 1, DMA stream 2.
# Stream 1, as HTA's idle breakdown sorts it (consecutive_kernel_delay 30 µs):
#   k1 [20, 120)  first on the stream
#   k2 [130, 230) launched at 30 < 120: gap 10 < 30          -> kernel_wait 10
#   k3 [310, 360) launched at 300 > 230 (host was late)      -> host_wait 80
#   k4 [420, 470) launched at 320 < 360, gap 60 >= 30        -> other 60
#   k5 [500, 600) launched at 410 < 470, gap 30 (not < 30)   -> other 30
#   k6 [605, 700) launched at 420 < 600, gap 5               -> kernel_wait 5
#   k7 [820, 900) launched at 810, after the last ProfilerStep began: HTA drops it (2+ steps)
# Stream 2: dma [200, 260) launched at 190 (memory: `dma*`), the stream's only kernel.
KERNELS = [
    ("mtia_fused_gemm_0", 1, 10, 20, 100),
    ("mtia_fused_gemm_1", 1, 30, 130, 100),
    ("mtia_layernorm_0", 1, 300, 310, 50),
    ("mtia_softmax_0", 1, 320, 420, 50),
    ("mtia_fused_gemm_2", 1, 410, 500, 100),
    ("mtia_fused_gemm_3", 1, 420, 605, 95),
    ("mtia_fused_gemm_4", 1, 810, 820, 80),
    ("dma_copy_h2d", 2, 190, 200, 60),
]
STEPS = [(1, 0, 400), (2, 400, 400), (3, 800, 400)]  # (step, ts, dur) µs


def mtia_events(device_cat: str = "mtia_ccp_events", runtime_cat: str = "mtia_runtime") -> list:
    events = [cpu(f"ProfilerStep#{s}", ts, dur, cat="user_annotation") for s, ts, dur in STEPS]
    for corr, (name, stream, launch, ts, dur) in enumerate(KERNELS, start=1):
        events.append(cpu(LAUNCH, launch, 2, cat=runtime_cat, correlation=corr))
        events.append(kernel(name, ts, dur, stream=stream, corr=corr, cat=device_cat))
    return events


@pytest.fixture(scope="module")
def mtia(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtia")
    run = root / "mtia-run"
    write_trace(run / "rank0.json", mtia_events(), rank=0,
                deviceProperties=[{"id": 0, "name": "MTIA"}])
    db = root / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "--workers", "1"])
    assert result.exit_code == 0, result.output
    return run, db, result.output


def test_mtia_kernels_are_device_lanes(mtia):
    _, db, _ = mtia
    con = duckdb.connect(str(db), read_only=True)
    assert con.sql("SELECT trace_mode FROM traces").fetchall() == [("gpu",)]
    rows = con.sql("SELECT lane, kind, count(*), sum(dur_ns) FROM device_events GROUP BY ALL ORDER BY 1").fetchall()
    con.close()
    compute = [k for k in KERNELS if k[1] == 1]
    assert rows == [("stream 1", "compute", len(compute), 1000 * sum(k[4] for k in compute)),
                    ("stream 2", "memory", 1, 1000 * 60)]


def test_mtia_compute_time_is_the_kernels(mtia):
    """rank_breakdown over the whole trace: the compute kernels do not overlap one another, so
    compute = the sum of their durations; the DMA copy [200, 260) lies under k2 [130, 230) for
    30 µs, so 30 µs of it are exposed."""
    _, db, _ = mtia
    row = query(db, "rank_breakdown").to_dicts()[0]
    assert row["compute_ns"] == 1000 * sum(k[4] for k in KERNELS if k[1] == 1)
    assert row["memory_ns"] == 60_000
    assert row["exposed_memory_ns"] == 1000 * (260 - 230)


def _hta(run_dir):
    hta = pytest.importorskip("hta.trace_analysis")
    logging.getLogger("hta").setLevel(logging.ERROR)
    return hta.TraceAnalysis(trace_dir=str(run_dir))


def test_mtia_idle_breakdown_matches_hta(mtia):
    run, db, _ = mtia
    theirs, _ = _hta(run).get_idle_time_breakdown(ranks=[0], visualize=False)
    theirs = {(int(r["stream"]), r["idle_category"]): r for r in theirs.to_dict("records")}
    mine = {(r["stream"], r["idle_category"]): r for r in query(db, "hta_idle_time_breakdown").iter_rows(named=True)}
    assert set(mine) == set(theirs)
    for key, r in theirs.items():
        assert mine[key]["idle_time_us"] == pytest.approx(float(r["idle_time"]), abs=1e-6), key
        if math.isnan(r["idle_time_ratio"]):
            assert mine[key]["idle_time_ratio"] is None, key
        else:
            assert mine[key]["idle_time_ratio"] == pytest.approx(float(r["idle_time_ratio"]), abs=0.0100001), key
    # ... and the answer is the one derived by hand above (k7 dropped: launched in the last step)
    assert {k: mine[k]["idle_time_us"] for k in mine if k[0] == 1} == {
        (1, "kernel_wait"): 10 + 5, (1, "host_wait"): 80, (1, "other"): 60 + 30}


def test_mtia_temporal_breakdown_matches_hta(mtia):
    run, db, _ = mtia
    theirs = _hta(run).get_temporal_breakdown(visualize=False).to_dict("records")
    mine = query(db, "hta_temporal_breakdown").to_dicts()
    assert len(theirs) == len(mine) == 1
    for col in ("idle_time", "compute_time", "non_compute_time", "kernel_time"):
        assert mine[0][f"{col}_us"] == pytest.approx(float(theirs[0][f"{col}(us)"]), abs=1e-6), col
    # by hand: kernels k1..k6 and the DMA copy span [20, 700); busy = U(all) =
    # [20,120) [130,260) [310,360) [420,470) [500,600) [605,700) = 100+130+50+50+100+95
    busy = 100 + 130 + 50 + 50 + 100 + 95
    assert mine[0]["kernel_time_us"] == 700 - 20
    assert mine[0]["idle_time_us"] == 700 - 20 - busy


@pytest.fixture(scope="module")
def range_profiler(tmp_path_factory):
    """A CUPTI range-profiler trace: A100 deviceProperties, CPU ops, and `cuda_profiler_range` events
    on the device's pid with counter args only (no stream, no device arg), as libkineto writes them."""
    root = tmp_path_factory.mktemp("cupti")
    events = [cpu("ProfilerStep#1", 0, 500, cat="user_annotation"), cpu("aten::mm", 10, 100)]
    for i in range(3):
        events.append({"ph": "X", "cat": "cuda_profiler_range", "name": f"ampere_sgemm_{i}", "pid": 0, "tid": 0,
                       "ts": 100 * i, "dur": 100, "args": {"sm__inst_executed_pipe_tensor.sum": 1024 * i}})
    run = root / "cupti-run"
    write_trace(run / "rank0.json", events, rank=0, deviceProperties=[{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}])
    return root, run


def test_an_unknown_category_without_device_args_is_named_with_the_rules(range_profiler):
    root, run = range_profiler
    db = root / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "--workers", "1"])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    assert con.sql("SELECT trace_mode FROM traces").fetchall() == [("cpu",)]
    con.close()
    lines = [line for line in result.output.splitlines() if "cuda_profiler_range" in line]
    assert len(lines) == 1, result.output
    assert "3 events of 'cuda_profiler_range'" in lines[0] and "--rules" in lines[0] and "CPU-only" in lines[0]
    # the rule the line gives, put in front of the default rules, makes them device activity
    rule = json.loads(lines[0].split("--rules FILE: [", 1)[1].split(", then the default rules]", 1)[0])
    rules = root / "rules.json"
    rules.write_text(json.dumps([rule] + [asdict(r) for r in DEFAULT_RULES]))
    db2 = root / "t2.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db2), "--rules", str(rules), "-q"])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db2), read_only=True)
    assert con.sql("SELECT trace_mode FROM traces").fetchall() == [("gpu",)]
    assert con.sql("SELECT count(*), sum(dur_ns) FROM device_events").fetchall() == [(3, 3 * 100_000)]
    con.close()


def test_a_cpu_only_trace_of_known_categories_has_no_note(tmp_path):
    run = tmp_path / "gloo"
    write_trace(run / "rank0.json", [cpu("ProfilerStep#1", 0, 100, cat="user_annotation"), cpu("aten::mm", 1, 50),
                                     cpu("gloo:all_reduce", 60, 30, tid=2, cat="user_annotation")], rank=0)
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(tmp_path / "t.duckdb"), "--workers", "1"])
    assert result.exit_code == 0 and "vocabulary" not in result.output, result.output


@pytest.mark.parametrize("args,device", [({"stream": 3}, True), ({"device": 0}, True), ({}, False),
                                         ({"stream": None}, False)])
def test_an_unknown_category_with_a_stream_or_device_arg_is_a_device_lane(tmp_path, args, device):
    """A new accelerator's kernels, category `acme_kernel`: with a stream or device arg they are device
    events (compute: no rule names them otherwise), 40 µs on their lane, and the log says so."""
    run = tmp_path / "acme"
    write_trace(run / "rank0.json", [
        cpu("ProfilerStep#1", 0, 500, cat="user_annotation"), cpu("aten::mm", 1, 5),
        {"ph": "X", "cat": "acme_kernel", "name": "acme_gemm", "pid": 0, "tid": 3, "ts": 200, "dur": 40, "args": args},
    ], rank=0)
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "--workers", "1"])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    rows = con.sql("SELECT lane, kind, dur_ns FROM device_events WHERE name = 'acme_gemm'").fetchall()
    mode = con.sql("SELECT trace_mode FROM traces").fetchall()[0][0]
    con.close()
    lane = "stream 3" if "stream" in args and args["stream"] is not None else "tid 3"
    assert (rows, mode) == (([(lane, "compute", 40_000)], "gpu") if device else ([], "cpu"))
    assert ("'acme_kernel'" in result.output) and (("arg: device activity" in result.output) is device)


@pytest.mark.skipif(not columns.compiled_available(), reason="the compiled extractor is not built")
@pytest.mark.parametrize("which", ["mtia", "cupti", "acme"])
def test_both_extractors_read_accelerator_traces_alike(tmp_path, which, range_profiler):
    from test_extractor_diff import both
    if which == "mtia":
        path = write_trace(tmp_path / "r.json", mtia_events(), rank=0)
    elif which == "cupti":
        path = next(range_profiler[1].glob("*.json"))
    else:
        path = write_trace(tmp_path / "r.json", [
            cpu("aten::mm", 1, 5), kernel("k", 0, 10, cat="kernel", corr=1),
            {"ph": "X", "cat": "acme_kernel", "name": "a", "pid": 0, "tid": 3, "ts": 20, "dur": 4, "args": {"stream": 3}},
            {"ph": "X", "cat": "acme_counter", "name": "c", "pid": 0, "tid": 3, "ts": 20, "dur": 4}], rank=0)
    reference, ours = both(path)
    assert reference[0] == "ok" and reference == ours


@pytest.mark.parametrize("category,kind", [
    ("collective_comm", "comm"),  # libkineto COLLECTIVE_COMM: device-side communication (XPU's PTI view)
    ("xpu_sync", "sync"),  # libkineto XPU_SYNC
    ("cuda_event", None),  # a CUDA event record: a marker on a stream, no work (not device activity)
])
def test_other_kineto_device_categories(tmp_path, category, kind):
    """Beside a 100 µs kernel [0, 100), one 40 µs event of ``category`` [200, 240) with stream and device
    args: its kind's time is 40 µs (the two do not overlap), or, not device activity, nothing."""
    run = tmp_path / "run"
    write_trace(run / "rank0.json", [
        cpu("ProfilerStep#1", 0, 500, cat="user_annotation"),
        cpu("cudaLaunchKernel", 1, 1, cat="cuda_runtime", correlation=1), kernel("gemm", 0, 100, corr=1),
        kernel("xpu_op_0", 200, 40, stream=5, cat=category)], rank=0)  # a name no pattern knows
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "-q", "--workers", "1"])
    assert result.exit_code == 0, result.output
    row = query(db, "rank_breakdown").to_dicts()[0]
    expected = {"compute": 100_000, "comm": 0, "sync": 0}
    if kind:
        expected[kind] += 40_000
    con = duckdb.connect(str(db), read_only=True)
    sync = con.sql("SELECT coalesce(sum(dur_ns), 0) FROM device_events WHERE kind = 'sync'").fetchall()[0][0]
    con.close()
    assert (row["compute_ns"], row["comm_ns"], sync) == (expected["compute"], expected["comm"], expected["sync"])


@pytest.mark.parametrize("category", ["cpu_op", "cuda_runtime", "hip_runtime", "user_annotation", "hpu_op",
                                      "glow_runtime", "Operator"])
def test_host_categories_with_a_stream_arg_stay_on_the_host(tmp_path, category):
    """A CPU op or runtime call may carry a stream arg (Triton launches, ROCm's runtime calls): it never
    becomes a device lane; the device holds the kernel alone."""
    run = tmp_path / "run"
    write_trace(run / "rank0.json", [
        cpu("cudaLaunchKernel", 1, 1, cat="cuda_runtime", correlation=1), kernel("gemm", 0, 100, corr=1),
        cpu("host_thing", 200, 40, cat=category, stream=3, device=0)], rank=0)
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "--workers", "1"])
    assert result.exit_code == 0 and "vocabulary" not in result.output and "device arg" not in result.output
    con = duckdb.connect(str(db), read_only=True)
    assert con.sql("SELECT name FROM device_events").fetchall() == [("gemm",)]
    con.close()
