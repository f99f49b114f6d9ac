"""A seeded generator of valid Kineto traces with known answers, for tests and benchmarks.

Each rank of a run, in each step s (times in µs, s0 = s × step_us):

* ``ProfilerStep#(s+1)`` on the CPU, [s0, s0 + step_us);
* one compute kernel on stream 7, [a, a + compute_us) with a = s0 + 10, and
  ``+ straggler_delay_us`` on the straggler rank;
* one DP all_reduce on stream 20 (process group "0", all ranks) that starts
  ``overlap_us`` before its rank's compute ends and ends on every rank
  ``transfer_us`` after the last rank arrived; so on rank r: duration =
  (latest start − start_r) + transfer_us, the fastest rank's duration is
  transfer_us, and the exposed part is duration − overlap_us;
* optionally (``tp_comm_us`` > 0) an all_gather on stream 21 (process group
  "1") right after the all_reduce, fully exposed.

Every kernel is launched by a ``cudaLaunchKernel`` inside the step (linked by
correlation) and carries NCCL kernel args (collective name, process group,
group size, dtype, element counts).  Rank r's clock is offset by
``clock_offset_us × r`` and its ``baseTimeNanoseconds`` compensates, so aligned
times agree across ranks.  ``run.json`` carries the workload, layout, tokens,
model size and device peak; ``power_watts`` adds constant NVML-style power
samples per rank.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import msgspec

from scaletrace.pipeline.read.manifest import Manifest, write_manifest
from scaletrace.queries.analysis.costmodel import ring_factor, ring_steps

BASE_TIME_NS = 1_700_000_000_000_000_000


@dataclass
class SynthRun:
    """Parameters of one generated run; times in µs."""

    run_id: str
    ranks: int = 2
    steps: int = 3
    step_us: int = 1000
    compute_us: int = 300
    overlap_us: int = 50  # all_reduce starts this long before its rank's compute ends
    transfer_us: int = 100  # the all_reduce's duration on the last rank to arrive (must be >= overlap_us)
    straggler_rank: int | None = None
    straggler_delay_us: int = 0
    tp_comm_us: int = 0
    nelems: int = 1 << 20  # all_reduce elements (float32)
    clock_offset_us: int = 0
    workload: str | None = None
    scaling: str = "strong"
    tokens_per_step: int | None = 8192
    num_params: float | None = 1e9
    peak_flops: float | None = 989e12
    device_name: str = "NVIDIA H100 80GB HBM3"
    parallel: dict = field(default_factory=dict)
    power_watts: float | None = None  # writes rank{r}.power.jsonl: constant power per GPU
    kernels_per_step: int = 1  # the compute window split into this many back-to-back kernels
    # explicit compute kernels per step, back to back: ((name, dur_us), ...); their durations must sum
    # to compute_us; replaces the random KERNEL_MIX split (for tests that need a known kernel mix)
    kernel_mix: tuple = ()
    tp: int = 1  # > 1: DP groups "dp{r % tp}" of ranks/tp and TP groups "tp{r // tp}" of tp ranks
    gzip: bool = False
    kernel_prefix: str = ""  # prepended to kernel names (e.g. markup, for escaping tests)
    pg_prefix: str = ""  # prepended to process group descriptions
    seed: int = 0  # shuffles event order in the file (the answers must not depend on it)
    gpus_per_node: int | None = None  # run.json gpus_per_node / num_nodes; None: one node of all ranks

    def starts(self, step: int) -> dict[int, int]:
        """Compute-kernel start per rank in one step (µs, true clock)."""
        a = step * self.step_us + 10
        return {r: a + (self.straggler_delay_us if r == self.straggler_rank else 0)
                for r in range(self.ranks)}

    def allreduce(self, step: int) -> dict[int, tuple[int, int]]:
        """(start, end) of the all_reduce per rank in one step (µs, true clock)."""
        begins = {r: a + self.compute_us - self.overlap_us for r, a in self.starts(step).items()}
        end = max(begins.values()) + self.transfer_us
        return {r: (b, end) for r, b in begins.items()}


KERNEL_MIX = ("sm90_xmma_gemm_bf16bf16_bf16f32", "void at::native::vectorized_elementwise_kernel<4>",
              "flash_fwd_kernel", "void at::native::(anonymous namespace)::layer_norm_kernel",
              "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", "triton_poi_fused_add_mul_0",
              "void at::native::reduce_kernel<512, 1>", "cutlass_80_tensorop_bf16_s16816gemm_relu")


def _kernel(name, ts, dur, stream, corr, **args):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, **args}}


def _split(total: int, parts: int, rng: random.Random) -> list[int]:
    """``parts`` positive integers summing to ``total`` (µs)."""
    parts = max(1, min(parts, total))
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    bounds = [0, *cuts, total]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def _compute_kernels(spec: SynthRun, rng: random.Random) -> list[tuple[str, int]]:
    """(name, dur_us) of one step's compute kernels on one rank, in launch order."""
    if spec.kernel_mix:
        if sum(dur for _, dur in spec.kernel_mix) != spec.compute_us:
            raise ValueError(f"kernel_mix durations sum to {sum(d for _, d in spec.kernel_mix)} µs, "
                             f"not compute_us = {spec.compute_us}")
        return [(spec.kernel_prefix + name, dur) for name, dur in spec.kernel_mix]
    names = [spec.kernel_prefix + KERNEL_MIX[0]] + [KERNEL_MIX[rng.randrange(len(KERNEL_MIX))]
                                                  for _ in range(spec.kernels_per_step - 1)]
    return list(zip(names, _split(spec.compute_us, spec.kernels_per_step, rng)))


