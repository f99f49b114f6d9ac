"""collectors/launch.py: the ranks of one host forked from one process, with torchrun's variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

LAUNCH = [sys.executable, "-m", "scaletrace.collectors.launch"]
RANK_REPORT = """
    import json, os, sys
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    facts = {k: os.environ[k] for k in keys}
    facts.update(pid=os.getpid(), argv=sys.argv[1:], name=__name__, preloaded="heavy" in sys.modules)
    with open(os.path.join(os.environ["OUT"], f"rank{os.environ['RANK']}.json"), "w") as f:
        json.dump(facts, f)
"""


def launch(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    # the job's modules from tmp_path; scaletrace as this test process finds it
    env = {**os.environ, "OUT": str(tmp_path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([*LAUNCH, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def ranks(tmp_path: Path, world: int) -> list[dict]:
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


def test_each_rank_gets_torchruns_variables_and_the_arguments(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent(RANK_REPORT))
    done = launch(tmp_path, "--nproc", "3", "-m", "job", "--layout", "tp", "-m", "x")
    assert done.returncode == 0, done.stderr
    facts = ranks(tmp_path, 3)
    assert [f["RANK"] for f in facts] == [f["LOCAL_RANK"] for f in facts] == ["0", "1", "2"]
    assert {(f["WORLD_SIZE"], f["LOCAL_WORLD_SIZE"], f["MASTER_ADDR"]) for f in facts} == {("3", "3", "127.0.0.1")}
    assert len({f["MASTER_PORT"] for f in facts}) == 1 and len({f["pid"] for f in facts}) == 3
    assert all(f["argv"] == ["--layout", "tp", "-m", "x"] and f["name"] == "__main__" for f in facts)


def test_a_script_runs_as_main_with_its_arguments(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent(RANK_REPORT))
    done = launch(tmp_path, "--nproc", "2", str(tmp_path / "job.py"), "--steps", "3")
    assert done.returncode == 0, done.stderr
    assert [f["argv"] for f in ranks(tmp_path, 2)] == [["--steps", "3"]] * 2


def test_preloaded_modules_are_imported_once_for_all_ranks(tmp_path):
    # heavy.py appends a line each time it is imported: 4 ranks that import it, one line
    (tmp_path / "heavy.py").write_text("import os\nopen(os.environ['OUT'] + '/imports', 'a').write('x\\n')\n")
    (tmp_path / "job.py").write_text(textwrap.dedent(RANK_REPORT) + "import heavy\n")
    done = launch(tmp_path, "--nproc", "4", "--preload", "heavy", "-m", "job")
    assert done.returncode == 0, done.stderr
    assert all(f["preloaded"] for f in ranks(tmp_path, 4))
    assert (tmp_path / "imports").read_text() == "x\n"


def test_a_failing_rank_ends_the_others_and_the_launch_fails(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import os, sys, time
        if os.environ["RANK"] == "1":
            sys.exit(3)
        time.sleep(120)
    """))
    start = time.monotonic()
    done = launch(tmp_path, "--nproc", "3", "-m", "job", timeout=100)
    assert done.returncode == 1  # as torchrun: any failed rank, exit 1
    assert time.monotonic() - start < 60  # ranks 0 and 2 were terminated, not waited for


def test_bad_use_is_one_line(tmp_path):
    missing = launch(tmp_path, "--nproc", "2", "--preload", "no_such_module", "-m", "job")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "launch: cannot preload no_such_module: No module named 'no_such_module'"
    for args in (["-m", "job"], ["--nproc", "0", "-m", "job"], ["--nproc", "2"]):
        usage = launch(tmp_path, *args)
        assert usage.returncode == 2 and usage.stderr.strip().splitlines()[-1].startswith("python -m scaletrace")


def test_the_demo_sweep_runs_its_ranks_under_the_launcher(tmp_path):
    """The shipped demo sweep: DDP, FSDP and TP at 1, 2 and 4 ranks, launched by collectors/launch.py;
    one of its runs (TP over 2 ranks) collected through the sweep's warm launcher (torch imported
    before the forks) and ingested: both ranks traced, communication seen."""
    pytest.importorskip("torch")
    from conftest import ROOT, query
    from scaletrace.collectors import sweep as sweeps
    from scaletrace.pipeline import ingest

    spec = sweeps.load(ROOT / "collectors" / "demo_sweep.toml")
    spec.out_dir = tmp_path / "runs"
    planned = sweeps.plan(spec)
    layouts = {(r.params["layout"], r.params["world_size"]) for r in planned}
    assert layouts >= {(layout, n) for layout in ("ddp", "fsdp", "tp") for n in (1, 2, 4)}
    assert all(r.argv[1:3] == ["-m", "scaletrace.collectors.launch"] for r in planned)
    (run,) = [r for r in planned if r.params == {"world_size": 2, "layout": "tp"}]
    warm = sweeps.warm_launcher(planned)
    try:
        result = sweeps.execute(run, timeout_s=300, warm=warm)
    finally:
        warm.close()
    assert result.status == "done", result.message
    assert not ingest([run.run_dir], db=tmp_path / "t.duckdb", workers=1).errors
    breakdown = query(tmp_path / "t.duckdb", "rank_breakdown")
    assert breakdown.height == 2 and breakdown["comm_ns"].min() > 0


