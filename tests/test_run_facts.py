"""Run facts from the trace when run.json is silent (queries/macros/run_facts.sql), their bases,
and ``scaletrace ingest --meta``.

Every expected value is derived here from the trace itself: the real traces are read with
gzip + json and their embedding shapes, distributedInfo and deviceProperties turned into the
figure by the rule the README states; the small traces are written here with known shapes."""

from __future__ import annotations

import csv
import gzip
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, cpu, kernel, query, write_trace
from scaletrace.cli import main
from scaletrace.pipeline import ingest
from scaletrace.pipeline.execute.dataset import ingest_parquet
from scaletrace.pipeline.read.manifest import MetaError

H200_BF16 = FIXTURES / "h200" / "h200-bf16-ddp-1"
US = 1000  # ns per µs


def _load(path: Path):
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def _trace_file(run_dir: Path) -> Path:
    (path,) = [p for p in run_dir.iterdir() if p.name.endswith((".json", ".json.gz")) and p.name != "run.json"]
    return path


def embedding_tokens(doc: dict) -> tuple[int, list, int]:
    """(tokens a step, the token embedding's index shape, its vocabulary) by the README's rule:
    the largest-vocabulary aten::embedding, Σ of its indices' element counts over its calls in a
    ProfilerStep, median over steps (one rank: no data-parallel factor)."""
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if re.fullmatch(r"ProfilerStep#\d+", e.get("name", "")) and e.get("cat") != "gpu_user_annotation"]
    calls = [(e["ts"], e["args"]["Input Dims"]) for e in events
             if e.get("name") == "aten::embedding" and "Input Dims" in e.get("args", {})]
    vocab = max(dims[0][0] for _, dims in calls)
    per_step = [sum(math.prod(dims[1]) for ts, dims in calls if a <= ts < b and dims[0][0] == vocab)
                for a, b in steps]
    shape = next(dims[1] for _, dims in calls if dims[0][0] == vocab)
    return int(statistics.median(t for t in per_step if t)), shape, vocab


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    """The real H200 bf16 run twice: as recorded (run.json) and its trace alone (no run.json,
    no step or power log)."""
    root = tmp_path_factory.mktemp("h200")
    bare = root / "traces" / "h200-bare"
    bare.mkdir(parents=True)
    shutil.copy(_trace_file(H200_BF16), bare)
    db = root / "t.duckdb"
    assert not ingest([bare, H200_BF16], db=db, workers=1).errors
    summary = {r["run_id"]: r for r in query(db, "run_summary").iter_rows(named=True)}
    return summary["h200-bare"], summary["h200-bf16-ddp-1"], _load(_trace_file(H200_BF16))


def test_tokens_per_step_from_the_token_embedding_of_a_real_trace(h200):
    bare, _, doc = h200
    tokens, shape, vocab = embedding_tokens(doc)
    truth = json.loads((H200_BF16 / "run.json").read_text())["tokens_per_step"]
    # the token table [32000, 2048] with indices [8, 2048]; the positional [2048, 2048] does not count
    assert tokens == truth == bare["tokens_per_step"]
    assert bare["tokens_per_step_basis"] == (f"inferred: aten::embedding indices [{shape[0]}, {shape[1]}] × dp 1 "
                                             f"(vocabulary {vocab})")
    assert bare["tokens_per_s"] == pytest.approx(tokens / (bare["step_time_ns"] / 1e9))


def test_run_json_wins_and_says_so(h200):
    _, recorded, _ = h200
    manifest = json.loads((H200_BF16 / "run.json").read_text())
    assert recorded["tokens_per_step"] == manifest["tokens_per_step"]
    for column in ("tokens_per_step_basis", "world_size_basis", "device_basis", "dtype_basis", "parallel_basis"):
        assert recorded[column] == "run.json", column
    assert recorded["flops_per_token_basis"].startswith("run.json: 6 × model.num_params")


def test_world_size_and_device_from_the_trace(h200):
    bare, _, doc = h200
    assert bare["world_size"] == doc["distributedInfo"]["world_size"]
    assert bare["world_size_basis"] == "inferred: distributedInfo.world_size"
    assert bare["device_name"] == doc["deviceProperties"][0]["name"]
    assert bare["device_basis"] == "inferred: deviceProperties"
    assert bare["parallel_basis"] == "inferred: world size 1" and (bare["dp"], bare["tp"], bare["pp"], bare["cp"]) == (1, 1, 1, 1)


