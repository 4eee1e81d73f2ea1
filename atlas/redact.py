"""Secrets kept out of everything Atlas writes: command-line values of secret-looking flags, secret-looking
environment values, and those values wherever they reappear in free text (an engine's log, a reason)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MASK = "***"
SECRET_NAME = re.compile(r"api[-_]?key|token|secret|passw(?:or)?d|credential|auth|private[-_]?key", re.I)
_MIN_SECRET = 4  # shorter values would mask ordinary words


def secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def redact_argv(argv: list[str]) -> list[str]:
    """`--api-key X` and `--api-key=X` (and any flag whose name looks secret) with the value masked."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _value = arg.partition("=")
        if arg.startswith("-") and secret_name(flag):
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if secret_name(k) else v) for k, v in env.items()}


def _argv_secrets(argv: list[str]) -> set[str]:
    out = set()
    for arg, masked in zip(argv, redact_argv(argv), strict=True):
        if arg != masked:
            out.add(arg if masked == MASK else arg.partition("=")[2])
    return out


@dataclass(frozen=True)
class Redactor:
    """Masks a known set of secret values in text and command lines."""

    values: frozenset[str] = frozenset()

    @classmethod
    def of(cls, argv: list[str], env: dict[str, str]) -> Redactor:
        """The secrets of this command line and environment (and the process's own secret-looking variables)."""
        found = _argv_secrets(argv)
        found |= {v for k, v in {**os.environ, **env}.items() if secret_name(k)}
        return cls(frozenset(v for v in found if len(v) >= _MIN_SECRET))

    def text(self, s: str) -> str:
        for v in sorted(self.values, key=len, reverse=True):
            s = s.replace(v, MASK)
        return s

    def argv(self, argv: list[str]) -> list[str]:
        return [self.text(a) for a in redact_argv(argv)]

    def scrub_file(self, path: Path) -> None:
        """Masks the secrets in a file the engine wrote (its log), in place."""
        if not self.values:
            return
        try:
            raw = path.read_text(errors="replace")
        except OSError:
            return
        clean = self.text(raw)
        if clean != raw:
            path.write_text(clean)
