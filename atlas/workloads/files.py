"""Readers of workload files: conversations (ShareGPT JSON/JSONL, OpenAI-messages JSONL), prompt lists
(`{prompt, output_tokens}` JSONL) and arrival traces (Azure LLM inference CSV, BurstGPT CSV, Mooncake JSONL,
Atlas's own CSV/JSONL). Every fault is a WorkloadError of one line naming the file and, where it is one
line's fault, the line."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from atlas.config import SpecError
from atlas.models import read_text

BUILTIN_DIR = Path(__file__).resolve().parents[1] / "data" / "workloads"
USER_ROLES = {"human": "user", "user": "user"}
ASSISTANT_ROLES = {"gpt": "assistant", "chatgpt": "assistant", "bard": "assistant", "assistant": "assistant",
                   "model": "assistant", "bing": "assistant"}
SYSTEM_ROLES = {"system": "system"}
ROLES = {**USER_ROLES, **ASSISTANT_ROLES, **SYSTEM_ROLES}


class WorkloadError(SpecError):
    """A workload that cannot be used: one line naming the file (and line) and what is wrong."""


Turn = tuple[str, str]  # (role: system | user | assistant, text)


@dataclass(frozen=True)
class Conversation:
    turns: list[Turn]
    line: int  # where it starts in the file (1-based; JSON arrays: the item's number)


@dataclass(frozen=True)
class PromptRow:
    prompt: str
    output_tokens: int | None
    line: int


@dataclass(frozen=True)
class TraceRow:
    t_s: float
    input_tokens: int
    output_tokens: int
    line: int
    hash_ids: tuple[int, ...] = ()  # Mooncake: the prompt's 512-token blocks (equal ids: a shared prefix)


def resolve(path: str) -> Path:
    """A workload file: builtin:<name> is a file Atlas ships (atlas/data/workloads/), else a local path."""
    if path.startswith("builtin:"):
        name = path.removeprefix("builtin:")
        p = BUILTIN_DIR / name
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or not p.is_file():
            known = ", ".join(sorted(f.name for f in BUILTIN_DIR.glob("*") if f.is_file())) or "none"
            raise WorkloadError(f"{path}: no such shipped workload (shipped: {known})")
        return p
    p = Path(path).expanduser()
    if not p.exists():
        raise WorkloadError(f"{path}: workload file not found")
    if not p.is_file():
        raise WorkloadError(f"{path}: not a file")
    return p


def sha256_of(p: Path) -> str:
    """The file's sha256 (computed once while its size and modification time stay the same: every capacity
    rate point pins its workload again)."""
    st = p.stat()
    return _sha256(str(p.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    p = Path(path)
    h = hashlib.sha256()
    with p.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _text(p: Path) -> str:
    text = read_text(p, "workload", WorkloadError)
    if not text.strip():
        raise WorkloadError(f"{p}: empty workload file")
    return text


def _json_items(p: Path) -> list[tuple[int, object]]:
    """(line, item): a JSON array's items (numbered from 1) or a JSONL file's lines."""
    text = _text(p)
    stripped = "\n".join(line for line in text.splitlines() if not line.startswith("#")).lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except ValueError as e:
            raise WorkloadError(f"{p}: line {getattr(e, 'lineno', '?')}: malformed JSON: {getattr(e, 'msg', e)}") \
                from None
        return list(enumerate(data, 1))
    out: list[tuple[int, object]] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):  # blank lines and comment lines (a file's header)
            continue
        try:
            out.append((i, json.loads(line)))
        except ValueError as e:
            what = "malformed JSON" if out else "not a JSON or JSONL file"
            raise WorkloadError(f"{p}: line {i}: {what} ({getattr(e, 'msg', e)}); expected one JSON object per "
                                f"line") from None
    return out


def sniff(item: object) -> str | None:
    """Which conversation/prompt format one item is in."""
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("conversations"), list):
        return "sharegpt"
    if isinstance(item.get("messages"), list):
        return "messages"
    if isinstance(item.get("prompt"), str):
        return "prompts"
    return None


def _turns(p: Path, line: int, raw: list[object], role_key: str, text_key: str) -> list[Turn]:
    turns: list[Turn] = []
    for m in raw:
        if not isinstance(m, dict) or not isinstance(m.get(text_key), str):
            raise WorkloadError(f"{p}: line {line}: a turn without a text {text_key!r}")
        role = ROLES.get(str(m.get(role_key, "")).lower())
        if role is None:
            raise WorkloadError(f"{p}: line {line}: unknown role {m.get(role_key)!r} (known: {', '.join(ROLES)})")
        turns.append((role, m[text_key]))
    if not any(r == "user" for r, _ in turns):
        raise WorkloadError(f"{p}: line {line}: a conversation with no user turn")
    return turns


def read_items(p: Path, fmt: str = "auto") -> tuple[str, list[Conversation] | list[PromptRow]]:
    """A dataset file's conversations or prompt rows, and the format they were read in."""
    items = _json_items(p)
    if not items:
        raise WorkloadError(f"{p}: empty workload file")
    if fmt == "auto":
        fmt = sniff(items[0][1]) or ""
        if not fmt:
            raise WorkloadError(f"{p}: line {items[0][0]}: not a known dataset format (ShareGPT 'conversations', "
                                f"OpenAI 'messages', or {{'prompt', 'output_tokens'}})")
    convs: list[Conversation] = []
    rows: list[PromptRow] = []
    for line, item in items:
        if sniff(item) != fmt:
            raise WorkloadError(f"{p}: line {line}: not a {fmt} item (the file's first item is {fmt})")
        assert isinstance(item, dict)
        if fmt == "sharegpt":
            convs.append(Conversation(_turns(p, line, item["conversations"], "from", "value"), line))
        elif fmt == "messages":
            convs.append(Conversation(_turns(p, line, item["messages"], "role", "content"), line))
        else:
            out = item.get("output_tokens")
            if out is not None and (not isinstance(out, int) or isinstance(out, bool) or out < 1):
                raise WorkloadError(f"{p}: line {line}: output_tokens must be a positive integer, got {out!r}")
            rows.append(PromptRow(item["prompt"], out, line))
    return fmt, (convs if fmt != "prompts" else rows)


