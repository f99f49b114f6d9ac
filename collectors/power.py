"""GPU power samples through NVML (``nvidia-ml-py``), taken on a thread during the active window."""

from __future__ import annotations

import threading
import time


class PowerSampler:
    """Samples this rank's GPU power; ``unavailable`` says why when it cannot."""

    def __init__(self, device_index: int, interval_s: float):
        self.samples: list[tuple[int, float]] = []  # (unix time ns, watts)
        self.unavailable: str | None = None
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            self._read = lambda: pynvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0  # mW -> W
            self._read()
        except ImportError:
            self.unavailable = "nvidia-ml-py not installed"
        except Exception as exc:  # noqa: BLE001 - any NVML failure means: no samples
            self.unavailable = f"NVML unavailable ({exc})"

    def start(self) -> None:
        if self.unavailable or self._thread:
            return
        self._thread = threading.Thread(target=self._run, name="scaletrace-power", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.time_ns(), self._read()))
            except Exception:  # noqa: BLE001 - a failed read is a missing sample
                pass
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
