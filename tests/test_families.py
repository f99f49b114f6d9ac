"""Kernel families (pipeline/read/families.py, pipeline/read/launchers.py) and the communication vocabulary.

Expected families come from the trace: the op that launched a kernel (hand-written traces whose
nesting the test states), TraceLens's own per-kernel categories for the same real trace, and a
table of real kernel names labelled by hand (tests/data/kernel_families.tsv).
"""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import cpu, kernel, query, write_trace
from scaletrace.pipeline.read import collectives, families
from scaletrace.pipeline import ingest
from scaletrace.pipeline.read.classify import Classifier
from scaletrace.pipeline.store.db import connect

TABLE = Path(__file__).parent / "data" / "kernel_families.tsv"


def _table() -> list:
    rows = [line.rstrip("\n").split("\t") for line in TABLE.read_text().splitlines() if not line.startswith("#")]
    return [pytest.param(fam, op or None, name, id=f"{families.base_name(name)[:40]}|{op or '-'}")
            for fam, op, name in rows]


def test_the_table_holds_enough_real_names():
    assert len(_table()) >= 150


@pytest.mark.parametrize("family,op,name", _table())
def test_real_kernel_names(family, op, name):
    # the launching op decides when a rule knows it; else the kernel's base name
    got = (families.op_family(op) if op else None) or families.name_family(name)
    assert got == family


@pytest.mark.parametrize("name,base", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
     "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", "vectorized_elementwise_kernel"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, "
     "unsigned int, 4, 64, 64>(int)", "CatArrayBatchedCopy"),
    # a return type with templates, and a comparison inside them
    ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
     "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)", "fused_add_rms_norm_kernel"),
    # a wrapper kernel is named by its first template argument
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)",
     "cutlass_80_simt_sgemm_256x128_8x4_nn_align1"),
    # ... unless that argument is a plain type: then its namespace
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float>(float)", "gemvx"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
    ("_ZN2ck16tensor_operation6device12_GLOBAL__N_149kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffleINS_34Grid",
     "kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffle"),
    ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock",
     "ImplicitGemmConvolution"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic"),
])
def test_base_name(name, base):
    assert families.base_name(name) == base


@pytest.mark.parametrize("name,family", [
    # patterns never see template arguments or parameter lists
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_log_sigmoid_kernel"
     "(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda(float)#1}>(int, x)", "elementwise"),
    ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type vllm::act_and_mul_kernel<8>(int)",
     "elementwise"),  # _typeConvert is no convolution
    ("void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, 4> >(x)",
     "other"),  # cutlass in a template argument is no GEMM
    ("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10", "elementwise"),
    ("triton_red_fused_add_native_layer_norm_3", "norm"), ("triton_per_fused_sum_2", "reduction"),
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1", "GEMM"), ("nvjet_tst_64x16_64x16_2x4_2cta_h_bz_bias_TNT", "GEMM"),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt64x128x32", "convolution"), ("batched_transpose_32x32_half", "elementwise"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float>(x)", "GEMM"),
    # SageAttention; Transformer Engine's layer norm; activations (Liger's Triton SwiGLU / GeGLU)
    ("sage_fwd", "attention"), ("void sageattn::qk_int_sv_f8_attn_kernel<64>(int)", "attention"),
    ("ln_bwd_kernel", "norm"), ("void transformer_engine::normalization::ln_fwd_tuned_kernel<x>(y)", "norm"),
    ("_swiglu_forward_kernel", "elementwise"), ("swiglu_bwd_kernel", "elementwise"),
    ("_geglu_tanh_forward_kernel", "elementwise"), ("gelu", "elementwise"), ("silu", "elementwise"),
    ("usage_kernel", "other"), ("void foo::apply<sage_fwd>(int)", "other"),  # no 'sage' inside a word or template
])
def test_awkward_names(name, family):
    assert families.name_family(name) == family


