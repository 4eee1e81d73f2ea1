"""The Engine protocol every inference engine implements, and the errors it raises."""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable


class EngineError(RuntimeError):
    """An engine that would not start or died; `reason` is one line, `log_tail` the last log lines.
    `kind`: refused (the engine rejected its configuration and exited), oom, timeout, port, launch."""

    def __init__(self, reason: str, log_tail: list[str] | None = None, kind: str = "refused"):
        super().__init__(reason)
        self.reason = reason
        self.log_tail = log_tail or []
        self.kind = "oom" if reason.startswith("out of memory") else kind


@runtime_checkable
class Engine(Protocol):
    """A started (or startable) inference server, as the sweep measures it. ProcessEngine implements it; an
    engine's adapter subclasses that with what its server offers (tokenizer, perplexity, cache reset)."""

    @property
    def served_model(self) -> str: ...
    @property
    def fresh_connections(self) -> bool: ...  # one TCP connection per request (servers that close kept-alive ones)
    @property
    def served_tokens_metric(self) -> str | None: ...  # the /metrics counter of generated tokens
    @property
    def started_by_atlas(self) -> bool: ...  # False: an endpoint someone else runs (no energy, traffic checked)
    @property
    def request_headers(self) -> dict[str, str]: ...  # sent with every request (an endpoint's API key)

    @property
    def base_url(self) -> str: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def alive(self) -> bool: ...
    def verify(self) -> str | None: ...  # why what answers is not this launch; None when it is
    def log_tail(self, n: int = 60) -> list[str]: ...
    def provenance(self) -> dict: ...  # type: ignore[type-arg]
    def scrape_metrics(self) -> dict[str, float]: ...
    def count_tokens(self, prompt: str) -> int | None: ...
    def perplexity(self, text: str) -> tuple[float, int] | None: ...
    def reset_prefix_cache(self) -> bool | None: ...


# "ValueError: msg", "torch.OutOfMemoryError: msg", possibly behind a logger prefix; not "raise XError(...)".
_ERROR_LINE = re.compile(r"(?:^|[\s\]])((?:[a-z_]+\.)*[A-Z]\w*(?:Error|Exception)): (\S.*)$|CUDA out of memory.*$")
# Running out of (GPU) memory, including vLLM's "no room left for the KV cache" refusals: these depend on
# gpu_memory_utilization and the batch, not on the numerics, so they are not memoized as a refusal.
_MEMORY = re.compile(r"out of memory|No available memory for the cache blocks|"
                     r"larger than the available KV cache memory", re.I)
_GENERIC = re.compile(r"See root cause above|Engine core initialization failed|^Traceback|"
                      r"Engine process failed to start|APIServer|core\.py.*raise", re.I)


def reason_from_log(lines: list[str], fallback: str) -> str:
    """The most specific error a server log holds: the first exception line that is not a generic wrapper."""
    candidates = []
    for line in lines:
        m = _ERROR_LINE.search(line)
        if not m or _GENERIC.search(line):
            continue
        text = m.group(0).strip()
        if _MEMORY.search(text):
            return "out of memory: " + text[:300]
        candidates.append(text[:300])
    return candidates[0] if candidates else fallback
