"""CPU-only traces: a thread blocked on a collective is waiting for communication, and a trace that
names a device but holds none of its events says so.

* run_summary.collective_wait_pct is the part of other_pct that the CPU threads sat in a collective's
  wait (`All2All_Pooled_Wait`, `_c10d_functional::wait_tensor`) with no compute, comm or memory under it,
  over the step figures' window; explain says it as waiting for a collective, not "other";
* a CPU-only trace whose deviceProperties name a GPU gets a run_summary warning and explain's shares
  are of the CPU window, never the device's.

Expected values are derived in each test from the generated events.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import cpu, query, write_trace
from scaletrace.cli import main
from scaletrace.reports.words import COLLECTIVE_WAIT, STEP_PARTS, share

STEP_US = 10_000


def _torchrec_step(s: int, wait: str = "All2All_Pooled_Wait") -> list:
    """One 10 ms step whose ops fill it end to end (so every step's slot is the step, 10 ms): a GEMM,
    the all-to-all issued (1 ms) and waited for (3 ms) on the training thread, an add; another
    thread copies for 500 µs during the wait."""
    t0 = s * STEP_US
    return [cpu(f"ProfilerStep#{s}", t0, STEP_US, cat="user_annotation"),
            cpu("aten::mm", t0, 4000), cpu("All2All_Pooled_Req", t0 + 4200, 1000),
            cpu(wait, t0 + 5300, 3000), cpu("aten::add", t0 + 8400, 1600),
            cpu("aten::copy_", t0 + 7300, 500, tid=2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cpuwait")
    for rank in (0, 1):
        write_trace(root / "torchrec" / f"rank{rank}.json", _torchrec_step(0) + _torchrec_step(1), rank=rank)
    # no ProfilerStep, torch's functional-collective wait: the whole trace is the window
    events = [e for e in _torchrec_step(0, "_c10d_functional::wait_tensor") if e["cat"] != "user_annotation"]
    write_trace(root / "functional" / "rank0.json", events, rank=0)
    write_trace(root / "a100cpu" / "rank0.json", _torchrec_step(0), rank=0,
                deviceProperties=[{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}])
    db = root / "t.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(root), "--db", str(db), "--workers", "1", "-q"])
    assert result.exit_code == 0, result.output
    summary = {r["run_id"]: r for r in query(db, "run_summary").to_dicts()}
    explain = CliRunner().invoke(main, ["explain", "--db", str(db)])
    assert explain.exit_code == 0, explain.output
    return summary, explain.output


def _block(output: str, run: str) -> str:
    """The run's sentences: the indented lines under its name."""
    lines = output.split(f"\n{run}:\n", 1)[1] if not output.startswith(f"{run}:\n") else output.split("\n", 1)[1]
    block = []
    for line in lines.splitlines():
        if not line.startswith("  "):
            break
        block.append(line)
    assert block, output
    return "\n".join(block)


def test_collective_wait_of_the_step_window(runs):
    summary, _ = runs
    s = summary["torchrec"]
    # every step's slot is [t0, t0 + 10000) (the run's figures are over the steady-state slots: step 1's;
    # a wait counted over the first slot too would be twice other): the wait [5300, 8300) has the other
    # thread's copy [7300, 7800) under it (compute), so 3000 − 500 = 2500 µs of waiting alone a step
    slot, wait = STEP_US, 3000 - 500
    assert s["collective_wait_pct"] == pytest.approx(100 * wait / slot)
    assert s["other_pct"] == pytest.approx(100 * wait / slot)  # nothing else is other
    assert s["exposed_comm_pct"] == pytest.approx(100 * 1000 / slot)  # the Req: issued on the thread
    assert s["compute_pct"] == pytest.approx(100 * (4000 + 1600 + 500) / slot)
    assert s["idle_pct"] == pytest.approx(100 * (slot - 4000 - 1000 - 3000 - 1600) / slot)
    # no ProfilerStep: the whole trace [0, 10000) is the window
    assert summary["functional"]["collective_wait_pct"] == pytest.approx(100 * wait / STEP_US)


def test_explain_says_waiting_for_a_collective(runs):
    summary, output = runs
    block = _block(output, "torchrec")
    pct = share(summary["torchrec"]["collective_wait_pct"])
    assert f"{pct} {COLLECTIVE_WAIT}" in block
    assert STEP_PARTS["other"] not in block  # all of other is the wait
    assert f"waiting for a collective a further {pct}" in block
    assert "CPU window" in block and "device window" not in block and "on the device" not in block


def test_a_trace_naming_a_device_without_its_events_says_so(runs):
    summary, output = runs
    warning = summary["a100cpu"]["warnings"] or ""
    assert "no device activity" in warning and "NVIDIA A100-SXM4-40GB" in warning
    assert not summary["torchrec"]["warnings"]  # a CPU trace that names no device: nothing to warn
    block = _block(output, "a100cpu")
    assert "Warning: no device activity" in block
    assert "traced on NVIDIA" not in block and "device window" not in block and "on the device" not in block