@pytest.mark.parametrize("op,family", [
    ("aten::mm", "GEMM"), ("aten::addmm", "GEMM"), ("aten::_scaled_mm", "GEMM"), ("aten::mm_out", "GEMM"),
    ("fbgemm::asynchronous_complete_cumsum", None),  # gemm in a namespace is no GEMM
    ("aten::_scaled_dot_product_flash_attention", "attention"), ("vllm::unified_attention_with_output", "attention"),
    ("aten::cudnn_convolution", "convolution"), ("aten::native_layer_norm", "norm"), ("_C::rms_norm", "norm"),
    ("aten::_log_softmax", "softmax"), ("aten::nll_loss_forward", "loss"), ("aten::embedding", "embedding"),
    ("_C::rotary_embedding", "elementwise"), ("aten::_foreach_add_", "optimizer"), ("aten::sum", "reduction"),
    ("aten::max_pool2d", "elementwise"), ("aten::copy_", "elementwise"),
    # an autograd backward node is its forward op: a built-in node (a version after Backward) is the
    # CamelCase of its ATen op, a custom Function's node its class name
    ("autograd::engine::evaluate_function: NativeLayerNormBackward0", "norm"), ("NativeLayerNormBackward0", "norm"),
    ("MmBackward0", "GEMM"), ("AddBackward0", "elementwise"), ("EmbeddingBackward0", "embedding"),
    ("autograd::engine::evaluate_function: FusedLayerNormAffineFunctionBackward", "norm"),
    ("LayerNormBackward", "norm"), ("FlashAttnVarlenFuncBackward", "attention"),
    ("torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>", None),  # its Function says nothing
    # a custom Function's forward: its CamelCase name split into words
    ("FlashAttnVarlenFunc", "attention"), ("flash_attn.flash_attn_interface.FlashAttnVarlenFunc", "attention"),
    ("FusedRMSNormAffineFunction", "norm"), ("SageAttention", "attention"), ("sageattn", "attention"),
    ("MyCustomFunc", None), ("MyCustomFuncBackward", None),
    # a norm fused with its GEMM (Transformer Engine) is neither: its kernels' names decide
    ("_LayerNormLinear", None), ("_LayerNormMLPBackward", None), ("_LayerNorm", "norm"), ("_LayerNormBackward", "norm"),
    # no pattern matches inside template arguments
    ("my_ns::launch<at::native::layer_norm_kernel>", None),
    ("triton_red_fused_convolution_0", None),  # inductor's record of a launch: the kernel's name decides
    ("_C::silu_and_mul", None),  # a custom op no rule knows
])
def test_op_families(op, family):
    assert families.op_family(op) == family


# -- through ingest: the launching op is the innermost op around the launch ---------------------------

def _launched(path: Path, stack: list, kernel_name: str, corr: int, tid: int = 1) -> list:
    """CPU ops nested as ``stack`` (outermost first, each 2 µs inside its parent), the launch inside
    the innermost, and the kernel it launched."""
    events, start, end = [], 100 * corr, 100 * corr + 60
    for name, cat in stack:
        events.append(cpu(name, start, end - start, cat=cat, tid=tid))
        start, end = start + 2, end - 2
    events.append(cpu("cudaLaunchKernel", start, 4, cat="cuda_runtime", tid=tid, correlation=corr))
    events.append(kernel(kernel_name, 100 * corr + 30, 20, corr=corr))
    return events


