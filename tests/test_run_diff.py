"""run_diff on generated runs with known kernel mixes, and the kernel family table."""

from __future__ import annotations

import duckdb
import pytest

from conftest import query
from scaletrace.pipeline import ingest
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.queries import QueryError, definitions

US = 1000
GEMM_A = "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn"
GEMM_B = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
FLASH = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::bfloat16_t> >(Flash_fwd_params)"
NORM = "void at::native::(anonymous namespace)::layer_norm_kernel<c10::BFloat16, float>(long, float, ...)"

# Run a: 2 GPUs, per step 200 µs GEMM + 50 fill + 50 flash; run b: 4 GPUs, half the GEMM in two
# kernels of different templates, the same fill twice, a shorter flash and a layer norm.
A = SynthRun("diff-2", ranks=2, steps=3, compute_us=300, overlap_us=50, transfer_us=100,
             kernel_mix=((GEMM_A, 200), (FILL, 50), (FLASH, 50)), workload="diff")
B = SynthRun("diff-4", ranks=4, steps=2, compute_us=300, overlap_us=50, transfer_us=180, tp=2, tp_comm_us=25,
             kernel_mix=((GEMM_A, 60), (GEMM_B, 40), (FILL, 50), (FILL, 50), (FLASH, 30), (NORM, 70)),
             workload="diff")


@pytest.fixture(scope="module")
def diff_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    for spec in (A, B):
        write_run(root, spec)
    db = root / "t.duckdb"
    assert not ingest([root], db=db, workers=1).errors
    return db


def test_families_count_and_time_per_step_per_gpu(diff_db):
    df = query(diff_db, "run_diff", run_a="diff-2", run_b="diff-4")
    got = {r["family"]: r for r in df.to_dicts()}
    # per step and per GPU, from the kernel mixes (every rank runs the same kernels every step)
    expected = {  # family: (count a, count b, µs a, µs b)
        "GEMM": (1, 2, 200, 60 + 40),
        "elementwise": (1, 2, 50, 100),
        "attention": (1, 1, 50, 30),
        "norm": (0, 1, 0, 70),
        # the all_reduce lasts T on every rank (no straggler); B's DP group is described default_pg
        "all_reduce · default_pg": (1, 1, A.transfer_us, B.transfer_us),
        "all_gather · tp": (0, 1, 0, B.tp_comm_us),
    }
    assert set(got) == set(expected)
    for family, (na, nb, ta, tb) in expected.items():
        row = got[family]
        assert (row["count_per_step_a"], row["count_per_step_b"]) == (na, nb), family
        assert (row["time_per_step_a_ns"], row["time_per_step_b_ns"]) == (ta * US, tb * US), family
        assert row["delta_time_per_step_ns"] == (tb - ta) * US
        assert row["delta_count_per_step"] == nb - na
    changes = [abs(x) for x in df["delta_time_per_step_ns"]]
    assert changes == sorted(changes, reverse=True)
    assert got["GEMM"]["top_kernel"] == GEMM_A  # 60 µs of B's 100 (templates and arguments stripped)
    assert got["elementwise"]["top_kernel"] == "at::native::vectorized_elementwise_kernel"
    assert got["GEMM"]["kind"] == "compute" and got["all_gather · tp"]["kind"] == "comm"


def test_run_diff_refuses_an_unknown_run_and_is_empty_without_runs(diff_db):
    with pytest.raises(QueryError, match="no run 'nope'"):
        query(diff_db, "run_diff", run_a="diff-2", run_b="nope")
    assert query(diff_db, "run_diff").is_empty()


@pytest.mark.parametrize("name,family", [
    (GEMM_A, "GEMM"), (GEMM_B, "GEMM"), ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4", "GEMM"),
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1", "other compute"),  # rocBLAS Tensile: not matched (yet)
    ("aten::mm", "GEMM"), ("aten::addmm", "GEMM"), ("aten::linear", "GEMM"),
    (FLASH, "attention"), ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0", "attention"),
    ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "convolution"),
    (FILL, "elementwise"), ("triton_poi_fused_add_mul_0", "elementwise"), ("aten::add_", "elementwise"),
    ("aten::mul", "elementwise"), (NORM, "norm"), ("triton_per_fused_native_layer_norm_1", "norm"),
    ("aten::native_layer_norm", "norm"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor>",
     "optimizer"), ("aten::_foreach_mul_", "optimizer"), ("aten::lerp_", "optimizer"),
    ("void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<float, float> > >", "reduction"),
    ("triton_red_fused_sum_2", "reduction"), ("aten::_log_softmax", "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "softmax"),
    ("aten::nll_loss_forward", "loss"), ("aten::embedding", "embedding"),
    ("void at::native::indexSelectLargeIndex<float, long>", "other compute"), ("aten::empty", "other compute"),
])
def test_kernel_family_table(name, family):
    con = duckdb.connect()
    table = next(d for d in definitions.load() if d.name == "kernel_families")
    con.execute(table.create_sql(temporary=True))
    got = con.execute("SELECT coalesce(arg_min(family, priority), 'other compute') FROM kernel_families "
                      "WHERE regexp_matches(lower($name), pattern)", {"name": name}).fetchone()[0]
    assert got == family
