"""The critical path in a sentence per run, for ``scaletrace explain`` (critical_path_summary).

'Step 10's critical path (19.9 ms, the slowest rank's step: rank 1) runs through 4 ranks; rank 7
holds 68 % of it, and the op that cost the most path time is rank 7's host gap (no recorded op):
55 % (10.9 ms); by kind: host gap 64 %, host ops 35 %, launch delay 0.53 %; 8 µs of communication on
the path is outside compute (blocking: 100 % of the path's communication).'

Every share has a denominator that bounds it: the path (a rank's, an op's, a kind's time on it) or
the communication on the path (the blocking part of it).

The step named is the run's longest path (its slowest step) among the steps the steady-state step
period is measured over (critical_path_summary.steady_state, the step model): steps that launched
device work, the first of them left out where later ones exist (its window starts at its
annotation, not at a previous step's end, so it also holds the time before its first launch).  A
step that launched no device work is never the one named (its path is host time only: not the
step), unless no step launched any.  With several steps the sentence says in how many of them the
same rank held the most path time.  Built from values, left out when the run has no path (CPU-only
traces, no ProfilerStep annotations).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from scaletrace.reports.words import count, duration, present, share

if TYPE_CHECKING:
    from scaletrace.pipeline.store.db import Database

ABOUT = "critical path"
KIND_WORDS = {"compute_kernel": "compute kernels", "memory": "memory copies", "comm_transfer": "transfer",
              "comm_wait": "waiting in a collective", "launch_delay": "launch delay", "cpu_op": "host ops",
              "host_gap": "host gap"}
TOP_KINDS = 3
# critical_path_summary.cross_stream_basis -> what the sentence adds (exact edges need no caveat)
BASIS_WORDS = {"inferred": "; its cross-stream waits are inferred from the times (no CUDA sync events in the trace)",
               "mixed": "; its cross-stream waits are from CUDA sync events where a trace has them, inferred "
                        "from the times elsewhere"}


def op_words(kind: str, name: str, rank: int) -> str:
    """'rank 7's host gap (no recorded op)', 'rank 2's kernel sm90_xmma_gemm…', 'rank 0's transfer in ncclDev…'."""
    short = name if len(name) <= 60 else name[:57] + "…"
    if kind == "host_gap":
        return f"rank {rank}'s host gap (no recorded op)"
    if kind == "cpu_op":
        return f"rank {rank}'s host in {short}"
    return f"rank {rank}'s {KIND_WORDS.get(kind, kind)} in {short}"


def path_sentence(steps: pl.DataFrame) -> str | None:
    """The sentence for one run's critical_path_summary rows (None without a path)."""
    steps = steps.filter(pl.col("path_ns") > 0) if not steps.is_empty() else steps
    if steps.is_empty():
        return None
    steady = steps.filter(pl.col("steady_state"))
    named = steady if not steady.is_empty() else steps
    s = named.sort(["path_ns", "step"], descending=[True, False]).row(0, named=True)
    path = s["path_ns"]
    if not duration(path):
        return None
    text = (f"Step {s['step']}'s critical path ({duration(path)}, the slowest rank's step: rank {s['slowest_rank']}) "
            f"runs through {count(s['num_ranks'], 'rank')}")
    if s["num_ranks"] > 1:
        text += f"; rank {s['top_rank']} holds {share(100 * s['top_rank_ns'] / path)} of it"
    text += (f"; the op that cost the most path time is {op_words(s['top_op_kind'], s['top_op'], s['top_op_rank'])}: "
             f"{share(100 * s['top_op_ns'] / path)} ({duration(s['top_op_ns'])})")
    kinds = sorted(((s[f"{k}_ns"], k) for k in KIND_WORDS if s.get(f"{k}_ns")), reverse=True)[:TOP_KINDS]
    if kinds:
        text += "; by kind: " + ", ".join(f"{KIND_WORDS[k]} {share(100 * ns / path)}" for ns, k in kinds)
    if present(s.get("blocking_comm_pct_of_path_comm")) and not s["blocking_comm_ns"]:
        text += "; the communication on the path is all under compute (none of it blocking)"
    elif present(s.get("blocking_comm_pct_of_path_comm")):
        text += (f"; {duration(s['blocking_comm_ns'])} of communication on the path is outside compute (blocking: "
                 f"{share(s['blocking_comm_pct_of_path_comm'])} of the path's communication)")
    if steps.height > 1:
        same = steps.filter(pl.col("top_rank") == s["top_rank"]).height
        text += f"; rank {s['top_rank']} holds the most path time in {same} of the {steps.height} steps"
    return text + BASIS_WORDS.get(s.get("cross_stream_basis"), "") + "."


def with_path(db: "Database", sentences: pl.DataFrame) -> pl.DataFrame:
    """``sentences`` (run_id, about, sentence) with each run's critical-path sentence after its own."""
    if sentences.is_empty():
        return sentences
    summary = db.query("critical_path_summary")
    said = {}
    for (run,), part in summary.partition_by("run_id", as_dict=True).items() if not summary.is_empty() else ():
        text = path_sentence(part)
        if text:
            said[run] = text
    rows = []
    for (run,), part in sentences.group_by(["run_id"], maintain_order=True):
        rows += part.rows(named=True)
        if run in said:
            rows.append({"run_id": run, "about": ABOUT, "sentence": said[run]})
    return pl.DataFrame(rows, schema=sentences.schema)