def read_conversations(p: Path, fmt: str = "auto") -> list[Conversation]:
    fmt, items = read_items(p, fmt)
    if fmt == "prompts":
        raise WorkloadError(f"{p}: sessions need conversations (ShareGPT or OpenAI messages), not prompt rows")
    return items  # type: ignore[return-value]


# --- traces ---------------------------------------------------------------------------------------------------

_AZURE_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(\d+))?")
CSV_LAYOUTS = {  # format: (time column, input column, output column)
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "atlas": ("timestamp_s", "input_tokens", "output_tokens"),
}
JSON_LAYOUTS = {"mooncake": ("timestamp", "input_length", "output_length"),
                "atlas": ("timestamp_s", "input_tokens", "output_tokens")}


def _azure_time(s: str) -> float:
    m = _AZURE_TS.match(s.strip())
    if not m:
        raise ValueError(f"not a timestamp: {s!r}")
    base = datetime.fromisoformat(m.group(1).replace("T", " ")).replace(tzinfo=UTC)  # no DST jumps
    frac = float("0." + m.group(2)) if m.group(2) else 0.0
    return base.timestamp() + frac


def _int(v: object, what: str) -> int:
    if isinstance(v, bool):
        raise ValueError(f"{what} is not an integer: {v!r}")
    n = int(float(v)) if isinstance(v, str) else int(v)  # type: ignore[call-overload]
    if n < 0 or (isinstance(v, float) and v != n):
        raise ValueError(f"{what} must be a non-negative integer, got {v!r}")
    return n


def read_trace(p: Path, fmt: str = "auto") -> tuple[str, list[TraceRow]]:
    """A trace's rows with times in seconds from its first row; timestamps must not go backwards."""
    text = _text(p)
    lines = text.splitlines()
    skip = next((i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")), len(lines))
    first = lines[skip].lstrip()[:1] if skip < len(lines) else ""
    rows: list[TraceRow] = []
    if first == "{":
        items = _json_items(p)
        head = items[0][1] if isinstance(items[0][1], dict) else {}
        if fmt == "auto":
            fmt = next((f for f, cols in JSON_LAYOUTS.items() if all(c in head for c in cols)), "")
        if fmt not in JSON_LAYOUTS:
            raise WorkloadError(f"{p}: line {items[0][0]}: not a known JSONL trace (Mooncake: timestamp, "
                                f"input_length, output_length; Atlas: timestamp_s, input_tokens, output_tokens)")
        tk, ik, ok = JSON_LAYOUTS[fmt]
        scale = 1e-3 if fmt == "mooncake" else 1.0  # Mooncake's timestamps are milliseconds
        for line, item in items:
            try:
                assert isinstance(item, dict), "not a JSON object"
                hashes = tuple(int(h) for h in item.get("hash_ids", []) or [])
                rows.append(TraceRow(float(item[tk]) * scale, _int(item[ik], ik), _int(item[ok], ok), line, hashes))
            except (KeyError, ValueError, TypeError, AssertionError) as e:
                raise WorkloadError(f"{p}: line {line}: bad trace row ({type(e).__name__}: {e})") from None
    else:
        reader = csv.DictReader(lines[skip:])
        header = reader.fieldnames or []
        if fmt == "auto":
            fmt = next((f for f, cols in CSV_LAYOUTS.items() if all(c in header for c in cols)), "")
        if fmt not in CSV_LAYOUTS or not all(c in header for c in CSV_LAYOUTS[fmt]):
            raise WorkloadError(f"{p}: line {skip + 1}: not a known trace header {header[:6]} (Azure: TIMESTAMP, "
                                f"ContextTokens, GeneratedTokens; BurstGPT: Timestamp, Request tokens, Response "
                                f"tokens; Atlas: timestamp_s, input_tokens, output_tokens)")
        tk, ik, ok = CSV_LAYOUTS[fmt]
        for i, rec in enumerate(reader, skip + 2):
            try:
                t = _azure_time(rec[tk]) if fmt == "azure" else float(rec[tk])
                rows.append(TraceRow(t, _int(rec[ik], ik), _int(rec[ok], ok), i))
            except (KeyError, ValueError, TypeError) as e:
                raise WorkloadError(f"{p}: line {i}: bad trace row ({e})") from None
    if not rows:
        raise WorkloadError(f"{p}: a trace with no rows")
    for a, b in zip(rows, rows[1:], strict=False):
        if b.t_s < a.t_s:
            raise WorkloadError(f"{p}: line {b.line}: timestamps go backwards ({b.t_s - rows[0].t_s:.6g} s after "
                                f"the first row, earlier than line {a.line}'s {a.t_s - rows[0].t_s:.6g} s)")
    t0 = rows[0].t_s
    return fmt, [TraceRow(r.t_s - t0, r.input_tokens, r.output_tokens, r.line, r.hash_ids) for r in rows]