WRAPPER = "autograd::engine::evaluate_function: "
CASES = [  # (stack around the launch, kernel, expected launch_op, family, basis)
    ([("aten::linear", "cpu_op"), ("aten::addmm", "cpu_op")], "volta_sgemm_128x64_nn", "aten::addmm", "GEMM", "op"),
    # an absorbing op hands its family to what runs inside it
    ([("aten::embedding", "cpu_op"), ("aten::index_select", "cpu_op")], "indexSelectLargeIndex", "aten::index_select",
     "embedding", "op"),
    ([("aten::cross_entropy_loss", "cpu_op"), ("aten::log_softmax", "cpu_op"), ("aten::_log_softmax", "cpu_op")],
     "cunn_SoftMaxForward", "aten::_log_softmax", "loss", "op"),
    # GEMM does not absorb: the copy inside matmul stays elementwise
    ([("aten::matmul", "cpu_op"), ("aten::reshape", "cpu_op"), ("aten::copy_", "cpu_op")], "elementwise_kernel",
     "aten::copy_", "elementwise", "op"),
    # the optimizer-step annotation makes the elementwise kernels inside it optimizer time
    ([("Optimizer.step#AdamW.step", "user_annotation"), ("aten::mul_", "cpu_op")], "vectorized_elementwise_kernel",
     "aten::mul_", "optimizer", "op"),
    # other annotations are not ops: the kernel inside is the op's family, not the annotation's
    ([("attention_block", "user_annotation"), ("aten::add", "cpu_op")], "vectorized_elementwise_kernel", "aten::add",
     "elementwise", "op"),
    # an op no rule knows: the kernel's name decides, the op is still named
    ([("_C::silu_and_mul", "cpu_op")], "void vllm::act_and_mul_kernel<c10::BFloat16>(int)", "_C::silu_and_mul",
     "elementwise", "name"),
    # no op around the launch
    ([], "flash_fwd_kernel", None, "attention", "name"),
    # a custom autograd Function's forward says what its kernel is (by name alone, cutlass: GEMM)
    ([("FlashAttnVarlenFunc", "cpu_op")], "kernel_cutlass_kernel_0", "FlashAttnVarlenFunc", "attention", "op"),
    # a backward node is its forward op, inside the engine's wrapper or alone
    ([(WRAPPER + "FusedLayerNormAffineFunctionBackward", "cpu_op"), ("FusedLayerNormAffineFunctionBackward", "cpu_op")],
     "void cuComputeGradInput<float>(int)", "FusedLayerNormAffineFunctionBackward", "norm", "op"),
    ([(WRAPPER + "LayerNormBackward", "cpu_op")], "void cuComputeGradInput<float>(int)", WRAPPER + "LayerNormBackward",
     "norm", "op"),
    # ... but the wrapper hands nothing down: the gradient accumulation after the node is elementwise
    ([(WRAPPER + "NativeLayerNormBackward0", "cpu_op"), ("aten::add", "cpu_op")], "vectorized_elementwise_kernel",
     "aten::add", "elementwise", "op"),
]


def test_launching_op_and_family_through_ingest(tmp_path):
    events = []
    for corr, (stack, name, *_rest) in enumerate(CASES, start=1):
        events += _launched(tmp_path, stack, name, corr)
    events.append(kernel("ampere_sgemm_32x32_nn", 5000, 10, corr=999))  # launched before the trace: no runtime call
    path = write_trace(tmp_path / "run" / "trace.json", events)
    db = tmp_path / "t.duckdb"
    assert not ingest([path.parent], db=db, workers=1).errors
    with connect(db) as database:
        rows = database.sql("SELECT correlation, launch_op, family, family_basis, short_name FROM device_events")
    got = {r["correlation"]: r for r in rows.to_dicts()}
    for corr, (_stack, name, op, family, basis) in enumerate(CASES, start=1):
        row = got[corr]
        assert (row["launch_op"], row["family"], row["family_basis"]) == (op, family, basis), name
        assert row["short_name"] == families.base_name(name)
    assert (got[999]["launch_op"], got[999]["family"], got[999]["family_basis"]) == (None, "GEMM", "name")


def test_kernel_summary_sums_each_name(tmp_path):
    # two launches of one GEMM (20 µs each) and one of a copy: one row per name, shares of 60 µs
    events = (_launched(tmp_path, [("aten::mm", "cpu_op")], "volta_sgemm_128x64_nn", 1)
              + _launched(tmp_path, [("aten::mm", "cpu_op")], "volta_sgemm_128x64_nn", 2)
              + _launched(tmp_path, [("aten::copy_", "cpu_op")], "elementwise_kernel", 3))
    path = write_trace(tmp_path / "ks" / "trace.json", events)
    db = tmp_path / "t.duckdb"
    assert not ingest([path.parent], db=db, workers=1).errors
    rows = {r["name"]: r for r in query(db, "kernel_summary").to_dicts()}
    gemm, copy = rows["volta_sgemm_128x64_nn"], rows["elementwise_kernel"]
    assert (gemm["launches"], gemm["total_ns"], gemm["mean_ns"]) == (2, 40_000, 20_000)
    assert gemm["time_pct_of_kernel_time"] == pytest.approx(100 * 40 / 60)
    assert (gemm["family"], gemm["family_basis"], gemm["launching_op"]) == ("GEMM", "op", "aten::mm")
    assert (copy["family"], copy["launching_op"], copy["launches"]) == ("elementwise", "aten::copy_", 1)
    assert gemm["time_per_step_per_gpu_ns"] is None  # no ProfilerStep


# -- against TraceLens on the same real trace -------------------------------------------------------------

