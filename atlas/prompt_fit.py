"""Prompts of exactly the configured length in the served model's tokenizer: the load generator's word
prompts are about one token a word, so each is counted by the engine (its /tokenize endpoint) and words are
added or dropped until the count is exact."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from atlas.loadgen import PROMPT_HEAD, WORDS, make_prompts

Counter = Callable[[str], "int | None"]
ROUNDS = 12


@dataclass(frozen=True)
class PromptFit:
    """How well the prompts met the length: `exact` of `n` have exactly `target` tokens; `max_off` is the
    largest difference left; `counted` is False when the engine could not count (lengths approximate)."""
    n: int
    target: int
    exact: int
    max_off: int
    counted: bool

    def warning(self) -> str | None:
        if not self.counted:
            return (f"prompt lengths approximate: the engine could not count tokens, so prompts are "
                    f"{self.target} words, not {self.target} tokens")
        if self.exact < self.n:
            return (f"{self.n - self.exact} of {self.n} prompts are not exactly {self.target} tokens "
                    f"(off by up to {self.max_off})")
        return None


def fit_words(words: list[str], target: int, count: Counter, rng: np.random.Generator,
              head: str = PROMPT_HEAD) -> tuple[str, int | None]:
    """`head` and `words`, words added or dropped until `count` says the text is `target` tokens: the text and
    how many tokens it is short (0: exact; None: `count` could not count)."""
    text = head + " ".join(words)
    best: tuple[int, str] | None = None
    for _ in range(ROUNDS):
        n = count(text)
        if n is None:
            return text, None
        off = target - n
        if best is None or abs(off) < abs(best[0]):
            best = (off, text)
        if off == 0:
            return text, 0
        if off > 0:
            words += [WORDS[i] for i in rng.integers(0, len(WORDS), size=off)]
        else:
            # dropping k words removes about k tokens; when one more word overshoots, swap the last one
            drop = min(-off, len(words) - 1)
            if drop <= 0:
                break
            del words[-drop:]
            if abs(off) == 1 and best[0] == 1:
                words[-1] = WORDS[int(rng.integers(0, len(WORDS)))]
        text = head + " ".join(words)
    assert best is not None
    return best[1], best[0]


def exact_prompts(n: int, target: int, seed: int, count: Counter) -> tuple[list[str], PromptFit]:
    """n prompts of `target` tokens as `count` (the served tokenizer) counts them, from the same seeded
    words as make_prompts; where the engine cannot count, make_prompts' word prompts with counted=False."""
    rng = np.random.default_rng(seed)
    base = make_prompts(n, target, seed)
    out, offs = [], []
    for text in base:
        words = text[len(PROMPT_HEAD):].split()
        fitted, off = fit_words(words, target, count, rng)
        if off is None:
            return base, PromptFit(n=n, target=target, exact=0, max_off=0, counted=False)
        out.append(fitted)
        offs.append(off)
    return out, PromptFit(n=n, target=target, exact=sum(o == 0 for o in offs),
                          max_off=max((abs(o) for o in offs), default=0), counted=True)