def test_dtype_of_a_real_trace_is_its_gemm_input_type(h200):
    bare, _, doc = h200
    types = [e["args"]["Input type"][0] for e in doc["traceEvents"]
             if e.get("name") == "aten::mm" and "Input type" in e.get("args", {})]
    assert statistics.mode(types) == "c10::BFloat16"  # autocast: the matmuls run in bf16
    assert bare["peak_flops_dtype"] == "bf16" == json.loads((H200_BF16 / "run.json").read_text())["dtype"]
    assert bare["dtype_basis"].startswith("inferred: dominant GEMM input type (bf16, ")
    assert "dtype is unknown" not in bare["peak_flops_basis"]


def test_flops_per_token_of_a_real_trace_is_near_the_model_formula(h200):
    """The counted FLOPs (GEMM + attention from the recorded shapes, forward and backward) ÷ tokens
    against run.json's 6·N + 12·L·H·S: the formula also counts the embedding tables' parameters
    (no matmul) and full, not causal, attention, so the counted figure is a little lower."""
    bare, recorded, _ = h200
    m = json.loads((H200_BF16 / "run.json").read_text())["model"]
    seq = json.loads((H200_BF16 / "run.json").read_text())["seq_len"]
    formula = 6 * m["num_params"] + 12 * m["num_layers"] * m["hidden_size"] * seq
    assert recorded["flops_per_token"] == pytest.approx(formula)
    assert 0.75 * formula < bare["flops_per_token"] < formula
    assert bare["flops_per_token_basis"].startswith("inferred: recorded GEMM/attention shapes")
    assert bare["mfu_pct"] == pytest.approx(100 * bare["tokens_per_s"] * bare["flops_per_token"] / 989e12)


@pytest.mark.parametrize("run", ["tracelens-h100-qwen", "tracelens-sglang_decode"])
def test_tokens_per_step_of_shared_traces(shared_traces, shared_db, run):
    """Qwen1.5-0.5B prefill of indices [16, 559]; SGLang decode at batch 32 (`bs_32` in the name
    of its file in TraceLens): one token per sequence."""
    path = _trace_file(shared_traces / run)
    doc = _load(path)
    tokens, _, _ = embedding_tokens(doc)
    (r,) = query(shared_db, "run_summary", run_id=run).iter_rows(named=True)  # the run, ingested with no run.json
    assert r["tokens_per_step"] == tokens
    if run == "tracelens-sglang_decode":
        assert tokens == 32
    else:  # TraceLens's own GEMM table: the model's matmuls have M = the tokens of the step
        with open(shared_traces / run / "tracelens_reference" / "GEMM.csv", newline="") as f:
            assert statistics.mode(int(row["param: M"]) for row in csv.DictReader(f)) == tokens == 16 * 559
    world = (doc.get("distributedInfo") or {}).get("world_size")
    assert r["world_size"] == (world or 1)
    assert r["world_size_basis"] == ("inferred: distributedInfo.world_size" if world
                                     else "inferred: ranks traced (1; no distributedInfo)")
    assert r["tokens_per_s"] == pytest.approx(tokens / (r["step_time_ns"] / 1e9))
    assert r["mfu_pct"] is not None and 0 < r["mfu_pct"] < 100


# -- small traces with known shapes ------------------------------------------------------------

EMB_TYPES = ["float", "long int", "Scalar", "Scalar", "Scalar"]


def _embedding(ts, weight, indices):
    return cpu("aten::embedding", ts, 5, **{"Input Dims": [weight, indices, [], [], []], "Input type": EMB_TYPES})


def _mm(ts, m, k, n, dtype="c10::BFloat16"):
    return cpu("aten::mm", ts, 5, **{"Input Dims": [[m, k], [k, n]], "Input type": [dtype, dtype]})


def _collective(ts, desc, size, name="0"):
    return kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ts, 5, stream=20,
                  **{"Collective name": "allreduce", "Process Group Name": name, "Process Group Description": desc,
                     "Group size": size, "dtype": "Float", "In msg nelems": 1024, "Out msg nelems": 1024})