# TraceLens's op categories that name one of our families ('other' is what it leaves unclassified)
TRACELENS = {"GEMM": "GEMM", "elementwise": "elementwise", "reduce": "reduction", "SDPA": "attention",
             "CONV": "convolution", "BN": "norm", "NORM": "norm"}


def test_families_agree_with_tracelens_kernel_summary(shared_db, shared_traces):
    ref = shared_traces / "tracelens-h100-qwen" / "tracelens_reference" / "kernel_summary.csv"
    with connect(shared_db) as database:
        events = database.sql("SELECT name, launch_op, family, stream FROM device_events "
                              "WHERE run_id = 'tracelens-h100-qwen' AND kind = 'compute'").rows()
    ours = Counter(events)
    agree = total = ops_agree = ops_total = 0
    for r in csv.DictReader(ref.open(encoding="utf-8")):
        n, op = int(r["Kernel duration (µs)_count"]), r["Parent cpu_op"] or None
        same = {k: v for k, v in ours.items() if (k[0], k[1], k[3]) == (r["Kernel name"], op, int(r["Kernel stream"]))}
        ops_total += n
        ops_agree += min(n, sum(same.values()))  # TraceLens's parent op is our launching op
        if r["Parent op category"] in TRACELENS:
            total += n
            agree += min(n, sum(v for k, v in same.items() if k[2] == TRACELENS[r["Parent op category"]]))
    assert ops_agree == ops_total
    assert total > 900 and agree / total >= 0.95


# -- communication ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,collective", [
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
     "all_reduce"),  # torch symmetric memory (the B200 trace)
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float*)", "all_reduce"),
    ("two_shot_all_reduce_kernel", "all_reduce"),  # the Triton symmetric-memory kernel
    ("void c10d::symmetric_memory::multimem_all_gather_kernel<16>(char*)", "all_gather"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)", "all_reduce"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<true, 8>(x)", "all_reduce"),
    ("void deep_ep::intranode::dispatch<8, 768>(int4*, float*)", "all_to_all"),
    ("void deep_ep::internode_ll::combine<false>(void*)", "all_to_all"),
    ("ncclSymkDevKernel_AllReduce_AGxLLMC_R_sum_bf16", "all_reduce"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
    ("void nvshmemi_transfer_rma_kernel<1>(void*)", None),
    ("userbuffers_fp16_sum_inplace_gpu_rw(int, int)", None),
])
def test_communication_kernels(name, collective):
    assert Classifier().classify("gpu", "kernel", name) == "comm"
    assert collectives.from_kernel_name(name) == collective


@pytest.mark.parametrize("name", [
    "void at::native::_scatter_gather_elementwise_kernel<128, 4>(int)",  # gather, not all_gather
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}> > >(x)",
    "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long)",
])
def test_compute_kernels_are_not_communication(name):
    assert Classifier().classify("gpu", "kernel", name) == "compute"


def _comm_kernels(trace: Path) -> int:
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    return sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower())


def test_b200_symmetric_memory_all_reduce_is_communication(shared_db, shared_traces):
    doc = json.loads(gzip.decompress((shared_traces / "tracelens-b200" / "rank0.json.gz").read_bytes()))
    multimem = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "multimem_all_reduce" in e["name"]]
    with connect(shared_db) as database:
        rows = database.sql("SELECT d.kind, c.collective, count(*) AS n, sum(d.dur_ns) AS ns FROM device_events d "
                            "LEFT JOIN collectives c USING (trace_id, event_id) WHERE d.run_id = 'tracelens-b200' "
                            "AND d.name LIKE '%multimem_all_reduce%' GROUP BY ALL").to_dicts()
    assert rows == [{"kind": "comm", "collective": "all_reduce", "n": len(multimem),
                     "ns": round(sum(e["dur"] * 1000 for e in multimem))}]


def test_every_mi300x_comm_kernel_has_its_collective(shared_db, shared_traces):
    # five of RCCL's generic kernels run from before the profiler started (no launch in the trace):
    # they take the collective of the same kernel one training period later
    expected = _comm_kernels(shared_traces / "tracelens-mi300x" / "rank0.json.gz")
    with connect(shared_db) as database:
        rows = database.sql("SELECT collective, meta_source FROM collectives WHERE run_id = 'tracelens-mi300x'").rows()
    assert len(rows) == expected
    assert all(c in ("all_reduce", "broadcast") for c, _ in rows)
    assert sum(1 for _, source in rows if source == "periodic") == 5
