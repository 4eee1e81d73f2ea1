"""The request list of one load point's repeat, planned from its workload before any request is sent: every
prompt text, its token count in the served tokenizer (or an estimate where the engine cannot count), its
output length, its arrival (traces) or its session and turn (sessions). The load generator sends exactly
this list and the simulator predicts from it, so both see the same traffic. Same workload, seed and
tokenizer, same list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from atlas.config import LoadPoint
from atlas.loadgen import WORDS, fixed_plan, make_prompts
from atlas.prompt_fit import exact_prompts, fit_words
from atlas.workloads.files import (
    Conversation,
    PromptRow,
    TraceRow,
    WorkloadError,
    read_conversations,
    read_items,
    read_trace,
    resolve,
    sha256_of,
)
from atlas.workloads.spec import (
    DatasetWorkload,
    DistributionWorkload,
    FixedWorkload,
    LengthDist,
    SessionsWorkload,
    SharedPrefixWorkload,
    TraceWorkload,
    Workload,
)

Counter = Callable[[str], "int | None"]
MOONCAKE_BLOCK = 512  # tokens per hash id in Mooncake's traces
SESSION_TURN = "User: {text}\nAssistant:"  # how a chat turn is laid out in a completion prompt


@dataclass
class PlannedRequest:
    prompt: str  # sessions: this turn's user text only (the conversation so far is put before it when sent)
    output_tokens: int
    prompt_tokens: int | None  # as the served tokenizer counts it (sessions: an estimate of the whole prompt)
    session: int | None = None
    turn: int | None = None
    think_s: float = 0.0  # sessions, open loop: the pause after the previous turn's answer
    arrival_s: float | None = None  # traces: when it is sent, seconds after the run starts
    shared_tokens: int = 0  # of its prompt, tokens an earlier request of the list already sent (structural reuse)
    system: str = ""  # sessions: the session's system text (turn 0 sends it)


@dataclass
class RequestPlan:
    kind: str
    requests: list[PlannedRequest]
    counted: bool = True  # token counts come from the served tokenizer (else estimates)
    dropped: int = 0  # requests left out: prompt + output longer than max_model_len
    warnings: list[str] = field(default_factory=list)

    @property
    def sessions(self) -> bool:
        return self.kind == "sessions"

    def prompt_lengths(self) -> list[int]:
        return [r.prompt_tokens or 0 for r in self.requests]

    def structural_reuse(self) -> float | None:
        """The fraction of the prompt tokens sent that an earlier prompt (or answer) of the list holds: the
        prefix-cache hit rate an unbounded cache would reach."""
        total = sum(r.prompt_tokens or 0 for r in self.requests)
        return sum(r.shared_tokens for r in self.requests) / total if total else None


class WorkloadInfo(BaseModel):
    """What a point's workload planned, recorded with its result (the workload's kind, parameters, file sha256
    and seed are in config.load.workload; these are the lengths that came of them)."""
    model_config = ConfigDict(extra="forbid")
    kind: str
    requests: int  # per repeat
    sessions: int | None = None
    mean_prompt_tokens: float | None = None
    mean_output_tokens: float | None = None
    max_prompt_tokens: int | None = None
    counted: bool = True  # by the served tokenizer (else estimated)
    dropped: int = 0
    structural_reuse: float | None = None


def plan_info(plan: RequestPlan) -> WorkloadInfo:
    ins = [r.prompt_tokens for r in plan.requests if r.prompt_tokens is not None]
    outs = [r.output_tokens for r in plan.requests]
    sessions = len({r.session for r in plan.requests}) if plan.sessions else None
    return WorkloadInfo(kind=plan.kind, requests=len(plan.requests), sessions=sessions,
                        mean_prompt_tokens=sum(ins) / len(ins) if ins else None,
                        mean_output_tokens=sum(outs) / len(outs) if outs else None,
                        max_prompt_tokens=max(ins) if ins else None, counted=plan.counted, dropped=plan.dropped,
                        structural_reuse=plan.structural_reuse())


def estimate_tokens(text: str) -> int:
    """A token count where the engine cannot count: about 4 characters a token for English BPE vocabularies."""
    return max(1, round(len(text) / 4))


class _Texts:
    """Seeded word texts of an exact token count in the served tokenizer (about one token a word)."""

    def __init__(self, count: Counter | None, rng: np.random.Generator):
        self.count, self.rng = count, rng
        self.counted = count is not None

    def make(self, n: int, head: str = "") -> tuple[str, int]:
        """A text of `n` tokens (the head included; prompt_fit.fit_words); without a tokenizer, of `n` words."""
        words = [WORDS[i] for i in self.rng.integers(0, len(WORDS), size=max(1, n - len(head.split())))]
        if self.count is None or not self.counted:
            return head + " ".join(words), len(head.split()) + len(words)
        text, short = fit_words(words, n, self.count, self.rng, head)
        if short is None:
            self.counted = False
            return text, n
        return text, n - short

    def tokens(self, text: str, synthetic: bool = False) -> int:
        """`text`'s tokens in the served tokenizer; without one an estimate: a word a token for Atlas's own word
        texts (`synthetic`), about 4 characters a token for prose."""
        if self.count is not None and self.counted:
            got = self.count(text)
            if got is not None:
                return got
            self.counted = False
        return max(1, len(text.split())) if synthetic else estimate_tokens(text)


def draw_lengths(d: LengthDist, n: int, rng: np.random.Generator, cap: int) -> list[int]:
    hi = min(d.max or cap, cap)
    if d.dist == "uniform":
        x = rng.integers(d.min, max(d.min, hi) + 1, size=n).astype(float)
    elif d.dist == "normal":
        assert d.mean is not None and d.stdev is not None
        x = rng.normal(d.mean, d.stdev, size=n)
    else:  # lognormal with this mean and stdev of the lengths themselves
        assert d.mean is not None and d.stdev is not None
        s2 = np.log1p((d.stdev / d.mean) ** 2)
        x = rng.lognormal(np.log(d.mean) - s2 / 2, np.sqrt(s2), size=n)
    return [int(v) for v in np.clip(np.rint(x), d.min, max(d.min, hi))]


@lru_cache(maxsize=32)
def _items(path: str, fmt: str, mtime: float) -> tuple[str, list[Conversation] | list[PromptRow]]:
    return read_items(Path(path), fmt)


@lru_cache(maxsize=32)
def _conversations(path: str, mtime: float) -> list[Conversation]:
    return read_conversations(Path(path))


@lru_cache(maxsize=32)
def _trace(path: str, fmt: str, mtime: float) -> tuple[str, list[TraceRow]]:
    return read_trace(Path(path), fmt)


def _key(path: str | None) -> tuple[str, float]:
    assert path is not None
    p = resolve(path)
    return str(p), p.stat().st_mtime


def dataset_items(w: DatasetWorkload) -> tuple[str, list[Conversation] | list[PromptRow]]:
    """A dataset file's format and items (cached while the file is unchanged); raises WorkloadError."""
    path, mtime = _key(w.path)
    return _items(path, w.format, mtime)


