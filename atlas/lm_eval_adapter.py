"""Runs an lm-evaluation-harness task by name (`lm_eval:gsm8k`, `lm_eval:mmlu`) against the live server, for
GPU users with lm-eval installed and the task's data reachable. Its score joins the quality result as one
more set (unpaired: the gate's paired comparison uses Atlas's own sets)."""

from __future__ import annotations

from typing import Any

from atlas.quality import QualityError, SetScore, wilson

PREFIX = "lm_eval:"
_PREFERRED = ("exact_match,strict-match", "exact_match,flexible-extract", "acc,none", "acc_norm,none",
              "exact_match,none")


def is_lm_eval(name: str) -> bool:
    return name.startswith(PREFIX)


def primary_metric(task_results: dict[str, Any]) -> tuple[str, float]:
    for key in _PREFERRED:
        if isinstance(task_results.get(key), (int, float)):
            return key, float(task_results[key])
    for key, v in task_results.items():
        if isinstance(v, (int, float)) and "stderr" not in key and key != "alias":
            return key, float(v)
    raise QualityError(f"lm-eval returned no numeric metric: {sorted(task_results)}")


def score_from_results(results: dict[str, Any], task: str) -> SetScore:
    """lm-eval's simple_evaluate output -> SetScore (accuracy with a Wilson interval)."""
    try:
        task_results = results["results"][task]
    except (KeyError, TypeError):
        raise QualityError(f"lm-eval returned no results for task {task!r}") from None
    _, acc = primary_metric(task_results)
    n = int(((results.get("n-samples") or {}).get(task) or {}).get("effective", 0))
    if n <= 0:
        raise QualityError(f"lm-eval task {task!r} scored no samples")
    k = round(acc * n)
    lo, hi = wilson(k, n)
    return SetScore(n=n, correct=k, accuracy=k / n, ci_low=lo, ci_high=hi, unextracted=0)


def run_task(name: str, base_url: str, model: str, tokenizer: str | None, limit: int | None,
             max_tokens: int) -> SetScore:
    task = name.removeprefix(PREFIX)
    try:
        import lm_eval
    except ImportError:
        raise QualityError(f"eval set {name!r} needs lm-eval (pip install lm-eval) and its task data online") from None
    args = (f"model={model},base_url={base_url.rstrip('/')}/v1/completions,num_concurrent=8,max_retries=3,"
            f"tokenized_requests=False,max_gen_toks={max_tokens}")
    if tokenizer:
        args += f",tokenizer={tokenizer}"
    try:
        results = lm_eval.simple_evaluate(model="local-completions", model_args=args, tasks=[task], limit=limit,
                                          log_samples=False)
    except Exception as e:  # lm-eval raises many kinds (network, dataset, task lookup); report the cause
        raise QualityError(f"lm-eval task {task!r} failed: {type(e).__name__}: {str(e)[:200]}") from None
    return score_from_results(results, task)