SWEEP = """
    workload = "w"
    out_dir = "runs"
    run_id = "w-{{job}}"
    launcher = ["{python}", "-m", "scaletrace.collectors.launch", "--nproc", "2", "--preload", "heavy"]
    command = ["-m", "{{job}}", "--out", "{{run_dir}}"]
    timeout_s = {timeout}

    [matrix]
    job = {jobs}
"""
SWEEP_JOBS = {
    # rank 0 records what the run saw; "fail" exits 3 on rank 1; "hang" outlives the timeout
    "ok": textwrap.dedent(RANK_REPORT) + "import heavy\n",
    "fail": "import os, sys\nif os.environ['RANK'] == '1':\n    sys.exit(3)\n",
    "hang": "import time\ntime.sleep(60)\n",
}


def sweep_in(tmp_path: Path, monkeypatch, jobs: list[str], timeout: float = 60):
    """A sweep of ``jobs`` (modules in tmp_path, each a run of 2 ranks under the launcher,
    preloading heavy.py, which counts its imports in tmp_path/imports)."""
    from scaletrace.collectors import sweep as sweeps

    (tmp_path / "heavy.py").write_text("import os\nopen(os.environ['OUT'] + '/imports', 'a').write('x\\n')\n")
    for i, job in enumerate(jobs):
        (tmp_path / f"{job}{i}.py").write_text(SWEEP_JOBS[job])
    names = [f"{job}{i}" for i, job in enumerate(jobs)]
    (tmp_path / "sweep.toml").write_text(textwrap.dedent(SWEEP).format(
        python=sys.executable, timeout=timeout, jobs=json.dumps(names)))
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.chdir(tmp_path)
    return sweeps.run_sweep(sweeps.load(tmp_path / "sweep.toml"))


def test_a_sweep_under_the_launcher_preloads_once_not_once_per_run(tmp_path, monkeypatch):
    results = sweep_in(tmp_path, monkeypatch, ["ok", "ok", "ok"])
    assert [r.status for r in results] == ["done"] * 3, [r.message for r in results]
    assert (tmp_path / "imports").read_text() == "x\n"  # 3 runs of 2 ranks: one import, in the warm launcher
    facts = ranks(tmp_path, 2)  # the last run's ranks: its own world, arguments and log
    assert [f["WORLD_SIZE"] for f in facts] == ["2", "2"] and all(f["preloaded"] for f in facts)
    assert facts[0]["argv"] == ["--out", str(tmp_path / "runs" / "w-ok2")]
    assert all((tmp_path / "runs" / f"w-ok{i}" / ".scaletrace-done").exists() for i in range(3))


def test_a_failed_or_timed_out_run_does_not_stop_the_warm_sweep(tmp_path, monkeypatch):
    start = time.monotonic()
    results = sweep_in(tmp_path, monkeypatch, ["fail", "hang", "ok"], timeout=3)
    assert [r.status for r in results] == ["failed", "failed", "done"]
    assert results[0].message.startswith("exit 1")  # as torchrun: a failed rank, exit 1
    assert results[1].message == "timed out after 3 s" and 3 <= results[1].seconds < 20
    assert (tmp_path / "imports").read_text() == "x\n"  # the same warm launcher ran all three
    assert time.monotonic() - start < 45  # the hung ranks were killed, not waited for
    assert not (tmp_path / "runs" / "w-fail0" / ".scaletrace-done").exists()


def test_a_sweep_with_another_launcher_is_not_kept_warm():
    from scaletrace.collectors.sweep import PlannedRun, warm_launcher

    def planned(*argv):
        return PlannedRun("r", Path("r"), {}, list(argv))

    ours = ("python", "-m", "scaletrace.collectors.launch", "--nproc", "2")
    assert warm_launcher([planned(*ours, "--preload", "a,b", "-m", "j"), planned(*ours, "--preload", "b,c", "t.py")]
                         ).command[-2:] == ["--preload", "a,b,c"]
    assert warm_launcher([planned(*ours, "-m", "j"), planned("torchrun", "--nproc-per-node", "2", "-m", "j")]) is None
    assert warm_launcher([]) is None
