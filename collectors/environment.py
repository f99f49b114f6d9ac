"""Facts about the process and machine: rank, world, host, device, versions, peak FLOP/s."""

from __future__ import annotations

import os
import socket
import time


def rank_and_world() -> tuple[int, int, int]:
    """(rank, world size, local world size): torch.distributed when up, else torchrun's env."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return rank, world, local


def host() -> str:
    return socket.gethostname().split(".")[0] or "host"


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity mask; the machine's count where unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def backend() -> str | None:
    """The default process group's backend ("nccl", "gloo", ...), None when there is none."""
    import torch.distributed as dist

    return str(dist.get_backend()) if dist.is_available() and dist.is_initialized() else None


def device_facts() -> dict:
    """Device name, backend and versions; CUDA/ROCm when present, else the CPU."""
    import torch

    facts = {"torch": torch.__version__, "backend": backend(), "nccl": None,
             "on_cpu": not torch.cuda.is_available()}
    if torch.cuda.is_available():
        facts["device"] = torch.cuda.get_device_name(torch.cuda.current_device())
        try:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - NCCL missing is a fact, not an error
            pass
    else:
        cores, threads = os.cpu_count() or 1, torch.get_num_threads()
        facts["device"] = (f"CPU ({cores} core{'s' * (cores != 1)}, "
                           f"{threads} thread{'s' * (threads != 1)} per rank)")
    return facts


def measure_peak_flops(seconds: float = 0.3, n: int = 512) -> float:
    """FLOP/s of fp32 matmuls on this device with this process's threads (2n³ per matmul)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    torch.mm(a, b)  # warm-up
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        count += 1
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * count / (time.perf_counter() - start)
