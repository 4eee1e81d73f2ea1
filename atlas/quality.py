"""Quality: offline eval sets, exact scoring, accuracy with Wilson intervals, paired comparison with the
baseline config (agreement, McNemar), a degenerate-output detector and the quality gate."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from scipy import stats

from atlas.config import GateSpec


class QualityError(ValueError):
    pass


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvalItem(_M):
    id: str
    kind: Literal["numeric", "choice", "code"]
    question: str
    answer: str  # code: the reference solution (not shown to the model)
    choices: list[str] | None = None
    test: str | None = None  # code: the tests that decide it, run in a sandbox
    entry_point: str | None = None  # code: the function the tests call


class ItemOutcome(_M):
    set: str
    id: str
    output: str
    extracted: str | None
    correct: bool
    degenerate: str | None = None  # empty | repetition | garbage


class SetScore(_M):
    n: int
    correct: int
    accuracy: float
    ci_low: float
    ci_high: float
    unextracted: int


class Comparison(_M):
    baseline_label: str
    accuracy_delta: float
    agreement: float = Field(description="fraction of items whose extracted answer equals the baseline's")
    text_agreement: float = Field(description="fraction of items whose whole output equals the baseline's")
    mcnemar_p: float
    discordant: tuple[int, int] = Field(description="(baseline right & this wrong, baseline wrong & this right)")
    perplexity_ratio: float | None = None


class QualityResult(_M):
    n: int
    correct: int
    accuracy: float
    ci_low: float
    ci_high: float
    sets: dict[str, SetScore]
    perplexity: float | None = None
    perplexity_tokens: int | None = None
    degenerate_fraction: float
    unextracted_fraction: float
    degenerate_reasons: list[str] = []
    comparison: Comparison | None = None
    gate_passed: bool = True
    gate_reasons: list[str] = []
    evaluated_on: str | None = Field(None, description="label of the server whose outputs these are")
    items: list[ItemOutcome] = []


# ---------------------------------------------------------------------------------------------- eval sets
def builtin_sets() -> list[str]:
    folder = resources.files("atlas") / "data" / "evalsets"
    return sorted(p.name.removesuffix(".jsonl") for p in folder.iterdir() if p.name.endswith(".jsonl"))


def read_jsonl(path: Path | str, origin: str | None = None) -> list[EvalItem]:
    origin = origin or str(path)
    items = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise QualityError(f"{origin}: cannot read eval set: {e.strerror}") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = EvalItem.model_validate(json.loads(line))
        except (ValueError, ValidationError) as e:
            raise QualityError(f"{origin}:{i}: bad eval item: {str(e).splitlines()[0]}") from None
        if item.kind == "choice" and (not item.choices or len(item.choices) > 26):
            raise QualityError(f"{origin}:{i}: choice item {item.id} needs 1-26 choices")
        items.append(item)
    if not items:
        raise QualityError(f"{origin}: eval set is empty")
    return items


def load_set(name: str) -> list[EvalItem]:
    """A built-in set by name ('arith', 'mc', 'humaneval') or a local JSONL file path in the same shape."""
    if name.endswith(".jsonl"):
        return read_jsonl(name)
    if name == "humaneval":
        from atlas.humaneval import HumanEvalError, problems

        try:
            return [EvalItem(id=p.task_id, kind="code", question=p.prompt, answer=p.canonical_solution,
                             test=p.test, entry_point=p.entry_point) for p in problems()]
        except HumanEvalError as e:
            raise QualityError(str(e)) from None
    path = resources.files("atlas") / "data" / "evalsets" / f"{name}.jsonl"
    if not path.is_file():
        raise QualityError(f"unknown eval set {name!r}; built in: {', '.join(builtin_sets())}, humaneval, "
                           "or a .jsonl path")
    return read_jsonl(Path(str(path)), origin=f"eval set {name}")


def passage() -> str:
    return (resources.files("atlas") / "data" / "passage.txt").read_text()


# ---------------------------------------------------------------------------------------------- prompts
def prompt_for(item: EvalItem) -> str:
    if item.kind == "code":
        return ("Complete this Python function. Reply with the whole function in one ```python code block.\n\n"
                f"```python\n{item.question}```")
    if item.kind == "numeric":
        return (f"Solve this problem. Finish with a line 'Answer: <number>'.\n\nQuestion: {item.question}")
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    opts = "\n".join(f"{letters[i]}) {c}" for i, c in enumerate(item.choices or []))
    return (f"Choose the correct option. Finish with a line 'Answer: <letter>'.\n\nQuestion: {item.question}\n{opts}")


# ---------------------------------------------------------------------------------------------- scoring
_NUM = r"-?\$?\d[\d,]*(?:\.\d+)?"
_NUM_PATTERNS = [re.compile(r"####\s*(" + _NUM + ")"),
                 re.compile(r"answer\s*(?:is|:|=)?\s*[:=]?\s*\**\s*(" + _NUM + ")", re.I),
                 re.compile(r"\\boxed\{\s*(" + _NUM + r")\s*\}")]


def _norm_number(s: str) -> str | None:
    s = s.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        v = float(s)
    except ValueError:
        return None
    return str(int(v)) if v == int(v) else f"{v:g}"


def extract_number(text: str) -> str | None:
    """GSM8K-style: '#### N', 'answer is N' / 'Answer: N', '\\boxed{N}'; else the last number in the text."""
    for pat in _NUM_PATTERNS:
        found = pat.findall(text)
        if found:
            return _norm_number(found[-1])
    nums = re.findall(_NUM, text)
    return _norm_number(nums[-1]) if nums else None


def extract_choice(text: str, choices: list[str]) -> str | None:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(choices)]
    cls = f"[{letters}]"
    pats = [rf"answer\s*(?:is|:)?\s*[:\-]?\s*\**\(?({cls})\b(?![a-z])",
            rf"^\s*\**\(?({cls})[\).:](?:\s|$)",
            rf"\b(?:option|choice)\s+\(?({cls})\b"]
    for p in pats:
        m = re.findall(p, text, flags=re.I | re.M)
        if m:
            return m[-1].upper()
    stripped = text.strip().strip("*().:").strip()
    if len(stripped) == 1 and stripped.upper() in letters:
        return stripped.upper()
    hits = [i for i, c in enumerate(choices) if re.search(rf"(?<!\w){re.escape(c)}(?!\w)", text, flags=re.I)]
    return letters[hits[0]] if len(hits) == 1 else None


def score_item(item: EvalItem, output: str) -> tuple[str | None, bool]:
    if item.kind == "code":  # extracted: "pass", or why the program failed (its last error line, or timeout)
        from atlas.humaneval import program, run_program

        passed, why = run_program(program(item.question, item.entry_point or "", item.test or "", output))
        return why, passed
    if item.kind == "numeric":
        got = extract_number(output)
        return got, got is not None and got == _norm_number(item.answer)
    got = extract_choice(output, item.choices or [])
    return got, got is not None and got == item.answer.strip().upper()


# ---------------------------------------------------------------------------------------------- degenerate
def degenerate_kind(text: str) -> str | None:
    """Why an output is degenerate (empty, a repetition loop, non-text garbage), or None."""
    t = text.strip()
    if not t:
        return "empty"
    printable = sum(ch.isprintable() or ch in "\n\t" for ch in t)
    odd = sum(1 for ch in t if ch == "\ufffd" or (not ch.isascii() and not ch.isalpha()))
    if printable / len(t) < 0.9 or odd / len(t) > 0.3:
        return "garbage"
    # a short unit repeated 6+ times in a row; runs of white space (code's indentation) are no repetition
    if re.search(r"(.{1,40}?)\1{5,}", re.sub(r"\s+", " ", t), flags=re.S):
        return "repetition"
    words = t.split()
    if len(words) >= 16:
        grams = list(zip(words, words[1:], words[2:], strict=False))
        if len(set(grams)) / len(grams) < 0.35:
            return "repetition"
    return None


# ---------------------------------------------------------------------------------------------- statistics
def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts."""
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(min(b, c), b + c, 0.5).pvalue)