def _run(root: Path, name: str, world: int, ranks: int = 1, groups=(), steps=((),), step_us=1000,
         device="NVIDIA H100 80GB HBM3", run_json: dict | None = None) -> Path:
    """A run of ``ranks`` traces of a ``world``-rank job: per step (``steps``: the CPU ops of each
    step, at µs offsets into it), one compute kernel and one collective per process group."""
    run = root / name
    for rank in range(ranks):
        events = []
        for i, ops in enumerate(steps):
            s0 = i * step_us
            events += [cpu(f"ProfilerStep#{i + 1}", s0, step_us), kernel("gemm", s0 + 10, 50)]
            events += [_collective(s0 + 100 + 10 * g, desc, size, str(g)) for g, (desc, size) in enumerate(groups)]
            events += [{**op, "ts": s0 + op["ts"]} for op in ops]
        write_trace(run / f"rank{rank}.json", events, deviceProperties=[{"id": 0, "name": device}],
                    distributedInfo={"rank": rank, "world_size": world, "backend": "nccl"})
    if run_json is not None:
        (run / "run.json").write_text(json.dumps(run_json))
    return run


def _facts(root: Path, **meta) -> dict:
    db = root / "t.duckdb"
    report = ingest([p for p in sorted(root.iterdir()) if p.is_dir()], db=db, workers=1, meta=meta or None)
    assert not report.errors, [o.line() for o in report.errors]
    return {r["run_id"]: r for r in query(db, "run_summary").iter_rows(named=True)}


def test_world_size_is_distributed_info_not_the_ranks_traced(tmp_path):
    _run(tmp_path, "one-of-four", world=4)
    _run(tmp_path, "no-info", world=1)
    path = tmp_path / "no-info" / "rank0.json"
    doc = json.loads(path.read_text())
    del doc["distributedInfo"]
    path.write_text(json.dumps(doc))
    facts = _facts(tmp_path)
    assert (facts["one-of-four"]["world_size"], facts["one-of-four"]["ranks_traced"]) == (4, 1)
    assert facts["one-of-four"]["world_size_basis"] == "inferred: distributedInfo.world_size"
    assert facts["no-info"]["world_size"] == 1
    assert facts["no-info"]["world_size_basis"] == "inferred: ranks traced (1; no distributedInfo)"
    assert facts["no-info"]["device_basis"] == "inferred: deviceProperties"


def test_dtype_is_the_input_type_with_the_most_flops(tmp_path):
    """Not the most frequent type: one large fp32 GEMM outweighs three small bf16 ones."""
    big, small = (512, 512, 512), (128, 128, 128)
    _run(tmp_path, "fp32-wins", world=1, steps=[[_mm(200, *big, dtype="float"),
                                                  *[_mm(300 + 10 * i, *small) for i in range(3)]]])
    _run(tmp_path, "bf16-wins", world=1, steps=[[_mm(200, *big), _mm(300, *small, dtype="float")]],
         device="NVIDIA A100-SXM4-80GB")
    facts = _facts(tmp_path)
    flops = {shape: 2 * math.prod(shape) for shape in (big, small)}
    fp32 = facts["fp32-wins"]
    share = 100 * flops[big] / (flops[big] + 3 * flops[small])
    assert (fp32["peak_flops_dtype"], fp32["peak_flops_per_gpu"]) == ("fp32", 67e12)  # H100 SXM plain FP32
    assert fp32["dtype_basis"] == f"inferred: dominant GEMM input type (fp32, {share:.0f} % of counted GEMM/attention/conv FLOPs)"
    bf16 = facts["bf16-wins"]
    assert (bf16["peak_flops_dtype"], bf16["peak_flops_per_gpu"]) == ("bf16", 312e12)  # A100 dense bf16
    assert f"{100 * flops[big] / (flops[big] + flops[small]):.0f} %" in bf16["dtype_basis"]


