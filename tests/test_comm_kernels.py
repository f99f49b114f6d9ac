"""Every communication kernel, by more than its name.

* expert-parallel dispatch / combine kernels in any namespace (`<vendor>::ep::internode::dispatch`,
  DeepEP's `deep_ep::intranode::cached_notify_dispatch`, NCCL EP's `nccl_ep::internode_ll::combine`)
  are all-to-all; a pattern never matches inside a template argument;
* a kernel launched by a collective call (its innermost launching op is `record_param_comms`,
  `c10d::*`, TorchRec's `All2All_Pooled_Req`) is communication, whatever its name; a copy launched by
  an `aten::` op nested inside the collective is not;
* on CPU-only traces, TorchRec's collective Functions: `*_Req` (and `*_WaitBackward`) issue the
  collective (comm), `*_Wait` (and `*_ReqBackward`) wait for it (sync); neither is compute.

Expected values are derived in each test from the generated events.
"""

from __future__ import annotations

import duckdb
import pytest
from click.testing import CliRunner

from conftest import cpu, kernel, query, write_trace
from scaletrace.cli import main
from scaletrace.pipeline.read.classify import Classifier, is_collective_call
from scaletrace.pipeline.read.collectives import canonical, from_kernel_name


@pytest.mark.parametrize("name,collective", [
    # the 64-GPU MoE trace's spellings, and the public libraries' (DeepEP csrc/kernels/{intranode,internode,
    # internode_ll}.cu, NCCL's nccl_ep); the demangled form Kineto writes, with templates and parameters
    ("void dpsk::ep::internode::dispatch<true, 8, 2>(int4*, float*, long const*, int)", "all_to_all"),
    ("void dpsk::ep::internode::combine<__nv_bfloat16, 8>(int4*, float*)", "all_to_all"),
    ("void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, int*, int)", "all_to_all"),
    ("dpsk::ep::internode::cached_notify(int, int, int)", "all_to_all"),
    ("void deep_ep::intranode::cached_notify_dispatch<8>(int const*, int, void**, int**, int)", "all_to_all"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)", "all_to_all"),
    ("void deep_ep::internode_ll::combine<false, 7168, 9>(void*, void const*)", "all_to_all"),
    ("void nccl_ep::internode_ll::dispatch<true, false, 7168>(void*)", "all_to_all"),
    ("_ZN7deep_ep9internode8dispatchILb0ELi8EEEvP4int4", "all_to_all"),  # Itanium-mangled
    # not communication: local work in an EP library, and EP words inside template arguments
    ("void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*)", None),
    ("void deep_ep::internode_ll::clean_low_latency_buffer<32>(int*, int, int*, int)", None),
    ("void gemm_kernel<dpsk::ep::internode::dispatch>(float*)", None),
    ("void at::native::dispatch_helper<{lambda()#1}>(float*)", None),
    ("void moe::sweep::combine_outputs<float>(float*)", None),
])
def test_ep_kernels_are_all_to_all(name, collective):
    assert Classifier().classify("gpu", "kernel", name) == ("comm" if collective else "compute")
    assert from_kernel_name(name) == collective


@pytest.mark.parametrize("name,is_call,collective", [
    ("All2All_Pooled_Req", True, "all_to_all"), ("All2All_Pooled_WaitBackward", True, "all_to_all"),
    ("Variable_Batch_All2All_Pooled_Req", True, "all_to_all"), ("All2Allv_Req", True, "all_to_all"),
    ("ReduceScatterBase_Req", True, "reduce_scatter"), ("AllGatherBase_Req", True, "all_gather"),
    ("All2All_Pooled_Wait", False, "all_to_all"), ("All2All_Pooled_ReqBackward", False, "all_to_all"),
    ("aten::all_gather_copy", False, None), ("my_request", False, None),
])
def test_collective_functions(name, is_call, collective):
    assert is_collective_call(name) is is_call
    classify = Classifier().classify
    waits = name.endswith(("_Wait", "_ReqBackward"))
    assert classify("cpu", "cpu_op", name) == ("comm" if is_call else "sync" if waits else "compute")
    assert (canonical(name) if collective else None) == collective


# -- a kernel launched by a collective call ------------------------------------------------------------
# µs.  Thread 1 inside ProfilerStep#1 [0, 1000):
#   aten::mm [10, 20) launches `gemm_kernel_x` (corr 1)               -> compute [100, 400) on stream 7
#   record_param_comms [30, 60) (all_to_all, group "ep", 4 ranks):
#     aten::copy_ [32, 40) launches `copy_kernel` (corr 2)          -> compute [150, 170) on stream 20
#     its own launch (corr 3) of `a2a_kernel_v2` (no pattern knows it) -> comm by its launch, [300, 600)
#   no op around the launch (corr 4) of `dpsk::ep::internode::dispatch`  -> comm by its name, [650, 750)
GEMM, COPY, A2A, EP = (100, 400), (150, 170), (300, 600), (650, 750)
EP_NAME = "void dpsk::ep::internode::dispatch<true, 8>(int4*, float*)"


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    root = tmp_path_factory.mktemp("launched")
    comms_args = {"Collective name": "all_to_all", "Group size": 4, "Process Group Name": "ep",
                  "dtype": "BFloat16", "In msg nelems": 1024, "Out msg nelems": 1024}
    events = [
        cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        cpu("aten::mm", 10, 10), cpu("cudaLaunchKernel", 12, 2, cat="cuda_runtime", correlation=1),
        cpu("record_param_comms", 30, 30, **comms_args),
        cpu("aten::copy_", 32, 8), cpu("cudaLaunchKernel", 34, 2, cat="cuda_runtime", correlation=2),
        cpu("cudaLaunchKernel", 45, 2, cat="cuda_runtime", correlation=3),
        cpu("cudaLaunchKernel", 70, 2, cat="cuda_runtime", correlation=4),
        kernel("gemm_kernel_x", GEMM[0], GEMM[1] - GEMM[0], stream=7, corr=1),
        kernel("copy_kernel", COPY[0], COPY[1] - COPY[0], stream=20, corr=2),
        kernel("a2a_kernel_v2", A2A[0], A2A[1] - A2A[0], stream=20, corr=3),
        kernel(EP_NAME, EP[0], EP[1] - EP[0], stream=21, corr=4),
    ]
    run = root / "ep-run"
    write_trace(run / "rank0.json", events, rank=0)
    db = root / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "-q", "--workers", "1"])
    assert result.exit_code == 0, result.output
    return db


