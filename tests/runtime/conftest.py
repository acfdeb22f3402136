"""Real Ray clusters made with ``ray start`` on 127.0.0.1, with their own ports and temp
dirs, stopped by PID (never ``ray stop``: other Ray clusters may run on this machine)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
_PORTS_PER_NODE = 60  # 10 service ports, then the worker port range


def _ephemeral_ports() -> range:
    """The kernel's range for outgoing connections' local ports: a port in it can be taken
    by any client between our check and ``ray start``'s bind."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def _free_base_port() -> int:
    """A block of ports that is free now and outside the ephemeral range."""
    ephemeral = _ephemeral_ports()
    bases = [
        b
        for b in range(10000, 65000 - _PORTS_PER_NODE, 100)
        if b + _PORTS_PER_NODE <= ephemeral.start or b >= ephemeral.stop
    ]
    for _ in range(200):
        base = random.choice(bases)
        try:
            for port in range(base, base + _PORTS_PER_NODE):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free block of ports found")


def cluster_env(token: str) -> dict[str, str]:
    """The environment of a client of the test cluster: its token, the worktree's code
    first, and no RAY_AUTH_MODE (dataforge must find the token by itself)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_AUTH_TOKEN"] = token
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


class RayStartNode:
    """One ``ray start`` node. Its daemons share the process group of the ``ray start``
    call (a new session); workers are children of its raylet."""

    def __init__(
        self, temp_dir: Path, token: str, head: str | None, num_cpus: int, hide: Path | None
    ) -> None:
        self.temp_dir = temp_dir
        self.env = cluster_env(token)
        self.ray = RAY
        # A port found free can still be taken before the node binds it (by another test
        # run on this machine): then the node starts again on another block.
        for attempt in range(3):
            try:
                self._start(token, head, num_cpus, hide)
                return
            except RuntimeError as e:
                if "Address already in use" not in str(e) and "Failed to start" not in str(e):
                    raise
                if attempt == 2:
                    raise

    def _start(self, token: str, head: str | None, num_cpus: int, hide: Path | None) -> None:
        self.base = _free_base_port()
        b = self.base
        args = [
            RAY, "start", "--node-ip-address", "127.0.0.1", "--temp-dir", str(self.temp_dir),
            "--num-cpus", str(num_cpus), "--disable-usage-stats",
            "--node-manager-port", str(b + 1), "--object-manager-port", str(b + 2),
            "--dashboard-agent-listen-port", str(b + 5), "--dashboard-agent-grpc-port", str(b + 6),
            "--runtime-env-agent-port", str(b + 7), "--metrics-export-port", str(b + 8),
            "--min-worker-port", str(b + 10), "--max-worker-port", str(b + _PORTS_PER_NODE - 1),
            "--object-store-memory", str(300 << 20),
        ]  # fmt: skip
        if head is None:
            args += ["--head", "--port", str(b), "--ray-client-server-port", str(b + 3)]
            args += ["--include-dashboard=true", "--dashboard-host", "127.0.0.1"]
            args += ["--dashboard-port", str(b + 4)]
            self.address = f"127.0.0.1:{b}"
            self.dashboard = f"http://127.0.0.1:{b + 4}"
        else:
            args += ["--address", head]
        if hide is not None:
            # A node that does not share this directory: the node's processes live in their
            # own mount namespace, with an empty tmpfs mounted over it.
            hide.mkdir(parents=True, exist_ok=True)
            mount = 'mount -t tmpfs tmpfs "$0" && exec "$@"'
            args = ["unshare", "--mount", "sh", "-c", mount, str(hide), *args]
        # `ray start --head` turns token authentication on by itself when it finds a token;
        # a joining `ray start` must be told, as the head's own hint says.
        node_env = self.env if head is None else {**self.env, "RAY_AUTH_MODE": "token"}
        proc = subprocess.Popen(
            args,
            env=node_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.pgid = proc.pid
        output, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            self.kill()
            raise RuntimeError(f"ray start failed:\n{output[-3000:]}")

    def pids(self) -> set[int]:
        """The node's processes: its process group and all their descendants."""
        parent: dict[int, int] = {}
        group: set[int] = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(stat.parent.name)
            parent[pid] = int(fields[1])
            if int(fields[2]) == self.pgid and fields[0] != "Z":
                group.add(pid)
        found = set(group)
        while True:
            more = {p for p, pp in parent.items() if pp in found and p not in found}
            if not more:
                return found
            found |= more

    def raylet_pid(self) -> int:
        for pid in self.pids():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if cmd.endswith(b"/raylet"):
                return pid
        raise RuntimeError("raylet not found")

    def kill(self) -> None:
        for _ in range(3):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # already gone
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)


@pytest.fixture
def ray_start_cluster() -> Iterator:
    """``make(num_cpus, hide=None) -> node``: the first call starts a head node, later ones
    join it (``hide``: a directory the node does not see); every node is killed by PID at
    the end."""
    token = uuid.uuid4().hex
    root = Path(f"/tmp/dfray-{uuid.uuid4().hex[:8]}")  # short: Ray's socket paths are limited
    nodes: list[RayStartNode] = []

    def make(num_cpus: int = 2, hide: Path | None = None) -> RayStartNode:
        head = nodes[0].address if nodes else None
        node = RayStartNode(root / f"n{len(nodes)}", token, head, num_cpus, hide)
        nodes.append(node)
        return node

    try:
        yield make
    finally:
        for node in reversed(nodes):
            node.kill()
        subprocess.run(["rm", "-rf", str(root)], check=False)