def score_outputs(sets: dict[str, list[EvalItem]], outputs: dict[str, list[str]]) -> tuple[list[ItemOutcome],
                                                                                            dict[str, SetScore]]:
    outcomes: list[ItemOutcome] = []
    scores = {}
    for name, items in sets.items():
        outs = outputs[name]
        if len(outs) != len(items):
            raise QualityError(f"eval set {name}: {len(outs)} outputs for {len(items)} items")
        set_out = []
        for item, out in zip(items, outs, strict=True):
            got, ok = score_item(item, out)
            set_out.append(ItemOutcome(set=name, id=item.id, output=out, extracted=got, correct=ok,
                                       degenerate=degenerate_kind(out)))
        k = sum(o.correct for o in set_out)
        lo, hi = wilson(k, len(set_out))
        scores[name] = SetScore(n=len(set_out), correct=k, accuracy=k / len(set_out), ci_low=lo, ci_high=hi,
                                unextracted=sum(o.extracted is None for o in set_out))
        outcomes += set_out
    return outcomes, scores


def build_result(outcomes: list[ItemOutcome], scores: dict[str, SetScore], perplexity: tuple[float, int] | None,
                 evaluated_on: str) -> QualityResult:
    """Overall accuracy pools every set (external sets such as lm-eval tasks included, by their counts)."""
    if not outcomes and not scores:
        raise QualityError("no eval items were scored")
    n = sum(sc.n for sc in scores.values())
    k = sum(sc.correct for sc in scores.values())
    lo, hi = wilson(k, n)
    items = max(len(outcomes), 1)
    degenerate = [o for o in outcomes if o.degenerate]
    kinds = Counter(o.degenerate for o in degenerate if o.degenerate)
    return QualityResult(
        n=n, correct=k, accuracy=k / n, ci_low=lo, ci_high=hi, sets=scores,
        perplexity=perplexity[0] if perplexity else None, perplexity_tokens=perplexity[1] if perplexity else None,
        degenerate_fraction=len(degenerate) / items,
        unextracted_fraction=sum(o.extracted is None for o in outcomes) / items,
        degenerate_reasons=[f"{v} {kind}" for kind, v in sorted(kinds.items())],
        evaluated_on=evaluated_on, items=outcomes)


