"""Runs the quality eval sets and the perplexity passage through a live OpenAI-compatible server
(greedy, temperature 0) and returns raw outputs; scoring lives in atlas.quality."""

from __future__ import annotations

import asyncio
import math

import aiohttp

from atlas.quality import EvalItem, QualityError, prompt_for


async def _chat(session: aiohttp.ClientSession, url: str, model: str, prompt: str, max_tokens: int,
                gate: asyncio.Semaphore) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0.0, "seed": 0}
    async with gate, session.post(url, json=body) as resp:
        if resp.status != 200:
            raise QualityError(f"eval request failed: HTTP {resp.status}: {(await resp.text())[:200]}")
        data = await resp.json()
    try:
        return str(data["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        raise QualityError(f"eval answer has no choices[0].message.content: {str(data)[:200]}") from None


async def generate_async(base_url: str, model: str, sets: dict[str, list[EvalItem]], max_tokens: int,
                         concurrency: int, timeout_s: float = 900.0,
                         headers: dict[str, str] | None = None) -> dict[str, list[str]]:
    url = base_url.rstrip("/") + "/v1/chat/completions"
    gate = asyncio.Semaphore(max(1, concurrency))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s), headers=headers) as session:
        out = {}
        for name, items in sets.items():
            out[name] = list(await asyncio.gather(*(_chat(session, url, model, prompt_for(it), max_tokens, gate)
                                                    for it in items)))
    return out


def generate(base_url: str, model: str, sets: dict[str, list[EvalItem]], max_tokens: int,
             concurrency: int, headers: dict[str, str] | None = None) -> dict[str, list[str]]:
    try:
        return asyncio.run(generate_async(base_url, model, sets, max_tokens, concurrency, headers=headers))
    except aiohttp.ClientError as e:
        raise QualityError(f"eval requests failed: {type(e).__name__}: {e}") from None


async def _perplexity_async(base_url: str, model: str, text: str) -> tuple[float, int]:
    url = base_url.rstrip("/") + "/v1/completions"
    body = {"model": model, "prompt": text, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                raise QualityError(f"perplexity request failed: HTTP {resp.status}: {(await resp.text())[:200]}")
            data = await resp.json()
    entries = (data.get("choices") or [{}])[0].get("prompt_logprobs")
    if not entries:
        raise QualityError("the server returned no prompt_logprobs (perplexity needs vLLM's prompt_logprobs)")
    logps = []
    for entry in entries[1:]:  # the first token has no context
        if not entry:
            continue
        if len(entry) != 1:
            raise QualityError("prompt_logprobs=0 returned several candidates for one position")
        (info,) = entry.values()
        logps.append(float(info["logprob"]))
    if not logps:
        raise QualityError("the perplexity passage produced no scored tokens")
    return math.exp(-sum(logps) / len(logps)), len(logps)


def perplexity(base_url: str, model: str, text: str) -> tuple[float, int]:
    """exp(mean negative log-likelihood) of `text` under the served model, and the token count scored."""
    try:
        return asyncio.run(_perplexity_async(base_url, model, text))
    except aiohttp.ClientError as e:
        raise QualityError(f"perplexity request failed: {type(e).__name__}: {e}") from None