def test_parallel_degrees_from_torchtitan_mesh_names(tmp_path):
    """FSDP 4 × TP 2 on 8 GPUs: groups mesh_dp_shard_cp (4) and mesh_tp (2); no pp or cp group,
    and every group is known, so pp = cp = 1 and dp = 8 ÷ (2 · 1 · 1)."""
    _run(tmp_path, "titan", world=8, groups=[("mesh_dp_shard_cp", 4), ("mesh_tp", 2)])
    r = _facts(tmp_path)["titan"]
    assert (r["dp"], r["tp"], r["pp"], r["cp"]) == (8 // 2, 2, 1, 1)
    assert r["parallel_basis"] == ("dp 4: inferred: world size 8 ÷ (tp · pp · cp = 2); tp 2: inferred: process group "
                                   "mesh_tp; pp 1, cp 1: inferred: no process group of its own among "
                                   "mesh_dp_shard_cp, mesh_tp")


def test_parallel_degrees_from_megatron_group_names(tmp_path):
    """Megatron names every group; its data-parallel group gives dp directly."""
    _run(tmp_path, "megatron", world=16, groups=[
        ("TENSOR_MODEL_PARALLEL_GROUP", 2), ("PIPELINE_MODEL_PARALLEL_GROUP", 2), ("CONTEXT_PARALLEL_GROUP", 2),
        ("DATA_PARALLEL_GROUP", 2), ("TENSOR_AND_DATA_PARALLEL_GROUP", 4), ("EMBEDDING_GROUP", 2)])
    r = _facts(tmp_path)["megatron"]
    assert (r["dp"], r["tp"], r["pp"], r["cp"]) == (2, 2, 2, 2)
    assert "dp 2: inferred: process group DATA_PARALLEL_GROUP" in r["parallel_basis"]
    assert "tp 2: inferred: process group TENSOR_MODEL_PARALLEL_GROUP" in r["parallel_basis"]


def test_default_pg_alone_is_data_parallel_and_an_unknown_group_is_unknown(tmp_path):
    _run(tmp_path, "ddp", world=4, groups=[("default_pg", 4)])
    _run(tmp_path, "mystery", world=4, groups=[("default_pg", 4), ("undefined", 2)])
    facts = _facts(tmp_path)
    assert (facts["ddp"]["dp"], facts["ddp"]["tp"], facts["ddp"]["pp"], facts["ddp"]["cp"]) == (4, 1, 1, 1)
    m = facts["mystery"]  # the 2-rank group could be tp, pp or cp
    assert (m["dp"], m["tp"], m["pp"], m["cp"]) == (None, None, None, None)
    assert m["parallel_basis"] == ("unknown: process groups default_pg, undefined do not all say which degree "
                                   "they are")


def test_tokens_count_every_micro_batch_and_the_median_step(tmp_path):
    """Steps of 1, 2 and 5 calls of indices [4, 128] to the token table (plus a positional
    table of smaller vocabulary): 512, 1024, 2560 tokens; the median step is 1024."""
    token, pos = [32000, 64], [128, 64]
    calls = (1, 2, 5)
    steps = [[_embedding(200 + 10 * c, token, [4, 128]) for c in range(n)] + [_embedding(190, pos, [128])]
             for n in calls]
    _run(tmp_path, "micro", world=1, steps=steps)
    r = _facts(tmp_path)["micro"]
    assert r["tokens_per_step"] == statistics.median(n * 4 * 128 for n in calls)
    assert r["tokens_per_step_basis"] == "inferred: aten::embedding indices [4, 128] × 2 calls a step × dp 1 (vocabulary 32000)"


def test_tokens_are_counted_once_per_tensor_parallel_group_and_summed_over_context_parallel(tmp_path):
    """TP 2 × DP 2: both ranks of a TP group see the same [4, 256] indices, so the step is
    4·256 × dp 2.  CP 2 × DP 2: each CP rank sees half of each sequence, [4, 128]: 4·128 × dp 2 × cp 2."""
    step = lambda idx: [[_embedding(200, [32000, 64], idx)]]  # noqa: E731
    _run(tmp_path, "tp", world=4, ranks=2, groups=[("mesh_tp", 2), ("mesh_dp", 2)], steps=step([4, 256]))
    _run(tmp_path, "cp", world=4, ranks=2, groups=[("mesh_cp", 2), ("mesh_dp", 2)], steps=step([4, 128]))
    facts = _facts(tmp_path)
    assert facts["tp"]["tokens_per_step"] == 4 * 256 * 2
    assert facts["cp"]["tokens_per_step"] == 4 * 128 * 2 * 2
    assert facts["cp"]["tokens_per_step_basis"].endswith("× dp 2 × cp 2 (vocabulary 32000)")


def test_no_tokens_without_the_data_parallel_degree(tmp_path):
    """Eight ranks and no named groups: the per-rank count is known, the job's is not."""
    _run(tmp_path, "unnamed", world=8, steps=[[_embedding(200, [32000, 64], [4, 256])]])
    r = _facts(tmp_path)["unnamed"]
    assert r["tokens_per_step"] is None and r["tokens_per_s"] is None
    assert f"shows {4 * 256} tokens a step per rank" in r["null_reasons"] and "parallel.dp" in r["null_reasons"]


def test_flops_per_token_and_mfu_from_counted_flops(tmp_path):
    """One bf16 GEMM of 2·M·K·N FLOPs per step and rank, 1024 tokens a step, two ranks of DP:
    FLOPs per token = 2·M·K·N × 2 ÷ (1024 × 2), MFU = 2·M·K·N ÷ step time ÷ 989e12."""
    m, k, n = 1024, 4096, 4096
    step_us = 2000
    _run(tmp_path, "counted", world=2, ranks=2, groups=[("default_pg", 2)], step_us=step_us,
         steps=[[_embedding(200, [32000, 64], [4, 256]), _mm(300, m, k, n)]] * 3)
    r = _facts(tmp_path)["counted"]
    flops = 2 * m * k * n
    assert r["tokens_per_step"] == 4 * 256 * 2
    assert r["flops_per_token"] == pytest.approx(flops * 2 / r["tokens_per_step"])
    assert r["mfu_pct"] == pytest.approx(100 * flops / (step_us * 1e-6) / 989e12)


# -- --meta ----------------------------------------------------------------------------------------

@pytest.fixture
def two_runs(tmp_path):
    """A run without run.json (tokens inferable: [4, 256]) and one whose run.json gives tokens_per_step."""
    traces = tmp_path / "traces"
    _run(traces, "bare", world=1, steps=[[_embedding(200, [32000, 64], [4, 256])]])
    _run(traces, "manifest", world=1, steps=[[_embedding(200, [32000, 64], [4, 256])]],
         run_json={"tokens_per_step": 777, "workload": "from-run-json"})
    return traces, tmp_path / "t.duckdb"


def _summary(db) -> dict:
    return {r["run_id"]: r for r in query(db, "run_summary").iter_rows(named=True)}


def test_meta_wins_over_inference_and_run_json_wins_over_meta(two_runs):
    traces, db = two_runs
    result = CliRunner().invoke(main, ["ingest", str(traces), "--db", str(db), "-q", "--meta", "tokens_per_step=5000",
                                       "--meta", "workload=llama", "--meta", "parallel.tp=1",
                                       "--meta", "model.num_params=7e9", "--meta", "dtype=fp32"])
    assert result.exit_code == 0, result.output
    s = _summary(db)
    bare, manifest = s["bare"], s["manifest"]
    assert (bare["tokens_per_step"], bare["tokens_per_step_basis"]) == (5000, "--meta")
    assert (bare["workload"], bare["tp"]) == ("llama", 1)
    assert bare["parallel_basis"] == "dp 1, pp 1, cp 1: inferred: world size 1; tp 1: --meta"
    assert (bare["flops_per_token"], bare["flops_per_token_basis"]) == (6 * 7e9, "--meta: 6 × model.num_params")
    assert (bare["peak_flops_dtype"], bare["dtype_basis"]) == ("fp32", "--meta")
    assert (manifest["tokens_per_step"], manifest["tokens_per_step_basis"]) == (777, "run.json")
    assert manifest["workload"] == "from-run-json"
    assert manifest["flops_per_token_basis"] == "--meta: 6 × model.num_params"  # run.json has no model


def test_a_changed_meta_on_reingest_updates_the_runs_row(two_runs):
    traces, db = two_runs
    for meta, workload in ((["--meta", "workload=a"], "a"), (["--meta", "workload=b"], "b"), ([], None)):
        result = CliRunner().invoke(main, ["ingest", str(traces), "--db", str(db), "-q", *meta])
        assert result.exit_code == 0, result.output
        bare = _summary(db)["bare"]
        assert bare["workload"] == workload
    assert (bare["tokens_per_step"], bare["tokens_per_step_basis"]) == (
        4 * 256, "inferred: aten::embedding indices [4, 256] × dp 1 (vocabulary 32000)")


def test_mfu_above_100_pct_is_a_warning_that_names_the_bases(two_runs):
    """[4, 256] tokens a 1 ms step on one H100 (989 TFLOP/s) at 6 × 1e12 FLOPs per token would be
    6e12 · 1024 / 1e-3 s: far above the peak."""
    traces, db = two_runs
    assert not ingest([traces], db=db, workers=1, meta={"model.num_params": 1e12}).errors
    bare = _summary(db)["bare"]
    assert bare["mfu_pct"] == pytest.approx(100 * 6e12 * 4 * 256 / 1e-3 / 989e12)
    assert bare["warnings"].startswith(f"MFU {bare['mfu_pct']:.0f} % is above 100 %: tokens per step "
                                       "(inferred: aten::embedding indices [4, 256] × dp 1 (vocabulary 32000)), "
                                       "FLOPs per token (--meta: 6 × model.num_params)")
    assert _summary(db)["manifest"]["warnings"] is not None  # run.json's 777 tokens: still > 100 %


@pytest.mark.parametrize("meta, code, words", [
    ("tp=2", 1, "not a run.json key (did you mean parallel.tp?)"),
    ("fabric=IB", 1, "--meta fabric: not a run.json key"),
    ("parallel.tp=two", 1, "--meta parallel.tp='two': Expected `int | null`, got `str`"),
    ("scaling=sideways", 1, 'must be "strong" or "weak"'),
    ("run_id=x", 1, "apply to every run"),
    ("parallel.tp", 2, "--meta wants KEY=VALUE"),
])
def test_bad_meta_is_one_line(two_runs, meta, code, words):
    traces, db = two_runs
    result = CliRunner().invoke(main, ["ingest", str(traces), "--db", str(db), "-q", "--meta", meta])
    assert result.exit_code == code, result.output
    assert words in result.output and "Traceback" not in result.output
    if code == 1:
        assert len(result.output.strip().splitlines()) == 1
    assert not db.exists()  # refused before anything was written


def test_text_keys_keep_numbers_as_text_and_labels_take_dotted_keys(two_runs):
    traces, db = two_runs
    result = CliRunner().invoke(main, ["ingest", str(traces), "--db", str(db), "-q", "--meta", "workload=123",
                                       "--meta", "labels.fabric=IB 400G"])
    assert result.exit_code == 0, result.output
    assert _summary(db)["bare"]["workload"] == "123"
    with __import__("scaletrace").connect(db) as database:
        row = database.sql("SELECT manifest, meta_keys FROM runs WHERE run_id = 'bare'").row(0)
    assert json.loads(row[0]) == {"workload": "123", "labels": {"fabric": "IB 400G"}}  # the run has no run.json
    assert row[1] == ["labels.fabric", "workload"]


def test_meta_labels_reach_the_layouts_strategy(two_runs):
    traces, db = two_runs
    assert not ingest([traces], db=db, workers=1, meta={"workload": "w", "labels.layout": "fsdp"}).errors
    layouts = {r["run_id"]: r for r in query(db, "layouts").iter_rows(named=True)}
    assert layouts["bare"]["strategy"] == "fsdp" and layouts["bare"]["layout"] == "dp1-tp1-pp1-cp1"
    assert layouts["manifest"]["strategy"] == "fsdp"  # its run.json has no labels


def test_python_api_and_parquet_dataset_take_meta(two_runs, tmp_path):
    traces, db = two_runs
    with pytest.raises(MetaError, match="parallel.tp"):
        ingest([traces], db=db, workers=1, meta={"tp": 2})
    assert not ingest([traces], db=db, workers=1, meta={"parallel": {"dp": 1}, "tokens_per_step": 64}).errors
    assert _summary(db)["bare"]["tokens_per_step_basis"] == "--meta"
    out = tmp_path / "pq"
    assert not ingest_parquet([traces], out, workers=1, meta={"tokens_per_step": 64, "workload": "pq"}).errors
    s = _summary(out)
    assert (s["bare"]["tokens_per_step"], s["bare"]["tokens_per_step_basis"], s["bare"]["workload"]) == (64, "--meta", "pq")
    assert s["manifest"]["tokens_per_step_basis"] == "run.json"
    assert not ingest_parquet([traces], out, workers=1, meta={"workload": "pq2"}).errors
    assert (_summary(out)["bare"]["workload"], _summary(out)["bare"]["tokens_per_step"]) == ("pq2", 4 * 256)
