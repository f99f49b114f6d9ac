"""Collector overhead on steps outside the profiling window (a script, not a test).

    .venv/bin/python tests/bench/collector_overhead.py [--rounds 6] [--steps 40]

One process, the demo GPT on CPU (one thread).  Each round trains the same
model for ``--steps`` steps twice, once bare and once inside
``collectors.profile`` whose window (wait 1, warmup 1, active 2) closes at
step 4; the order alternates between rounds so drift hits both alike.  It
compares the median step time of the steps after the window (step >= 6) and
prints the ratio wrapped / bare measured in this one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=40)
    cli = parser.parse_args()

    import torch

    from scaletrace.collectors import ProfileConfig, profile
    from scaletrace.collectors.demo import build_model, parse_args

    torch.set_num_threads(1)
    args = parse_args(["--micro-batch", "4", "--seq-len", "64"])

    def train(session) -> list[float]:
        model = build_model(args)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        gen = torch.Generator().manual_seed(0)
        times = []
        for _ in range(cli.steps):
            start = time.perf_counter()
            tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len + 1), generator=gen)
            loss = torch.nn.functional.cross_entropy(
                model(tokens[:, :-1]).reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if session:
                session.step(tokens=tokens.numel())
            times.append(time.perf_counter() - start)
        return times[6:]

    bare, wrapped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(cli.rounds):
            for mode in (("bare", "wrapped") if i % 2 == 0 else ("wrapped", "bare")):
                if mode == "bare":
                    bare += train(None)
                else:
                    with profile(Path(tmp) / f"r{i}", config=ProfileConfig(wait=1, warmup=1, active=2)) as s:
                        wrapped += train(s)
    b, w = statistics.median(bare), statistics.median(wrapped)
    print(f"steps after the window: {len(bare)} bare, {len(wrapped)} wrapped ({cli.rounds} rounds)")
    print(f"median step: bare {b * 1e3:.3f} ms, wrapped {w * 1e3:.3f} ms")
    print(f"overhead outside the window: {100 * (w / b - 1):+.2f} %  (ratio {w / b:.4f}; target < 1 %)")


if __name__ == "__main__":
    main()