def session_conversations(w: SessionsWorkload) -> list[Conversation]:
    return _conversations(*_key(w.path))


def trace_rows(w: TraceWorkload) -> list[TraceRow]:
    path, mtime = _key(w.path)
    return _trace(path, w.format, mtime)[1]


def read_workload_file(w: DatasetWorkload | SessionsWorkload | TraceWorkload) -> None:
    """Reads (and caches) a file workload's file: a bad one raises WorkloadError naming it."""
    if isinstance(w, DatasetWorkload):
        dataset_items(w)
    elif isinstance(w, SessionsWorkload):
        session_conversations(w)
    else:
        trace_rows(w)


def chat_prompt(turns: list[tuple[str, str]], upto: int) -> str:
    """The completion prompt of a conversation's user turn `upto`: every earlier turn, then that one."""
    parts = []
    for role, text in turns[:upto + 1]:
        if role == "system":
            parts.append(text + "\n")
        elif role == "user":
            parts.append(SESSION_TURN.format(text=text))
        else:
            parts.append(" " + text + "\n")
    return "".join(parts)


def plan_requests(point: LoadPoint, n: int, seed_offset: int, max_model_len: int,
                  count: Counter | None) -> RequestPlan:
    """The `n` requests of one repeat (`seed_offset`: the repeat) of `point`; `count`: the served tokenizer
    (None: estimates, as the simulator plans without an engine)."""
    w = point.workload
    seed = point.prompt_seed + seed_offset
    if w is None:
        if count is None:
            prompts, counted = make_prompts(n, point.prompt_tokens, seed), False
        else:
            prompts, fit = exact_prompts(n, point.prompt_tokens, seed, count)
            counted = fit.counted
            warning = fit.warning()
        return fixed_plan(prompts, point, counted, [warning] if count and warning else [])
    assert not isinstance(w, FixedWorkload)  # normalized to None by LoadShape
    rng = np.random.default_rng([w.seed, seed])
    texts = _Texts(count, rng)
    if isinstance(w, DistributionWorkload):
        return _distribution(w, n, rng, texts, max_model_len)
    if isinstance(w, SharedPrefixWorkload):
        return _shared_prefix(w, n, rng, texts, point.output_tokens, max_model_len)
    if isinstance(w, DatasetWorkload):
        return _dataset(w, n, rng, texts, point.output_tokens, max_model_len)
    if isinstance(w, SessionsWorkload):
        return _sessions(w, n, rng, texts, point, max_model_len)
    assert isinstance(w, TraceWorkload)
    return _trace_plan(w, n, rng, texts, max_model_len)


