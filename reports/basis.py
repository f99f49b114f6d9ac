"""What a run's figures rest on, and when that is too little to judge the run by (docs/limits.md,
"Findings from too little"): the findings and the run sentences say it, and a finding about a run too
small to judge never leads the findings.

A run is too small to judge when either holds (run_summary's columns):

- its traced ranks are under MIN_TRACED_RANK_SHARE of its world size (2 of 128, 1 of 300): a mean
  over them, or the last of them to arrive, speaks for too few of the job's ranks;
- it has no profiled step and fewer than MIN_EVENTS_PER_RANK events per traced rank: a fragment,
  not a training step (one step of the demo GPT on a CPU is 1,613 events).
"""

from __future__ import annotations

from scaletrace.reports.words import present

MIN_TRACED_RANK_SHARE = 1 / 8  # one node of eight GPUs in a 64-GPU job still counts
MIN_EVENTS_PER_RANK = 1000


def _int(x) -> int | None:
    return int(x) if present(x) else None


def too_few_ranks(run: dict) -> bool:
    """Traced ranks under MIN_TRACED_RANK_SHARE of the world size."""
    traced, world = _int(run.get("ranks_traced")), _int(run.get("world_size"))
    return traced is not None and world is not None and traced < world * MIN_TRACED_RANK_SHARE


def too_small(run: dict) -> list[str]:
    """Why ``run`` (a run_summary row) is too small to judge, in words; [] where it is not (or where the
    columns are missing: nothing to say)."""
    reasons = []
    traced, world = _int(run.get("ranks_traced")), _int(run.get("world_size"))
    if too_few_ranks(run):
        reasons.append(f"{traced} of its {world} ranks traced")
    events, steps = _int(run.get("trace_events")), _int(run.get("profiled_steps"))
    if events is not None and traced and steps == 0 and events < MIN_EVENTS_PER_RANK * traced:
        per = f"{events:,} trace event{'s' if events != 1 else ''}" + (" over its traced ranks" if traced > 1 else "")
        reasons.append(f"{per} and no profiled step")
    return reasons


def rests_on(run: dict) -> str | None:
    """'2 of its 128 ranks traced' where not every rank is; None where all are or it is unknown."""
    traced, world = _int(run.get("ranks_traced")), _int(run.get("world_size"))
    if traced is None or world is None or traced >= world:
        return None
    return f"{traced} of its {world} ranks traced"


def judged(run: dict) -> str:
    """'too small to judge: 1 of its 300 ranks traced, 30 trace events, 1 profiled step': the reasons,
    then how many events and profiled steps the figures rest on where no reason says it."""
    reasons = too_small(run)
    events, steps = _int(run.get("trace_events")), _int(run.get("profiled_steps"))
    amount = [f"{events:,} trace event{'s' if events != 1 else ''}" if events is not None else None,
              f"{steps} profiled step{'s' if steps != 1 else ''}" if steps else None]
    amount = [a for a in amount if a]
    if any("trace event" in r for r in reasons):
        amount = []
    return "too small to judge: " + ", ".join(reasons + amount)


__all__ = ["MIN_EVENTS_PER_RANK", "MIN_TRACED_RANK_SHARE", "judged", "rests_on", "too_few_ranks", "too_small"]
