"""run_diff on generated runs with known kernel mixes (the family rules: tests/test_families.py)."""

from __future__ import annotations

import pytest

from conftest import query
from scaletrace.pipeline import ingest
from scaletrace.pipeline.synth import SynthRun, write_run
from scaletrace.queries import QueryError

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
    assert got["elementwise"]["top_kernel"] == "vectorized_elementwise_kernel"  # the base name
    assert got["GEMM"]["kind"] == "compute" and got["all_gather · tp"]["kind"] == "comm"


def test_run_diff_refuses_an_unknown_run_and_is_empty_without_runs(diff_db):
    with pytest.raises(QueryError, match="no run 'nope'"):
        query(diff_db, "run_diff", run_a="diff-2", run_b="nope")
    assert query(diff_db, "run_diff").is_empty()


def test_a_run_without_profiler_steps_against_one_with_them_says_so(tmp_path):
    # run c is A's kernels with its ProfilerStep annotations removed: its figures would be per traced
    # window, A's per step, so diff refuses the pair in one line (run_diff the query stays numbers)
    import json

    from click.testing import CliRunner

    from scaletrace.cli import main
    from scaletrace.pipeline.store.db import connect
    from scaletrace.reports.explain import StepBasisError, run_diff

    write_run(tmp_path, A)
    folder = write_run(tmp_path, SynthRun("diff-nostep", ranks=2, steps=3, compute_us=300, overlap_us=50,
                                          transfer_us=100, kernel_mix=A.kernel_mix, workload="other"))
    for trace in folder.glob("rank*.json"):
        doc = json.loads(trace.read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if "ProfilerStep" not in e.get("name", "")]
        trace.write_text(json.dumps(doc))
    db = tmp_path / "t.duckdb"
    assert not ingest([tmp_path], db=db, workers=1).errors
    with connect(db) as database:
        with pytest.raises(StepBasisError, match="run 'diff-nostep' has no ProfilerStep .* run 'diff-2' has 3"):
            run_diff(database, "diff-2", "diff-nostep")
        assert not run_diff(database, "diff-2", "diff-2").is_empty()  # both with steps: numbers
    result = CliRunner().invoke(main, ["diff", "diff-nostep", "diff-2", "--db", str(db)])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and "do not compare" in result.output
