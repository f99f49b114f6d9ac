"""What the collector records about a run, and how it profiles (no torch import here)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunInfo:
    """Facts about the run that the trace cannot tell; they go to ``run.json``.

    Every field is optional; unknown facts stay NULL and the queries say why.
    """

    run_id: str | None = None  # default: the output directory's name
    workload: str | None = None  # sweep label: runs sharing it are compared
    scaling: str | None = None  # "strong" (fixed global batch) or "weak" (fixed per-GPU batch)
    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    global_batch_size: int | None = None  # sequences per optimizer step, all ranks
    seq_len: int | None = None  # tokens per sequence
    tokens_per_step: int | None = None  # default: global_batch_size × seq_len
    model_name: str | None = None
    num_params: float | None = None  # measured from `model` when one is given to profile()
    num_layers: int | None = None
    hidden_size: int | None = None
    flops_per_token: float | None = None
    peak_flops: float | None = None  # per device, FLOP/s; measured on CPU when not given
    # compute dtype of the matmuls (bf16, fp16, tf32, fp32): picks the device's peak for MFU.
    # Not inferred from the parameters: under autocast fp32 weights compute in bf16.
    dtype: str | None = None
    labels: dict = field(default_factory=dict)


@dataclass
class ProfileConfig:
    """torch.profiler settings; the schedule counts optimizer steps.

    wait: steps skipped before profiling; warmup: steps profiled and thrown
    away (profiler start-up cost); active: steps recorded into the trace.
    One window per run (repeat = 1), so each rank writes one trace.
    """

    wait: int = 2
    warmup: int = 1
    active: int = 3
    record_shapes: bool = True
    with_stack: bool = False  # stacks make traces large and slow; off by default
    profile_memory: bool = False
    sample_power: bool = True  # NVML, CUDA only, during the active window
    power_interval_s: float = 0.1

    @classmethod
    def parse_steps(cls, text: str) -> "ProfileConfig":
        """``"wait,warmup,active"``, e.g. ``"2,1,3"``."""
        try:
            wait, warmup, active = (int(x) for x in text.split(","))
        except ValueError:
            raise ValueError(f"--steps wants WAIT,WARMUP,ACTIVE (three integers), got {text!r}") from None
        if min(wait, warmup) < 0 or active < 1:
            raise ValueError(f"--steps {text!r}: wait and warmup >= 0, active >= 1")
        return cls(wait=wait, warmup=warmup, active=active)
