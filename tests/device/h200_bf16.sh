#!/usr/bin/env bash
# Device check (a lent GPU machine; never CI): one bf16 (autocast) run of the demo GPT with the
# project's collector, for the compute-efficiency numbers (GEMM / attention TFLOP/s vs the peak).
#   device run: bash tests/device/h200_bf16.sh     (writes $OUT/gpu-bf16.tar.gz)
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pp && ln -sfn "$PWD" /tmp/pp/scaletrace && export PYTHONPATH=/tmp/pp  # the repo is the package
OUT=${OUT:-/tmp/scaletrace-gpu}; RUNS=$OUT/runs; mkdir -p "$RUNS"
timeout 240 torchrun --standalone --nproc-per-node 1 -m scaletrace.collectors.demo --layout ddp --dtype bf16 \
  --hidden 2048 --layers 8 --heads 16 --seq-len 2048 --micro-batch 8 --vocab 32000 --steps 10 \
  --workload demo-gpt-h200-bf16 --out "$RUNS/h200-bf16-ddp-1" 2>&1 | grep -v Warning | tail -5
ls -la "$RUNS"/*
tar czf "$OUT/gpu-bf16.tar.gz" -C "$OUT" runs && rm -r "$RUNS" && ls -la "$OUT"