def compare(result: QualityResult, baseline: QualityResult, baseline_label: str) -> Comparison:
    base = {(o.set, o.id): o for o in baseline.items}
    pairs = [(base[(o.set, o.id)], o) for o in result.items if (o.set, o.id) in base]
    if not pairs:
        raise QualityError("no eval items in common with the baseline")
    b = sum(1 for x, y in pairs if x.correct and not y.correct)
    c = sum(1 for x, y in pairs if not x.correct and y.correct)
    ratio = None
    if result.perplexity and baseline.perplexity:
        ratio = result.perplexity / baseline.perplexity
    n = len(pairs)
    return Comparison(baseline_label=baseline_label,
                      accuracy_delta=(sum(y.correct for _, y in pairs) - sum(x.correct for x, _ in pairs)) / n,
                      agreement=sum(x.extracted == y.extracted for x, y in pairs) / n,
                      text_agreement=sum(x.output.strip() == y.output.strip() for x, y in pairs) / n,
                      mcnemar_p=mcnemar_exact(b, c), discordant=(b, c), perplexity_ratio=ratio)


def apply_gate(result: QualityResult, gate: GateSpec, baseline: QualityResult | None) -> QualityResult:
    """Mark the result failed when its outputs are degenerate or clearly worse than the baseline's."""
    reasons = []
    if result.degenerate_fraction > gate.max_degenerate_fraction:
        reasons.append(f"degenerate outputs: {result.degenerate_fraction:.0%} of items "
                       f"({', '.join(result.degenerate_reasons)}) > {gate.max_degenerate_fraction:.0%}")
    if baseline is not None and result.unextracted_fraction >= 0.9 and baseline.unextracted_fraction < 0.5:
        reasons.append(f"answer format collapse: no answer found in {result.unextracted_fraction:.0%} of items "
                       f"(baseline {baseline.unextracted_fraction:.0%})")
    cmp = result.comparison
    if cmp is not None:
        if -cmp.accuracy_delta > gate.max_accuracy_drop and cmp.mcnemar_p < gate.alpha:
            reasons.append(f"accuracy {cmp.accuracy_delta:+.1%} vs baseline (McNemar p={cmp.mcnemar_p:.3g}) "
                           f"beyond the {gate.max_accuracy_drop:.0%} tolerance")
        if cmp.perplexity_ratio is not None and cmp.perplexity_ratio > gate.max_perplexity_ratio:
            reasons.append(f"perplexity x{cmp.perplexity_ratio:.2f} of the baseline's > x{gate.max_perplexity_ratio:g}")
    if result.perplexity is not None and not math.isfinite(result.perplexity):
        reasons.append("perplexity is not finite")
    return result.model_copy(update={"gate_passed": not reasons, "gate_reasons": reasons})
