"""The guard of one engine launch: a small process, in a session of its own, that stops every process of the
launch when Atlas ends without stopping it (SIGKILL, a crash, an interrupt mid-launch).

It reads its standard input, a pipe whose only writer is the Atlas process that started it: end of file
means Atlas is gone (the kernel closes the pipe whatever way Atlas died), and the launch is stopped; a `q`
means Atlas stopped the engine itself and the guard just exits. Run as
`python -m atlas.engines.guard TOKEN GRACE_S [PIDFILE]`; the token is given on the command line, never in the guard's
own environment, so it does not count itself among the launch's processes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from atlas.engines.procs import LAUNCH_ENV, kill_launch


def start_guard(token: str, pidfile: Path | None, grace_s: float = 20.0) -> subprocess.Popen[bytes]:
    """Starts the guard of `token`; write b"q" to its stdin (and close it) once the engine is stopped."""
    import os

    env = {k: v for k, v in os.environ.items() if k != LAUNCH_ENV}
    argv = [sys.executable, "-m", "atlas.engines.guard", token, str(grace_s), *([str(pidfile)] if pidfile else [])]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, start_new_session=True)


def main(argv: list[str]) -> int:
    token, grace_s = argv[0], float(argv[1])
    pidfile = Path(argv[2]) if len(argv) > 2 else None
    word = sys.stdin.buffer.read(1)
    if word == b"q":
        return 0
    kill_launch(token, term_wait_s=grace_s)  # Atlas is gone
    if pidfile is not None:
        pidfile.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
