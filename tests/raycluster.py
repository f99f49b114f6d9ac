"""A real Ray cluster of several nodes on this machine (a head, and nodes joined to it on
127.0.0.1), for tests/test_cluster.py and tests/bench/ray_scaling.py.  Not a test module."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

# Token authentication needs the same token on every node and driver; these clusters listen on
# 127.0.0.1 only and live for one test module or benchmark.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
SITE = Path(__file__).with_name("raysite")  # its sitecustomize: no IRI grammar compiled in each Ray process


def ray_env() -> dict[str, str]:
    """RAY_ENV, and a PYTHONPATH that starts with SITE (what was on it stays after it)."""
    path = os.environ.get("PYTHONPATH")
    if path is None or not path.startswith(str(SITE)):
        path = os.pathsep.join(filter(None, (str(SITE), path)))
    return {**RAY_ENV, "PYTHONPATH": path}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes(marker: str) -> list:
    """Processes whose command line contains ``marker``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def kill_tree(procs: list) -> int:
    """SIGKILL the processes and all their descendants; returns how many."""
    victims = {p.pid: p for p in procs}
    for p in procs:
        try:
            victims.update({c.pid: c for c in p.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
    for p in victims.values():
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    return len(victims)


class LocalCluster:
    """``with LocalCluster() as c:`` a head node of ``cpus`` CPUs; ``c.add_node()`` joins another;
    ``c.kill_node(i)`` SIGKILLs node i's raylet and its workers.  ``ray_env()`` is set in this
    process while the cluster lives (the driver must match the nodes)."""

    def __init__(self, cpus: int = 1, object_store_bytes: int = 80_000_000):
        self.cpus, self.store = cpus, object_store_bytes
        self.node_ports: list[int] = []

    def __enter__(self) -> "LocalCluster":
        env = ray_env()
        self.saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        self.temp = Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp"))  # Ray's socket paths must fit 107 bytes
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        try:
            self._start("--head", f"--port={port}", "--include-dashboard=false")
        except BaseException:
            self.__exit__()
            raise
        return self

    def add_node(self) -> int:
        """Join a node and wait until the cluster counts it (``ray start`` returns before that)."""
        node_port = free_port()
        self._start(f"--address={self.address}", f"--node-manager-port={node_port}",
                    f"--object-manager-port={free_port()}")
        self.node_ports.append(node_port)
        self.wait_for_nodes(1 + len(self.node_ports))
        return len(self.node_ports)

    def wait_for_nodes(self, count: int, timeout_s: float = 120) -> None:
        """Until ``count`` nodes are alive, as the cluster's GCS lists them: asked through a GCS
        client, not a driver, so that this process stays unconnected (a command without an address
        must start its own cluster) and no job starts for it."""
        from ray._raylet import GcsClient
        from ray.core.generated.gcs_pb2 import GcsNodeInfo

        gcs = GcsClient(address=self.address)
        deadline = time.monotonic() + timeout_s
        while sum(n.state == GcsNodeInfo.ALIVE for n in gcs.get_all_node_info(timeout=30).values()) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {count} Ray nodes alive after {timeout_s:.0f} s")
            time.sleep(0.2)

    def kill_node(self, index: int) -> int:
        """SIGKILL the processes of the ``index``-th added node (1-based); returns how many."""
        return kill_tree(processes(f"--node_manager_port={self.node_ports[index - 1]}"))

    def _start(self, *args: str, tries: int = 3) -> None:
        """``ray start``; again where it fails (Ray gives a node 30 s, fixed, to register: a loaded
        machine can miss that), after killing what the failed start left; the last failure raises
        with Ray's own message."""
        ray_cli = Path(sys.executable).with_name("ray")
        # no log monitor (a process per node that tails the workers' logs for drivers): every driver
        # here connects with log_to_driver=False
        cmd = [str(ray_cli), "start", *args, "--node-ip-address=127.0.0.1", f"--num-cpus={self.cpus}",
               f"--object-store-memory={self.store}", "--disable-usage-stats", f"--temp-dir={self.temp}",
               "--include-log-monitor=false"]
        for attempt in range(1, tries + 1):
            before = {p.pid for p in processes(str(self.temp))}
            done = subprocess.run(cmd, env=os.environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, timeout=180)
            if done.returncode == 0:
                return
            kill_tree([p for p in processes(str(self.temp)) if p.pid not in before])
            if attempt == tries:
                raise RuntimeError(f"ray start {' '.join(args)} failed {tries} times; the last said:\n"
                                   + done.stderr[-3000:])

    def __exit__(self, *exc) -> None:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()
        kill_tree(processes(str(self.temp)))
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
