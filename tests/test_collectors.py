"""Collectors on CPU (gloo): the demo's jobs forked by one warm launcher (collectors/launch.py), traces,
run.json, step logs; the zero-code wrapper under torchrun; the sweep."""

from __future__ import annotations

import errno
import gzip
import importlib.util
import json
import os
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

# torch is imported by the tests that train in this process, not at collection: every xdist worker
# collects every module, and only the one that runs these tests needs torch (3 s of CPU to import)
if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is not installed (pip install 'scaletrace[collect]'; make setup does)", allow_module_level=True)

from conftest import ROOT, assert_breakdown_matches_sweep, query  # noqa: E402
from scaletrace.pipeline import ingest  # noqa: E402
from scaletrace.cli import main  # noqa: E402

TORCHRUN = str(Path(sys.executable).parent / "torchrun")
# the test process's import path too: the jobs run the scaletrace under test
ENV = {"OMP_NUM_THREADS": "1", "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
       **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
STEPS, MICRO, SEQ = 6, 2, 32
# what the jobs import, imported once by the module's warm launcher (collectors/launch.py) before it
# forks each job's ranks: torchrun would import torch in itself and in every rank of every job.  torch._dynamo
# as the demo sweep has it (collectors/demo_sweep.toml): DistributedDataParallel imports it, ~2.5 s of CPU a rank
PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "torch.profiler", "torch._dynamo", "scaletrace.collectors"]


@pytest.fixture(scope="module")
def warm():
    from scaletrace.collectors.launch import WarmLauncher

    launcher = WarmLauncher(sys.executable, PRELOAD, ENV)
    yield launcher
    launcher.close()


def launch(warm, log: Path, *args: str) -> None:
    """``python -m scaletrace.collectors.launch --nproc 2 ARGS`` through ``warm``, its output in ``log``."""
    status, _ = warm.run(["--nproc", "2", *args], str(log), timeout_s=300, cwd=str(ROOT), env=ENV)
    assert status == 0, log.read_text()[-3000:]


def demo(warm, tmp: Path, name: str, *extra: str) -> Path:
    out = tmp / name
    launch(warm, tmp / f"{name}.log", "-m", "scaletrace.collectors.demo", "--layout", "ddp", "--steps", str(STEPS),
           "--micro-batch", str(MICRO), "--seq-len", str(SEQ), "--profile-steps", "1,1,2", "--out", str(out),
           "--loss-file", str(tmp / f"{name}.loss"), *extra)
    return out


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory, warm):
    tmp = tmp_path_factory.mktemp("demo")
    return tmp, demo(warm, tmp, "profiled"), demo(warm, tmp, "plain", "--no-profile")


def test_losses_bit_identical_with_and_without_collector(demo_runs):
    tmp, _, _ = demo_runs
    profiled, plain = (tmp / "profiled.loss").read_text(), (tmp / "plain.loss").read_text()
    assert len(profiled.splitlines()) == STEPS and profiled == plain


def test_traces_step_logs_and_manifest(demo_runs):
    _, run, _ = demo_runs
    for rank in (0, 1):
        (trace,) = run.glob(f"rank{rank}.*.pt.trace.json.gz")
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        assert doc["traceEvents"] and doc["distributedInfo"]["rank"] == rank
        steps = [json.loads(line) for line in (run / f"rank{rank}.steps.jsonl").read_text().splitlines()]
        assert [s["step"] for s in steps] == list(range(STEPS))  # every step, not only profiled ones
        assert [s["profiled"] for s in steps] == [False, False, True, True, False, False]  # wait 1, warmup 1
        assert all(s["dur_ns"] > 0 and s["tokens"] == MICRO * SEQ for s in steps)
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["world_size"] == 2 and manifest["parallel"]["dp"] == 2
    assert manifest["tokens_per_step"] == MICRO * 2 * SEQ  # micro batch × dp × sequence length
    assert manifest["model"]["num_params"] > 0
    assert manifest["device"]["peak_flops_source"] == "measured" and manifest["device"]["peak_flops"] > 0
    assert manifest["software"]["backend"] == "gloo"
    assert manifest["cpu_cores"] == len(os.sched_getaffinity(0))  # what this job could run on
    assert manifest["dtype"] == "fp32"  # the demo's fp32 weights and matmuls, no autocast
    assert manifest["power"]["source"] is None and manifest["power"]["reason"]


def test_collected_run_ingests_with_gloo_comm_on_worker_threads(demo_runs, tmp_path):
    _, run, _ = demo_runs
    db = tmp_path / "t.duckdb"
    assert not ingest([run], db=db, workers=1).errors
    for r in query(db, "rank_breakdown").iter_rows(named=True):
        assert r["compute_ns"] > 0 and r["comm_ns"] > 0
    # every part of the span, per rank and per profiled step, against an interval sweep over the
    # ingested events: nested CPU ops on the main thread, gloo lanes on worker threads
    assert assert_breakdown_matches_sweep(db) == 2 * (1 + 2)  # 2 ranks: the trace and 2 active steps
    summary = query(db, "run_summary").row(0, named=True)
    assert summary["step_time_source"] == "step_log" and summary["tokens_per_s"] > 0
    assert summary["mfu_pct"] > 0
    lanes = query(db, "collectives")["collective"].unique().to_list()
    assert lanes == ["all_reduce"]  # DDP's gradient buckets, as gloo:all_reduce


