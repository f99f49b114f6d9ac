#!/usr/bin/env bash
# Device check (run once on a lent GPU machine; never in CI): collect real CUDA/NCCL traces with
# the project's collectors, bring them back as one tarball, analyse them here on the CPU machine.
# The GPU machine has torch but none of the pipeline's packages, so only collectors/ runs there.
#   device run: bash tests/device/h200_collect.sh      (writes $OUT/gpu-runs.tar.gz, $OUT/facts.txt)
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pp && ln -sfn "$PWD" /tmp/pp/scaletrace && export PYTHONPATH=/tmp/pp  # the repo is the package
OUT=${OUT:-/tmp/scaletrace-gpu}; RUNS=$OUT/runs; mkdir -p "$RUNS"
{
  nvidia-smi --query-gpu=name,power.draw,power.limit --format=csv
  python3 - <<'PY'
import torch, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())
print("torch device name:", torch.cuda.get_device_name(0))
print("nvml device name:", pynvml.nvmlDeviceGetName(h))
print("fp32 matmul precision:", torch.get_float32_matmul_precision())
PY
} > "$OUT/facts.txt" 2>&1
cat "$OUT/facts.txt"
MODEL="--hidden 1024 --layers 8 --heads 16 --seq-len 1024 --micro-batch 8 --vocab 32000 --steps 12"
for layout in ddp fsdp; do
  timeout 150 torchrun --standalone --nproc-per-node 1 -m scaletrace.collectors.demo --layout $layout $MODEL \
    --workload demo-gpt-h200 --out "$RUNS/h200-$layout-1" 2>&1 | tail -5
done
# zero-code collector on a bf16 script with explicit NCCL collectives (a world of one)
cat > /tmp/plain.py <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl"); torch.cuda.set_device(0)
w = torch.nn.Linear(4096, 4096, device="cuda", dtype=torch.bfloat16)
opt = torch.optim.SGD(w.parameters(), lr=1e-3)
for step in range(10):
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    w(x).float().pow(2).mean().backward()
    for p in w.parameters():
        dist.all_reduce(p.grad)
    g = torch.empty(dist.get_world_size(), *w.weight.shape, device="cuda", dtype=torch.bfloat16)
    dist.all_gather_into_tensor(g, w.weight.detach())
    opt.step(); opt.zero_grad()
torch.cuda.synchronize(); dist.destroy_process_group()
PY
timeout 120 python3 -c "
import sys; from pathlib import Path; from scaletrace.collectors.wrapper import run
sys.exit(run(['torchrun', '--standalone', '--nproc-per-node', '1', '/tmp/plain.py'], Path('$RUNS/h200-plain-1'),
             None, '2,1,3', {'workload': 'plain-bf16', 'tokens_per_step': 8192, 'model.num_params': 16781312}))
" 2>&1 | tail -5
find "$RUNS" -type f | xargs ls -la
tar czf "$OUT/gpu-runs.tar.gz" -C "$OUT" runs && rm -r "$RUNS" && ls -la "$OUT"
