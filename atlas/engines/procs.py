"""Which processes are an engine launch of Atlas's, and who listens on a port, read from Linux's /proc.

Every engine Atlas starts carries a per-launch token in its environment (`ATLAS_ENGINE_LAUNCH`), which every
process it spawns inherits (vLLM's API server, EngineCore and workers alike). That token, not a process group
or a port, is what identifies the launch: a process group ends with its leader, and a port answers for
whoever bound it.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import time
from pathlib import Path

LAUNCH_ENV = "ATLAS_ENGINE_LAUNCH"
PROC = Path("/proc")


def _pids() -> list[int]:
    try:
        return [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]
    except OSError:
        return []


def launch_pids(token: str) -> set[int]:
    """The live processes whose environment carries this launch token (unreadable ones are not ours)."""
    marker = f"{LAUNCH_ENV}={token}".encode()
    out = set()
    for pid in _pids():
        try:
            env = (PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            out.add(pid)
    return out


def cmdline(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)[:120] or "?"


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes in LISTEN state on this TCP port (IPv4 and IPv6, any local address)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    return inodes


def listener_pids(port: int) -> set[int] | None:
    """The processes holding a listening socket on this TCP port; None where /proc cannot tell (not Linux).
    A listener whose owner this user cannot see shows as pid -1."""
    if not (PROC / "net" / "tcp").exists():
        return None
    inodes = _listening_inodes(port)
    if not inodes:
        return set()
    wanted = {f"socket:[{i}]" for i in inodes}
    owners: set[int] = set()
    for pid in _pids():
        fd_dir = PROC / str(pid) / "fd"
        try:
            for fd in os.scandir(fd_dir):
                try:
                    if os.readlink(fd.path) in wanted:
                        owners.add(pid)
                        break
                except OSError:
                    continue
        except OSError:
            continue
    return owners or {-1}


def describe(pids: set[int]) -> str:
    shown = [f"pid {p} ({cmdline(p)})" if p > 0 else "a process this user cannot see" for p in sorted(pids)]
    return ", ".join(shown[:3])


def bind_error(host: str, port: int) -> str | None:
    """Why this address cannot be bound now (None: it can), in words that name the cause."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                holders = listener_pids(port)
                who = f" by {describe(holders)}" if holders else ""
                return f"port {port} on {host} is already in use{who}"
            if e.errno == errno.EACCES:
                return f"port {port} on {host}: permission denied"
            if e.errno == errno.EADDRNOTAVAIL:
                return f"address {host} is not available on this host"
            return f"cannot bind {host}:{port}: {e.strerror}"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (another process can still take it before the engine binds: the
    engine's listener is verified afterwards)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def kill_launch(token: str, term_wait_s: float = 20.0, kill_wait_s: float = 10.0) -> set[int]:
    """SIGTERM every process of this launch, SIGKILL what is left after `term_wait_s`; returns the pids that
    were found. Processes are found by their token, so a reaped leader does not hide its children."""
    found: set[int] = set()
    for sig, wait_s in ((signal.SIGTERM, term_wait_s), (signal.SIGKILL, kill_wait_s)):
        pids = launch_pids(token)
        if not pids:
            break
        found |= pids
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _alive(launch_pids(token)):
            time.sleep(0.1)
    return found


def _alive(pids: set[int]) -> bool:
    """Whether any of these is still running (a zombie waiting for its parent is not)."""
    for pid in pids:
        try:
            state = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            return True
    return False


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, what tells it from a later one that
    got the same pid."""
    try:
        return int((PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _alive({pid})