def _groups(spec: SynthRun, rank: int) -> dict:
    """Process-group names and sizes of a rank: ("0", world) / ("1", world) without TP."""
    if spec.tp <= 1:
        return {"dp": ("0", spec.ranks), "tp": ("1", spec.ranks)}
    return {"dp": (f"dp{rank % spec.tp}", spec.ranks // spec.tp), "tp": (f"tp{rank // spec.tp}", spec.tp)}


def _rank_events(spec: SynthRun, rank: int) -> list[dict]:
    shift = spec.clock_offset_us * rank  # this rank's clock reads `shift` µs less
    events, corr = [], 0
    pid = 1000 + rank
    rng = random.Random(spec.seed * 100_003 + rank)
    groups = _groups(spec, rank)

    def launch(ts):
        nonlocal corr
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
                       "tid": pid, "ts": ts - shift, "dur": 1, "args": {"correlation": corr}})
        return corr

    nccl_args = {"Process Group Description": spec.pg_prefix + "default_pg", "dtype": "Float"}
    for step in range(spec.steps):
        s0 = step * spec.step_us
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}",
                       "pid": pid, "tid": pid, "ts": s0 - shift, "dur": spec.step_us, "args": {}})
        a = spec.starts(step)[rank]
        for name, dur in _compute_kernels(spec, rng):
            events.append(_kernel(name, a - shift, dur, 7, launch(s0 + 1)))
            a += dur
        begin, end = spec.allreduce(step)[rank]
        dp_name, dp_size = groups["dp"]
        events.append(_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                              begin - shift, end - begin, 20, launch(s0 + 2),
                              **{**nccl_args, "Collective name": "allreduce", "Process Group Name": dp_name,
                                 "Group size": dp_size, "In msg nelems": spec.nelems,
                                 "Out msg nelems": spec.nelems}))
        if spec.tp_comm_us:
            tp_name, tp_size = groups["tp"]
            events.append(_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                                  end - shift, spec.tp_comm_us, 21, launch(s0 + 3),
                                  **{**nccl_args, "Collective name": "_allgather_base",
                                     "Process Group Name": tp_name, "Process Group Description": spec.pg_prefix + "tp",
                                     "Group size": tp_size, "In msg nelems": spec.nelems // tp_size,
                                     "Out msg nelems": spec.nelems}))
    random.Random(spec.seed * 1000 + rank).shuffle(events)
    return events