def _distribution(w: DistributionWorkload, n: int, rng: np.random.Generator, texts: _Texts,
                  max_model_len: int) -> RequestPlan:
    outs = draw_lengths(w.output, n, rng, max_model_len - 1)
    ins = [min(p, max_model_len - o) for p, o in
           zip(draw_lengths(w.prompt, n, rng, max_model_len - 1), outs, strict=True)]
    reqs = []
    for p, o in zip(ins, outs, strict=True):
        text, got = texts.make(p)
        reqs.append(PlannedRequest(text, o, got))
    return RequestPlan("distribution", reqs, counted=texts.counted)


def _shared_prefix(w: SharedPrefixWorkload, n: int, rng: np.random.Generator, texts: _Texts, default_out: int,
                   max_model_len: int) -> RequestPlan:
    out = w.output_tokens or default_out
    if w.prefix_tokens + w.question_tokens + out > max_model_len:
        raise WorkloadError(f"shared_prefix: prefix_tokens + question_tokens + output = "
                            f"{w.prefix_tokens + w.question_tokens + out} exceeds max_model_len {max_model_len}")
    prefixes = [texts.make(w.prefix_tokens, head=f"System prompt {g}: ")[0] for g in range(w.groups)]
    pairs = [(g, q) for g in range(w.groups) for q in range(w.questions_per_group)]
    order = rng.permutation(len(pairs))
    reqs, seen, seen_groups, questions = [], set(), set(), {}
    for k in range(n):
        g, q = pairs[int(order[k % len(pairs)])]
        if (g, q) not in questions:
            questions[(g, q)] = texts.make(w.question_tokens, head="\nQuestion: ")[0]
        prompt = prefixes[g] + questions[(g, q)]
        tokens = texts.tokens(prompt, synthetic=True)
        shared = tokens if (g, q) in seen else (w.prefix_tokens if g in seen_groups else 0)
        seen.add((g, q))
        seen_groups.add(g)
        reqs.append(PlannedRequest(prompt, out, tokens, shared_tokens=min(shared, tokens)))
    return RequestPlan("shared_prefix", reqs, counted=texts.counted)