PLAIN_SCRIPT = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo"); torch.manual_seed(0); torch.set_num_threads(1)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(dist.get_rank())
    losses = []
    for _ in range(6):
        loss = model(torch.randn(16, 32, generator=gen)).pow(2).mean()
        loss.backward(); opt.step(); opt.zero_grad(); losses.append(loss.item())
    if dist.get_rank() == 0:
        open(sys.argv[1], "w").write("\\n".join(map(repr, losses)))
    dist.barrier()  # gloo may abort a rank that tears down while its peer still talks
    dist.destroy_process_group()
""")


def test_wrapper_profiles_an_unmodified_script(tmp_path, monkeypatch, warm):
    script = tmp_path / "train.py"
    script.write_text(PLAIN_SCRIPT)
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "wrapped"
    result = CliRunner().invoke(main, ["collect", "--out", str(out), "--steps", "1,1,2", "--meta",
                                       "workload=plain", "--meta", "tokens_per_step=32", "--",
                                       TORCHRUN, "--standalone", "--nproc-per-node", "2", str(script), str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    for _ in range(2):  # the reference: the script without the collector, whose gloo teardown can abort a
        # rank (SIGABRT, "terminate called without an active exception", seen once in the suite): then once again
        try:
            launch(warm, tmp_path / "plain.log", str(script), str(tmp_path / "b"))
            break
        except AssertionError:
            if "terminate called without an active exception" not in (tmp_path / "plain.log").read_text():
                raise
    assert (tmp_path / "a").read_text() == (tmp_path / "b").read_text()  # results unchanged
    assert len(list(out.glob("rank*.pt.trace.json.gz"))) == 2
    steps = (out / "rank1.steps.jsonl").read_text().splitlines()
    assert len(steps) == 5  # the session starts at the end of optimizer step 0
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["workload"] == "plain" and manifest["tokens_per_step"] == 32
    # run.json is written at exit, after the script's destroy_process_group: the backend read at start
    assert manifest["software"]["backend"] == "gloo"
    db = tmp_path / "t.duckdb"
    assert not ingest([out], db=db, workers=1).errors
    assert query(db, "rank_breakdown")["comm_ns"].min() > 0


SWEEP = """
    workload = "tiny"
    out_dir = "runs"
    launcher = {launcher}
    command = ["-m", "scaletrace.collectors.demo", "--layout", "{{layout}}", "--steps", "4", "--micro-batch", "2",
               "--seq-len", "16", "--profile-steps", "1,1,1", "--out", "{{run_dir}}", "--run-id", "{{run_id}}"]
    [matrix]
    world_size = [1]
    layout = ["ddp", "fsdp_tp", "bogus"]
"""
WARM = ["python", "-m", "scaletrace.collectors.launch", "--nproc", "{world_size}", "--preload", ",".join(PRELOAD)]


def test_sweep_runs_resumes_and_reports(tmp_path, monkeypatch):
    """The runs' records do not depend on the launcher: the first and the forced sweep fork their
    ranks from the sweep's warm launcher, the resumed one runs the failed run again under torchrun,
    whose log the reason is read from."""
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    sweep_file = tmp_path / "sweep.toml"

    def sweep(launcher: list[str], *options: str):
        sweep_file.write_text(textwrap.dedent(SWEEP).format(launcher=json.dumps(launcher)))
        return CliRunner().invoke(main, ["sweep", str(sweep_file), "-q", *options])

    monkeypatch.chdir(ROOT)  # -m scaletrace.collectors.demo resolves from the project
    bogus = "failed: tiny-1-bogus: exit 1: demo.py: error: argument --layout: invalid choice"
    first = sweep(WARM)
    assert first.exit_code == 1  # "bogus" is not a layout: one failed run
    assert "1 done, 0 skipped, 1 not applicable, 1 failed" in first.stderr
    assert bogus in first.stderr
    again = sweep(["torchrun", "--standalone", "--nproc-per-node", "{world_size}"])
    assert "0 done, 2 skipped, 0 not applicable, 1 failed" in again.stderr
    assert bogus in again.stderr  # the demo's error line among torchrun's
    assert (tmp_path / "runs" / "tiny-1-ddp" / "run.json").is_file()
    forced = sweep(WARM, "--force")
    assert "1 done, 0 skipped, 1 not applicable, 1 failed" in forced.stderr


def _train_with(session, steps=5):
    import torch

    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session as s:
        for _ in range(steps):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
            s.step(tokens=4)
    return s


def _session(out, monkeypatch):
    from scaletrace.collectors import ProfileConfig, Session

    monkeypatch.delenv("RANK", raising=False)
    return Session(out, config=ProfileConfig(wait=1, warmup=1, active=2))


def test_unwritable_output_warns_and_training_continues(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.warns(RuntimeWarning, match="scaletrace: starting the profiler failed"):
        s = _train_with(_session(blocker / "run", monkeypatch))
    assert len(s.steps) == 5


def test_profiler_failure_warns_and_training_continues(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("Kineto exploded")

    monkeypatch.setattr("torch.profiler.profile", broken)
    with pytest.warns(RuntimeWarning, match="Kineto exploded"):
        s = _train_with(_session(tmp_path / "run", monkeypatch))
    assert len(s.steps) == 5 and (tmp_path / "run" / "rank0.steps.jsonl").is_file()


def test_disk_full_while_writing_the_trace_warns_once(tmp_path, monkeypatch):
    from scaletrace.collectors import Session

    def full(self, prof):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Session, "_export", full)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = _train_with(_session(tmp_path / "run", monkeypatch))
    ours = [w for w in caught if "scaletrace" in str(w.message)]
    assert len(ours) == 1 and "No space left on device" in str(ours[0].message)
    assert len(s.steps) == 5
