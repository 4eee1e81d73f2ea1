"""Runs one llama.cpp library call in its own process (a bad file aborts this process, not the sweep):

    python -m atlas.engines.llamacpp.gguf_worker quantize SRC DST FTYPE_NAME
    python -m atlas.engines.llamacpp.gguf_worker perplexity MODEL TEXT_FILE TYPE_K TYPE_V

Prints one JSON line with the result."""

from __future__ import annotations

import json
import math
import os
import sys
import time


def quantize(src: str, dst: str, ftype_name: str) -> dict:  # type: ignore[type-arg]
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype_name)
    params.allow_requantize = True  # the source may itself be quantized (the embedded Q4_1 file)
    params.nthread = os.cpu_count() or 1
    t0 = time.monotonic()
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({ftype_name}) returned {rc}")
    return {"ftype": ftype_name, "seconds": round(time.monotonic() - t0, 2)}


def perplexity(model: str, text_file: str, type_k: str, type_v: str) -> dict:  # type: ignore[type-arg]
    import llama_cpp
    import numpy as np

    text = open(text_file, encoding="utf-8").read()
    probe = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    tokens = probe.tokenize(text.encode(), add_bos=True)
    del probe
    n = len(tokens)
    llm = llama_cpp.Llama(model_path=model, n_ctx=n + 8, n_batch=512, n_ubatch=512, logits_all=True, seed=0,
                          type_k=getattr(llama_cpp, f"GGML_TYPE_{type_k.upper()}"),
                          type_v=getattr(llama_cpp, f"GGML_TYPE_{type_v.upper()}"),
                          flash_attn=True, verbose=False)
    llm.eval(tokens)
    logits = np.asarray(llm.scores[: n - 1], dtype=np.float64)
    m = logits.max(axis=1, keepdims=True)
    logz = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1)))
    nll = logz - logits[np.arange(n - 1), tokens[1:]]
    return {"perplexity": float(math.exp(nll.mean())), "tokens": n - 1}


def main(argv: list[str]) -> int:
    cmd, *args = argv
    out = quantize(*args) if cmd == "quantize" else perplexity(*args)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
