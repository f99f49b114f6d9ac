"""Demo workload: a small GPT on synthetic tokens, under torchrun, on CPU (gloo) or GPU (NCCL).

    torchrun --nproc-per-node 2 -m scaletrace.collectors.demo --layout fsdp --out runs/demo-fsdp-2

Layouts: ``ddp`` (DistributedDataParallel), ``fsdp`` (FSDP2 ``fully_shard``),
``tp`` (tensor parallel with DTensor: attention and MLP split by columns then
rows), ``fsdp_tp`` (2-D mesh: FSDP over dp × TP over tp = 2; world size >= 4).
One thread per rank on CPU.  A layout that does not fit the world size
writes its reason to ``<out>/.scaletrace-not-applicable`` and exits 0 (the
sweep runner records the run as not applicable).  ``--no-profile`` runs
the same steps without the collector (for the bit-identical-losses test and
the overhead benchmark).
"""

from __future__ import annotations

import argparse
import os
import sys

LAYOUTS = ("ddp", "fsdp", "tp", "fsdp_tp")
NOT_APPLICABLE_MARKER = ".scaletrace-not-applicable"  # read by the sweep runner


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layout", choices=LAYOUTS, default="ddp")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps")
    p.add_argument("--micro-batch", type=int, default=4, help="sequences per data-parallel rank")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--out", default=None, help="run directory (default runs/demo-<layout>-<world>)")
    p.add_argument("--run-id", default=None)
    p.add_argument("--workload", default="demo-gpt")
    p.add_argument("--scaling", choices=("strong", "weak"), default="weak")
    p.add_argument("--profile-steps", default="2,1,3", help="wait,warmup,active")
    p.add_argument("--no-profile", action="store_true", help="run without the collector")
    p.add_argument("--loss-file", default=None, help="rank 0 writes one loss per line here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="fp32 weights and matmuls, or bf16 autocast over fp32 weights (mixed precision)")
    return p.parse_args(argv)


def build_model(args):
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.head_dim = args.hidden // args.heads
            self.q = nn.Linear(args.hidden, args.hidden)
            self.k = nn.Linear(args.hidden, args.hidden)
            self.v = nn.Linear(args.hidden, args.hidden)
            self.proj = nn.Linear(args.hidden, args.hidden)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.q(x), self.k(x), self.v(x)
            heads = q.shape[-1] // self.head_dim  # local heads under tensor parallelism
            q, k, v = (y.view(b, t, heads, self.head_dim).transpose(1, 2) for y in (q, k, v))
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, heads * self.head_dim))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(args.hidden), nn.LayerNorm(args.hidden)
            self.attn = Attention()
            self.fc1 = nn.Linear(args.hidden, 4 * args.hidden)
            self.fc2 = nn.Linear(4 * args.hidden, args.hidden)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(args.vocab, args.hidden)
            self.pos = nn.Embedding(args.seq_len, args.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln = nn.LayerNorm(args.hidden)
            self.head = nn.Linear(args.hidden, args.vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    torch.manual_seed(args.seed)
    return GPT()


def parallelize(model, layout: str, world: int, device: str):
    """Returns (model, dp degree, tp degree, data-parallel rank)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    rank = dist.get_rank()
    if layout == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model), world, 1, rank
    if layout == "fsdp":
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device, (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, world, 1, rank
    tp = world if layout == "tp" else 2
    dp = world // tp
    mesh = init_device_mesh(device, (dp, tp), mesh_dim_names=("dp", "tp"))
    _tensor_parallel(model, mesh["tp"])
    if layout == "fsdp_tp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return model, dp, tp, mesh["dp"].get_local_rank()


def _tensor_parallel(model, tp_mesh) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.proj": RowwiseParallel(), "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block, tp_mesh, plan)


def layout_fits(layout: str, world: int, args) -> str | None:
    """Why the layout cannot run at this world size, or None."""
    if layout in ("ddp", "fsdp"):
        return None
    tp = world if layout == "tp" else 2
    if layout == "fsdp_tp" and world < 4:
        return "fsdp_tp needs world size >= 4"
    if args.heads % tp or (4 * args.hidden) % tp:
        return f"{args.heads} heads do not split over tp={tp}"
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist

    from scaletrace.collectors import ProfileConfig, RunInfo, profile

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    else:
        torch.set_num_threads(1)
    if "RANK" not in os.environ:  # plain `python -m scaletrace.collectors.demo`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29512"), LOCAL_WORLD_SIZE="1")
    dist.init_process_group("nccl" if cuda else "gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    out = args.out or f"runs/{args.workload}-{args.layout}-{world}"
    reason = layout_fits(args.layout, world, args)
    if reason:
        if rank == 0:
            print(f"demo: layout {args.layout} not applicable: {reason}", file=sys.stderr)
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, NOT_APPLICABLE_MARKER), "w") as f:
                f.write(reason + "\n")
        dist.destroy_process_group()
        return 0
    device = "cuda" if cuda else "cpu"
    model = build_model(args)
    num_params = float(sum(p.numel() for p in model.parameters()))
    model = model.to(device)
    model, dp, tp, dp_rank = parallelize(model, args.layout, world, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    global_batch = args.micro_batch * dp
    run = RunInfo(
        run_id=args.run_id, workload=args.workload, scaling=args.scaling, dp=dp, tp=tp, pp=1, cp=1,
        global_batch_size=global_batch, seq_len=args.seq_len, tokens_per_step=global_batch * args.seq_len,
        model_name=f"demo-gpt-{args.layers}x{args.hidden}", num_params=num_params,
        num_layers=args.layers, hidden_size=args.hidden, labels={"layout": args.layout},
        # fp32 weights: fp32 matmuls (TF32 tensor cores on CUDA when torch allows them), or bf16 under autocast
        dtype="bf16" if args.dtype == "bf16" else
              "tf32" if cuda and torch.get_float32_matmul_precision() != "highest" else "fp32",
    )
    losses = []
    config = ProfileConfig.parse_steps(args.profile_steps)
    session = None if args.no_profile else profile(out, run=run, config=config)
    if session:
        session.start()
    generator = torch.Generator().manual_seed(args.seed * 1000 + dp_rank)
    for _ in range(args.steps):
        tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len + 1), generator=generator)
        tokens = tokens.to(device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab).float(),
                                                 tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if session:
            session.step(tokens=args.micro_batch * args.seq_len)
    if session:
        session.close()
    if rank == 0 and args.loss_file:
        with open(args.loss_file, "w") as f:
            f.writelines(f"{x!r}\n" for x in losses)
    if rank == 0:
        print(f"demo: {args.layout} world={world} dp={dp} tp={tp} steps={args.steps} "
              f"loss {losses[0]:.4f} -> {losses[-1]:.4f}" + ("" if args.no_profile else f" -> {out}"))
    dist.barrier()  # gloo may abort a rank that tears down while its peer still talks
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
