"""What requests a load point sends (`load.workload`): a discriminated union of workload kinds, each typed
(pydantic, extra fields forbidden). `fixed` is today's default (every request `load.prompt_tokens` in and
`load.output_tokens` out) and is left out of the run id, so results measured before workloads existed keep
their ids. A workload that reads a file carries the file's sha256 in the run id (filled in when the sweep is
planned), so a changed file is a different measurement. docs/workloads.md has each kind's definition."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from atlas.knobs import MAX_REQUESTS, MAX_SECONDS, MAX_TOKENS
from atlas.models import Frozen

SHA256 = r"^[0-9a-f]{64}$"


class LengthDist(Frozen):
    """A token-length distribution, clipped to [min, max] (and to the model's max_model_len)."""
    dist: Literal["uniform", "normal", "lognormal"]
    mean: float | None = Field(None, gt=0, le=MAX_TOKENS, description="normal/lognormal: the mean in tokens")
    stdev: float | None = Field(None, ge=0, le=MAX_TOKENS, description="normal/lognormal: the stdev in tokens")
    min: int = Field(1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _params(self) -> LengthDist:
        if self.dist == "uniform" and self.max is None:
            raise ValueError("a uniform length needs max (and min, default 1)")
        if self.dist != "uniform" and (self.mean is None or self.stdev is None):
            raise ValueError(f"a {self.dist} length needs mean and stdev")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"length max {self.max} is below min {self.min}")
        return self


class FixedWorkload(Frozen):
    kind: Literal["fixed"] = "fixed"


class DistributionWorkload(Frozen):
    """Word prompts whose lengths are drawn per request from `prompt`; output lengths from `output`."""
    kind: Literal["distribution"] = "distribution"
    prompt: LengthDist
    output: LengthDist
    seed: int = Field(0, ge=0, lt=2**63)


class DatasetWorkload(Frozen):
    """Requests sampled (seeded) from a local file: ShareGPT JSON/JSONL (every user turn a request whose prompt
    is the conversation so far; its output length the next assistant turn's), OpenAI-messages JSONL, or
    `{prompt, output_tokens}` JSONL. Lengths are counted with the served model's tokenizer."""
    kind: Literal["dataset"] = "dataset"
    path: str = Field(description="a local file, or builtin:<name> for atlas/data/workloads/<name>")
    format: Literal["auto", "sharegpt", "messages", "prompts"] = "auto"
    seed: int = Field(0, ge=0, lt=2**63)
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="cap each request's output")
    sha256: str | None = Field(None, pattern=SHA256, description="the file's sha256 (filled in when planned; "
                                                                  "a pinned value is checked)")


class SharedPrefixWorkload(Frozen):
    """`groups` shared system prompts of `prefix_tokens` tokens, `questions_per_group` distinct questions of
    `question_tokens` tokens under each; requests cycle through the groups x questions in a seeded order (the
    shape of `vllm bench serve --dataset-name prefix_repetition`)."""
    kind: Literal["shared_prefix"] = "shared_prefix"
    groups: int = Field(ge=1, le=100_000)
    prefix_tokens: int = Field(ge=1, le=MAX_TOKENS)
    questions_per_group: int = Field(ge=1, le=MAX_REQUESTS)
    question_tokens: int = Field(ge=1, le=MAX_TOKENS)
    output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="default: load.output_tokens")
    seed: int = Field(0, ge=0, lt=2**63)


class SessionsWorkload(Frozen):
    """Multi-turn chat sessions: each turn's prompt is the whole conversation so far (the engine's own earlier
    answers included), so a prefix cache can reuse it. From a file (`path`: ShareGPT or OpenAI-messages, every
    turn kept) or generated (`sessions` x `turns`, user turns of `user_tokens`). Open loop: sessions start at
    load.rate_rps / (mean turns) so that requests arrive at about rate_rps, and a turn is sent `think_time_s`
    (exponential, that mean) after the previous answer ends; closed loop: each stream runs sessions back to
    back with no think time."""
    kind: Literal["sessions"] = "sessions"
    path: str | None = Field(None, description="a local file, or builtin:<name>")
    sha256: str | None = Field(None, pattern=SHA256)
    sessions: int | None = Field(None, ge=1, le=MAX_REQUESTS, description="generated: how many distinct sessions")
    turns: int = Field(3, ge=1, le=1000, description="generated: turns per session")
    system_tokens: int = Field(0, ge=0, le=MAX_TOKENS, description="generated: a system prompt per session")
    user_tokens: int = Field(32, ge=1, le=MAX_TOKENS, description="generated: tokens per user turn")
    output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description=(
        "tokens per answer (generated sessions; default load.output_tokens); a file's sessions use each recorded "
        "answer's length, capped by max_output_tokens"))
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    think_time_s: float = Field(0.0, ge=0.0, le=MAX_SECONDS, description="open loop: mean pause between turns")
    seed: int = Field(0, ge=0, lt=2**63)

    @model_validator(mode="after")
    def _source(self) -> SessionsWorkload:
        if self.path is None and self.sha256 is not None:
            raise ValueError("sha256 pins a sessions file: give path")
        return self


class TraceWorkload(Frozen):
    """Replays a timestamped trace (CSV or JSONL: the Azure LLM inference traces, BurstGPT, Mooncake, or
    Atlas's own `timestamp_s,input_tokens,output_tokens`): arrivals come from the trace (load.mode: trace),
    `time_scale` stretches them (0.5 replays twice as fast); the first load.num_requests rows from `start_s`."""
    kind: Literal["trace"] = "trace"
    path: str = Field(description="a local file, or builtin:<name>")
    format: Literal["auto", "azure", "burstgpt", "mooncake", "atlas"] = "auto"
    time_scale: float | list[Annotated[float, Field(gt=0, le=1000)]] = Field(
        1.0, description="one level per value: arrival times are multiplied by it")
    start_s: float = Field(0.0, ge=0.0, le=1e9, description="skip the trace's first seconds")
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    sha256: str | None = Field(None, pattern=SHA256)
    seed: int = Field(0, ge=0, lt=2**63, description="the prompt texts' words")

    @model_validator(mode="after")
    def _scales(self) -> TraceWorkload:
        scales = self.time_scale if isinstance(self.time_scale, list) else [self.time_scale]
        if not scales or any(s <= 0 or s > 1000 for s in scales):
            raise ValueError("time_scale: each value must be > 0 and <= 1000")
        return self

    def scales(self) -> list[float]:
        return list(self.time_scale) if isinstance(self.time_scale, list) else [self.time_scale]


Workload = Annotated[FixedWorkload | DistributionWorkload | DatasetWorkload | SharedPrefixWorkload |
                     SessionsWorkload | TraceWorkload, Field(discriminator="kind")]

FILE_KINDS = ("dataset", "sessions", "trace")


def describe(w: object) -> str:
    """A short label of a workload for tables and point labels."""
    if w is None or isinstance(w, FixedWorkload):
        return "fixed"
    if isinstance(w, DistributionWorkload):
        return f"distribution ({w.prompt.dist} in, {w.output.dist} out)"
    if isinstance(w, DatasetWorkload):
        return f"dataset {w.path}"
    if isinstance(w, SharedPrefixWorkload):
        return f"shared prefix {w.groups}x{w.prefix_tokens} tok"
    if isinstance(w, SessionsWorkload):
        return f"sessions {w.path}" if w.path else f"sessions {w.turns} turns"
    if isinstance(w, TraceWorkload):
        return f"trace {w.path} x{w.time_scale:g}" if not isinstance(w.time_scale, list) else f"trace {w.path}"
    return type(w).__name__
