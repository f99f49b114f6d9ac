"""Traces in the 2021 Kineto schema (PyTorch 1.8 / 1.9): categories ``Operator`` / ``Runtime`` /
``Kernel``, the op's ``External id`` repeated as ``external id`` on the runtime call and the kernel.

The events are written as libkineto's ChromeTraceLogger of that time wrote them (output_json.cpp:
``handleCpuActivity`` "Operator" with ``Device`` / ``External id`` / ``Trace name`` args,
``handleRuntimeActivity`` "Runtime" with ``cbid`` / ``correlation`` / ``external id`` / ``external
ts``, ``handleGpuActivity`` "Kernel" with ``queued`` / ``device`` / ``context`` / ``stream`` /
``correlation`` / ``external id``; PyTorch's ``finalizeCPUTrace`` adds ``Input Dims`` and ``Input
type``).  The ops' ``tid`` is the profiler's own thread number (``RecordFunction::currentThreadId``)
while the runtime call's is the system thread id CUPTI reports, so time nesting on one thread finds
no op: only the external id links a kernel to the op that launched it.
"""

from __future__ import annotations

import pytest

from conftest import write_trace
from scaletrace.pipeline import ingest
from scaletrace.pipeline.read import columns
from scaletrace.pipeline.store.db import connect

PID, OP_TID, CUPTI_TID = 4321, "1", "139912345"


def op(name, ts, dur, ext, **args):
    return {"ph": "X", "cat": "Operator", "name": name, "pid": PID, "tid": OP_TID, "ts": ts, "dur": dur,
            "args": {"Device": PID, "External id": ext, "Trace name": "PyTorch Profiler", "Trace iteration": 0,
                     **args}}


def launch(ts, corr, ext, ext_ts):
    return {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": CUPTI_TID, "ts": ts,
            "dur": 4, "args": {"cbid": 211, "correlation": corr, "external id": ext, "external ts": ext_ts}}


def kernel(name, ts, dur, corr, ext):
    args = {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": corr,
            "registers per thread": 32, "shared memory": 0, "warps per SM": 4.0, "grid": [1, 1, 1],
            "block": [128, 1, 1]}
    if ext is not None:
        args["external id"] = ext
    return {"ph": "X", "cat": "Kernel", "name": name, "pid": 0, "tid": "stream 7", "ts": ts, "dur": dur,
            "args": args}


M, K, N = 8, 16, 32  # aten::addmm(bias [N], mat1 [M, K], mat2 [K, N])
EVENTS = [
    op("ProfilerStep#1", 1000, 400, 1),
    op("aten::linear", 1010, 60, 2, **{"Input Dims": [[M, K], [N, K], [N]], "Input type": ["float"] * 3}),
    op("aten::addmm", 1020, 40, 3, **{"Input Dims": [[N], [M, K], [K, N], [], []],
                                      "Input type": ["float", "float", "float", "Scalar", "Scalar"]}),
    launch(1030, 101, 3, 1020),
    kernel("volta_sgemm_32x32_sliced1x4_tn", 1100, 20, 101, 3),
    # an absorbing op (embedding) hands its family down: the index_select inside it is embedding time
    op("aten::embedding", 1200, 50, 4), op("aten::index_select", 1210, 30, 5),
    launch(1220, 102, 5, 1210),
    kernel("void indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(float*)", 1250, 10, 102, 5),
    # a kernel without its own external id: the runtime call's links it
    op("aten::add", 1300, 30, 6), launch(1310, 103, 6, 1300),
    kernel("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >(int)", 1320, 5, 103,
           None),
]
# (correlation, launching op, family, basis): each kernel's op is the one whose External id it names
EXPECTED = {101: ("aten::addmm", "GEMM", "op"), 102: ("aten::index_select", "embedding", "op"),
            103: ("aten::add", "elementwise", "op")}


@pytest.fixture(scope="module", params=["compiled", "python"])
def db(request, tmp_path_factory, monkeypatch_module):
    if request.param == "compiled" and not columns.compiled_available():
        pytest.skip("the compiled extractor is not built")
    monkeypatch_module.setenv(columns.ENV, request.param)
    folder = tmp_path_factory.mktemp(f"legacy-{request.param}")
    path = write_trace(folder / "run" / "trace.json", EVENTS)
    db = folder / "t.duckdb"
    report = ingest([path.parent], db=db, workers=1)
    assert not report.errors, [o.line() for o in report.errors]
    return db


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_kernels_link_to_their_ops_through_the_external_id(db):
    with connect(db) as database:
        rows = database.sql("SELECT correlation, launch_op, family, family_basis, step FROM device_events").rows()
    got = {corr: (op_name, family, basis) for corr, op_name, family, basis, _ in rows}
    assert got == EXPECTED
    # every launch (1030, 1220, 1310 µs) lies in ProfilerStep#1 (1000-1400 µs), an `Operator` here
    assert {step for *_, step in rows} == {1}


def test_the_dtype_comes_from_the_input_type(db):
    with connect(db) as database:
        rows = database.sql("SELECT name, dtype, flops FROM op_flops(NULL) WHERE name = 'aten::addmm'").to_dicts()
    assert len(rows) == 1
    assert rows[0]["dtype"] == "float"
    assert rows[0]["flops"] == 2 * M * K * N