def _fits(prompt_tokens: int, out: int, max_model_len: int) -> bool:
    return prompt_tokens + out <= max_model_len


def _dataset(w: DatasetWorkload, n: int, rng: np.random.Generator, texts: _Texts, default_out: int,
             max_model_len: int) -> RequestPlan:
    _, items = dataset_items(w)
    candidates: list[tuple[str, str | int | None]] = []  # (prompt, the answer text or its length)
    for item in items:
        if isinstance(item, PromptRow):
            candidates.append((item.prompt, item.output_tokens))
            continue
        for i, (role, _) in enumerate(item.turns):
            if role == "user":
                nxt = item.turns[i + 1] if i + 1 < len(item.turns) else None
                candidates.append((chat_prompt(item.turns, i), nxt[1] if nxt and nxt[0] == "assistant" else None))
    order = rng.permutation(len(candidates))
    reqs: list[PlannedRequest] = []
    dropped, k = 0, 0
    while len(reqs) < n and k < 10 * n + len(candidates):
        prompt, answer = candidates[int(order[k % len(order)])]
        k += 1
        out = answer if isinstance(answer, int) else (texts.tokens(answer) if answer else default_out)
        out = min(out, w.max_output_tokens or out)
        tokens = texts.tokens(prompt)
        if not _fits(tokens, out, max_model_len):
            dropped += 1
            continue
        reqs.append(PlannedRequest(prompt, max(1, out), tokens))
    if not reqs:
        raise WorkloadError(f"{w.path}: every request is longer than max_model_len {max_model_len} "
                            f"({dropped} dropped)")
    warnings = [f"{dropped} dataset requests dropped: prompt + output longer than max_model_len {max_model_len}"] \
        if dropped else []
    if len(reqs) < n:
        warnings.append(f"the dataset gave {len(reqs)} requests that fit, not {n}")
    return RequestPlan("dataset", reqs, counted=texts.counted, dropped=dropped, warnings=warnings)


