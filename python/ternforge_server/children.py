"""The upstream processes the controller starts, whichever engine they run (serving.py for the built-in
engine, engine_vllm.py for vLLM): spawning them so none outlives the controller, a loopback port for each,
and waiting for their /health."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Children:
    """The upstream processes this controller started: each in its own session (so a signal to its group
    reaches what it starts, e.g. vLLM's engine core), started through `exec-child`, which asks the kernel to
    SIGTERM it when the thread that spawned it dies (PR_SET_PDEATHSIG), so even a SIGKILLed controller
    leaves no upstream behind. `stop_all` ends them: SIGTERM to the group, then SIGKILL."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen] = []
        self.closing = False

    def spawn(self, argv: list[str], env: dict | None = None, **popen: Any) -> subprocess.Popen:
        with self.lock:
            if self.closing:
                raise RuntimeError("the server is shutting down")
            proc = subprocess.Popen([sys.executable, "-m", "ternforge_server", "exec-child", "--", *argv],
                                    env=env, start_new_session=True, stdin=subprocess.DEVNULL, **popen)
            self.procs.append(proc)
            return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 15.0) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the group still holds
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.wait(5)

    def stop_all(self) -> None:
        with self.lock:
            self.closing = True
            procs = list(self.procs)
        for p in procs:
            self.stop(p)


def loopback_status(port: int, path: str, timeout: float = 2.0) -> int | None:
    """The HTTP status of GET path on 127.0.0.1:port, or None when nothing answers (a plain socket: the
    shipped server imports no network client library)."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            head = b""
            while b"\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    return None
                head += chunk
        parts = head.split(b"\r\n", 1)[0].split()
        return int(parts[1]) if len(parts) >= 2 and parts[0].startswith(b"HTTP/") else None
    except (OSError, ValueError):
        return None


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float) -> tuple[bool, str]:
    """(True, '') once GET /health on the loopback port answers 200; (False, why) when the process exits or
    the time runs out."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        code = proc.poll()
        if code is not None:
            return False, f"exited with code {code}"
        if loopback_status(port, "/health") == 200:
            return True, ""
        time.sleep(0.2)
    return False, f"not ready within {timeout:.0f} s"


def child_env() -> dict:
    """This environment with the server package first on PYTHONPATH, for a child `python -m ternforge_server`."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
