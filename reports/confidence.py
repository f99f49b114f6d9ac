"""Which runs' throughput rests on a guess: the one rule, and its words.

run_summary's tokens_per_step_confidence is 'low' where the tokens per step were inferred from a
token embedding whose input may not be the tokens the step processes (a diffusion model's text
prompt; docs/metrics.md).  Every figure built on those tokens (``TOKEN_FIGURES``: tokens/s, tokens/s
per GPU, MFU, energy per token) then rests on a guess, so, everywhere the report shows one:

* the decision card gives the run no row (reports/card.py, a line names it);
* the findings leave it out of every ranking of those figures and say so (reports/findings.py);
* the runs table writes ``LOW_CONFIDENCE`` beside the figure, the basis in its tooltip (reports/html.py);
* explain draws no GPU-count step from or to it (reports/explain.py), and a sentence names it.
"""

from __future__ import annotations

import polars as pl

LOW_CONFIDENCE = "low confidence"
TOKEN_FIGURES = ("tokens_per_s", "tokens_per_s_per_gpu", "mfu_pct", "energy_per_token_j")


def unsure(row: dict) -> bool:
    """Whether a run_summary row's tokens per step were inferred with low confidence."""
    return row.get("tokens_per_step_confidence") == "low"


def split(runs: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """(the rows of ``runs`` whose token figures can be ranked, the sorted run ids left out as unsure)."""
    if "tokens_per_step_confidence" not in runs.columns:
        return runs, []
    low = (pl.col("tokens_per_step_confidence") == "low").fill_null(False)
    return runs.filter(~low), sorted(runs.filter(low)["run_id"].to_list())


def left_out(run_ids: list[str]) -> str:
    """' (left out: run a, whose tokens per step are inferred with low confidence)'; '' for none."""
    if not run_ids:
        return ""
    return (f" (left out: run{'s' if len(run_ids) > 1 else ''} {', '.join(run_ids)}, whose tokens per step are "
            f"inferred with {LOW_CONFIDENCE})")


__all__ = ["LOW_CONFIDENCE", "TOKEN_FIGURES", "left_out", "split", "unsure"]