def _generated_sessions(w: SessionsWorkload, n: int, texts: _Texts, default_out: int) -> list[list[tuple[str, str]]]:
    count = w.sessions or -(-n // w.turns)
    out = []
    for s in range(count):
        turns: list[tuple[str, str]] = []
        if w.system_tokens:
            turns.append(("system", texts.make(w.system_tokens, head=f"Session {s}. ")[0]))
        for _ in range(w.turns):
            turns.append(("user", texts.make(w.user_tokens)[0]))
            turns.append(("assistant", str(w.output_tokens or default_out)))
        out.append(turns)
    return out


def _sessions(w: SessionsWorkload, n: int, rng: np.random.Generator, texts: _Texts, point: LoadPoint,
              max_model_len: int) -> RequestPlan:
    generated = w.path is None
    if generated:
        convs = _generated_sessions(w, n, texts, point.output_tokens)
    else:
        convs = [c.turns for c in session_conversations(w)]
    order = rng.permutation(len(convs))
    reqs: list[PlannedRequest] = []
    dropped, k, sid = 0, 0, 0
    while len(reqs) < n and k < 10 * n + len(convs):
        turns = convs[int(order[k % len(order)])]
        k += 1
        system = "".join(t + "\n" for r, t in turns if r == "system")
        context = texts.tokens(system, generated) if system else 0
        turn = 0
        for i, (role, text) in enumerate(turns):
            if role != "user" or len(reqs) >= n:
                continue
            nxt = turns[i + 1] if i + 1 < len(turns) else None
            if generated:
                out = int(nxt[1]) if nxt else point.output_tokens
            else:
                out = texts.tokens(nxt[1]) if nxt and nxt[0] == "assistant" else point.output_tokens
            out = min(out, w.max_output_tokens or out)
            user = SESSION_TURN.format(text=text)
            need = context + texts.tokens(user, generated)
            if not _fits(need, out, max_model_len):
                dropped += 1  # this turn and the rest of its session: the conversation no longer fits
                break
            think = float(rng.exponential(w.think_time_s)) if w.think_time_s and turn else 0.0
            reqs.append(PlannedRequest(text, max(1, out), need, session=sid, turn=turn, think_s=think,
                                       shared_tokens=context if turn else 0, system=system if turn == 0 else ""))
            context = need + out + 1
            turn += 1
        sid += 1
    if not reqs:
        raise WorkloadError(f"{w.path or 'sessions'}: no session turn fits max_model_len {max_model_len}")
    warnings = [f"{dropped} session turns (and the rest of their sessions) dropped: the conversation grew longer "
                f"than max_model_len {max_model_len}"] if dropped else []
    return RequestPlan("sessions", reqs, counted=texts.counted, dropped=dropped, warnings=warnings)


def _block_text(h: int, tokens: int) -> str:
    r = np.random.default_rng([h, 7])
    return " ".join(WORDS[i] for i in r.integers(0, len(WORDS), size=tokens))


def _trace_plan(w: TraceWorkload, n: int, rng: np.random.Generator, texts: _Texts,
                max_model_len: int) -> RequestPlan:
    scale = w.scales()[0]
    rows = [r for r in trace_rows(w) if r.t_s >= w.start_s]
    reqs: list[PlannedRequest] = []
    dropped, seen_blocks = 0, set()
    for r in rows:
        if len(reqs) >= n:
            break
        out = max(1, min(r.output_tokens, w.max_output_tokens or r.output_tokens))
        if not _fits(max(1, r.input_tokens), out, max_model_len):
            dropped += 1
            continue
        shared = 0
        if r.hash_ids:  # Mooncake: equal block ids are the same text, so the trace's prefix sharing is real
            blocks, left = [], max(1, r.input_tokens)
            for h in r.hash_ids:
                take = min(MOONCAKE_BLOCK, left)
                if take <= 0:
                    break
                blocks.append(_block_text(h, take))
                if h in seen_blocks and len(blocks) * MOONCAKE_BLOCK - take == shared:
                    shared += take
                seen_blocks.add(h)
                left -= take
            prompt = " ".join(blocks)
            tokens = texts.tokens(prompt, synthetic=True)
        else:
            prompt, tokens = texts.make(max(1, r.input_tokens))
        reqs.append(PlannedRequest(prompt, out, tokens, arrival_s=(r.t_s - w.start_s) * scale,
                                   shared_tokens=min(shared, tokens)))
    if not reqs:
        raise WorkloadError(f"{w.path}: no trace row from start_s {w.start_s:g} fits max_model_len {max_model_len}")
    warnings = [f"{dropped} trace rows dropped: input + output longer than max_model_len {max_model_len}"] \
        if dropped else []
    if len(reqs) < n:
        warnings.append(f"the trace has {len(reqs)} rows from start_s, not the {n} requests asked for")
    return RequestPlan("trace", reqs, counted=texts.counted, dropped=dropped, warnings=warnings)


def pinned(w: Workload | None) -> Workload | None:
    """A file workload with its file's sha256 filled in (it enters the run id) after the file was read: a file
    that is missing, empty, malformed or changed since it was pinned is named here, before any engine starts."""
    if not isinstance(w, DatasetWorkload | SessionsWorkload | TraceWorkload) or w.path is None:
        return w
    digest = sha256_of(resolve(w.path))
    if w.sha256 and w.sha256 != digest:
        raise WorkloadError(f"{w.path}: the file's sha256 is {digest[:16]}..., not the pinned {w.sha256[:16]}...")
    read_workload_file(w)
    return w.model_copy(update={"sha256": digest})