def test_a_kernel_launched_by_a_collective_is_comm(launched):
    con = duckdb.connect(str(launched), read_only=True)
    kinds = dict(con.sql("SELECT name, kind FROM device_events").fetchall())
    family = con.sql("SELECT family FROM device_events WHERE name = 'a2a_kernel_v2'").fetchall()
    con.close()
    assert kinds == {"gemm_kernel_x": "compute", "copy_kernel": "compute", "a2a_kernel_v2": "comm", EP_NAME: "comm"}
    assert family == [(None,)]  # only compute has a family


def test_collective_rows_of_the_launched_and_the_named(launched):
    by_name = {r["kernel"]: r for r in query(launched, "collectives").to_dicts()}
    assert set(by_name) == {"a2a_kernel_v2", EP_NAME}
    a2a, ep = by_name["a2a_kernel_v2"], by_name[EP_NAME]
    assert (a2a["collective"], a2a["pg_name"], a2a["group_size"], a2a["meta_source"]) == ("all_to_all", "ep", 4, "cpu_op")
    assert (ep["collective"], ep["meta_source"]) == ("all_to_all", "kernel_name")
    # exposed = the part outside compute U([100,400), [150,170)) = [100, 400)
    assert a2a["exposed_ns"] == 1000 * (A2A[1] - GEMM[1])
    assert ep["exposed_ns"] == 1000 * (EP[1] - EP[0])


def test_breakdown_counts_them_as_communication(launched):
    row = query(launched, "rank_breakdown").to_dicts()[0]
    comm = (A2A[1] - A2A[0]) + (EP[1] - EP[0])  # disjoint
    compute = GEMM[1] - GEMM[0]  # the copy lies inside the GEMM's interval
    overlap = GEMM[1] - A2A[0]  # [300, 400)
    assert (row["comm_ns"], row["compute_ns"], row["exposed_comm_ns"]) == (
        1000 * comm, 1000 * compute, 1000 * (comm - overlap))


# -- CPU-only trace: TorchRec's collective Functions ---------------------------------------------------
# µs, thread 1 (the training thread; no gloo thread in the trace):
#   aten::mm [0, 200)                                   compute
#   All2All_Pooled_Req [200, 300) holding aten::copy_ [210, 230)   comm (the copy is the call's)
#   aten::add [300, 350)                                compute
#   All2All_Pooled_Wait [350, 500) holding aten::cat [480, 500)    sync
#   aten::mm [500, 700)                                 compute
#   All2All_Pooled_WaitBackward [700, 760)              comm (backward issues the gradients' all-to-all)
#   All2All_Pooled_ReqBackward [760, 800)               sync
CPU_COMPUTE = [(0, 200), (300, 350), (500, 700)]
CPU_COMM = [(200, 300), (700, 760)]


def test_torchrec_functions_on_a_cpu_trace(tmp_path):
    run = tmp_path / "torchrec"
    write_trace(run / "rank0.json", [
        cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        cpu("aten::mm", 0, 200), cpu("All2All_Pooled_Req", 200, 100), cpu("aten::copy_", 210, 20),
        cpu("aten::add", 300, 50), cpu("All2All_Pooled_Wait", 350, 150), cpu("aten::cat", 480, 20),
        cpu("aten::mm", 500, 200), cpu("All2All_Pooled_WaitBackward", 700, 60),
        cpu("All2All_Pooled_ReqBackward", 760, 40),
    ], rank=0)
    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(run), "--db", str(db), "-q", "--workers", "1"])
    assert result.exit_code == 0, result.output
    row = query(db, "rank_breakdown").to_dicts()[0]
    assert row["compute_ns"] == 1000 * sum(b - a for a, b in CPU_COMPUTE)
    assert row["comm_ns"] == 1000 * sum(b - a for a, b in CPU_COMM)
    con = duckdb.connect(str(db), read_only=True)
    collectives = con.sql("SELECT collective, dur_ns FROM collectives ORDER BY ts_ns").fetchall()
    syncs = con.sql("SELECT name FROM device_events WHERE kind = 'sync' ORDER BY ts_ns").fetchall()
    con.close()
    assert collectives == [("all_to_all", 1000 * (b - a)) for a, b in CPU_COMM]
    assert syncs == [("All2All_Pooled_Wait",), ("All2All_Pooled_ReqBackward",)]