def _spec_label(spec: SynthRun) -> dict:
    """The spec as run.json records it; fields added later are left out at their defaults, so
    existing sweeps are written byte for byte as before."""
    d = asdict(spec)
    if spec.gpus_per_node is None:
        del d["gpus_per_node"]
    return d


def write_run(root: Path, spec: SynthRun) -> Path:
    """Write ``root/spec.run_id/rank{r}.json`` for every rank and ``run.json``; returns the run dir."""
    run_dir = Path(root) / spec.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(spec.ranks):
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": spec.device_name}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": spec.ranks},
            "baseTimeNanoseconds": BASE_TIME_NS + spec.clock_offset_us * rank * 1000,
            "traceEvents": _rank_events(spec, rank),
        }
        data = msgspec.json.encode(doc)
        if spec.gzip:
            (run_dir / f"rank{rank}.json.gz").write_bytes(gzip.compress(data, compresslevel=1))
        else:
            (run_dir / f"rank{rank}.json").write_bytes(data)
        if spec.power_watts is not None:
            samples = [{"ts_ns": BASE_TIME_NS + i * 100_000_000, "watts": spec.power_watts} for i in range(5)]
            (run_dir / f"rank{rank}.power.jsonl").write_text("".join(json.dumps(x) + "\n" for x in samples))
    layout = spec.parallel or {"dp": spec.ranks, "tp": 1, "pp": 1, "cp": 1}
    write_manifest(run_dir, Manifest.from_columns(
        {"run_id": spec.run_id, "workload": spec.workload, "scaling": spec.scaling, "world_size": spec.ranks,
         "num_nodes": -(-spec.ranks // spec.gpus_per_node) if spec.gpus_per_node else 1,
         "gpus_per_node": spec.gpus_per_node or spec.ranks, **layout, "tokens_per_step": spec.tokens_per_step,
         "model_name": "synthetic", "num_params": spec.num_params, "device_name": spec.device_name,
         "peak_flops": spec.peak_flops, "peak_flops_source": "manifest" if spec.peak_flops else None},
        labels={"generator": "scaletrace.pipeline.synth", "spec": json.dumps(_spec_label(spec))}))
    return run_dir


def sweep_specs(ranks: list[int], steps: int = 5, kernels_per_step: int = 20, tp: int = 1,
                straggler: int | None = None, delay_us: int = 200, clock_offset_us: int = 0,
                workload: str = "synth", seed: int = 0, gzip: bool = True,
                exposed_from: int | None = None) -> list[SynthRun]:
    """One run per world size in ``ranks`` (what ``scaletrace synth`` writes): a 2 ms step, 600 µs of
    compute, a TP all_gather when ``tp`` > 1, the straggler in every run that has that rank.

    ``exposed_from``: runs with fewer ranks hide their all_reduce entirely under compute
    (transfer_us = overlap_us = 50), so exposed communication appears only from that many
    ranks on (there: transfer_us = 100, 50 µs exposed per step).  None: every run exposes 50 µs."""
    specs = []
    for n in ranks:
        if n < 1 or n % tp:
            raise ValueError(f"--ranks {n} is not a positive multiple of --tp {tp}")
        specs.append(SynthRun(
            f"{workload}-{n}", ranks=n, steps=steps, step_us=2000, compute_us=600,
            kernels_per_step=kernels_per_step, tp=tp, tp_comm_us=40 if tp > 1 else 0,
            straggler_rank=straggler if straggler is not None and straggler < n else None,
            straggler_delay_us=delay_us, clock_offset_us=clock_offset_us, workload=workload,
            transfer_us=50 if exposed_from is not None and n < exposed_from else 100,
            parallel={"dp": n // tp, "tp": tp, "pp": 1, "cp": 1}, seed=seed, gzip=gzip))
    return specs


# Collective algorithm factors (nccl-tests PERFORMANCE.md): bytes moved per link ÷ message size,
# and the latency steps of the ring algorithm, by collective.  Shared with queries/analysis/projection.py.
@dataclass(frozen=True)
class CostModel:
    """The standard cost models a generated sweep follows (times in µs): ground truth for projection tests.

    At N ranks (data parallel, one all_reduce of ``grad_bytes`` per step over all N ranks):
    compute = compute_a_us + compute_b_us ÷ N (strong scaling; weak: compute_a_us + compute_b_us);
    transfer = α·2(N−1) + grad_bytes · 2(N−1)/N ÷ busbw (ring all_reduce, α and busbw of the
    intra-node link while N ≤ gpus_per_node, else of the inter-node link); the all_reduce starts
    when ``overlap_fraction`` of the step's compute is still to run, so exposed = max(0, transfer −
    overlap_fraction · compute); step = compute + exposed + overhead_us (the first 10 µs of every
    generated step are idle, so overhead_us ≥ 10)."""

    compute_a_us: float = 200.0
    compute_b_us: float = 3200.0
    alpha_intra_us: float = 2.0
    alpha_inter_us: float = 6.0
    busbw_intra_gbps: float = 100.0  # GB/s = 1e3 bytes per µs
    busbw_inter_gbps: float = 25.0
    grad_bytes: int = 16 << 20
    overlap_fraction: float = 0.5
    overhead_us: float = 20.0
    gpus_per_node: int = 8
    scaling: str = "strong"

    def compute_us(self, n: int) -> float:
        return self.compute_a_us + self.compute_b_us / (n if self.scaling == "strong" else 1)

    def transfer_us(self, n: int) -> float:
        inter = n > self.gpus_per_node
        alpha = self.alpha_inter_us if inter else self.alpha_intra_us
        busbw = self.busbw_inter_gbps if inter else self.busbw_intra_gbps
        return alpha * ring_steps("all_reduce", n) + self.grad_bytes * ring_factor("all_reduce", n) / (busbw * 1e3)

    def exposed_us(self, n: int) -> float:
        return max(0.0, self.transfer_us(n) - self.overlap_fraction * self.compute_us(n))

    def step_us(self, n: int) -> float:
        return self.compute_us(n) + self.exposed_us(n) + self.overhead_us


def cost_sweep_specs(ranks: list[int], cost: CostModel, steps: int = 3, kernels_per_step: int = 4,
                     workload: str = "cost", tokens_per_step: int = 8192, seed: int = 0) -> list[SynthRun]:
    """One run per world size whose step follows ``cost`` (times rounded to whole µs): compute, the
    all_reduce's start (``overlap_fraction`` of compute before its end) and duration (the transfer),
    and the step (10 µs idle + compute + exposed + the rest of overhead_us idle at the end).
    Weak scaling multiplies tokens_per_step by N."""
    specs = []
    for n in ranks:
        if n < 2:
            raise ValueError(f"a cost sweep needs at least 2 ranks per run (an all_reduce), got {n}")
        compute = round(cost.compute_us(n))
        transfer = round(cost.transfer_us(n))
        overlap = round(cost.overlap_fraction * compute)
        exposed = max(0, transfer - overlap)
        specs.append(SynthRun(
            f"{workload}-{n}", ranks=n, steps=steps, step_us=round(compute + exposed + cost.overhead_us),
            compute_us=compute, overlap_us=overlap, transfer_us=transfer, nelems=cost.grad_bytes // 4,
            kernels_per_step=kernels_per_step, workload=workload, scaling=cost.scaling,
            tokens_per_step=tokens_per_step * (n if cost.scaling == "weak" else 1),
            parallel={"dp": n, "tp": 1, "pp": 1, "cp": 1}, gpus_per_node=min(n, cost.gpus_per_node), seed=seed))
    return specs
