import pytest

from atlas.config import GateSpec
from atlas.quality import (
    EvalItem,
    ItemOutcome,
    QualityError,
    apply_gate,
    build_result,
    builtin_sets,
    compare,
    degenerate_kind,
    extract_choice,
    extract_number,
    load_set,
    mcnemar_exact,
    read_jsonl,
    score_outputs,
    wilson,
)


@pytest.mark.parametrize("text,want", [
    ("The answer is 42.", "42"), ("#### 1,234", "1234"), ("Answer: $15", "15"), ("so 3 + 4 = 7", "7"),
    ("Answer: -5", "-5"), ("\\boxed{12}", "12"), ("x = 2.50 dollars", "2.5"), ("First 3 then 8.\nAnswer: 11", "11"),
    ("no digits here", None), ("Answer: 7\n\nThe answer is 9", "9"),
])
def test_extract_number(text, want):
    assert extract_number(text) == want


@pytest.mark.parametrize("text,want", [
    ("Answer: B", "B"), ("answer is (c)", "C"), ("D) Paris", "D"), ("B", "B"), ("**A**", "A"),
    ("I pick option C because", "C"), ("The capital is Paris.", "B"), ("A or B, hard to say", None),
    ("Answer: A\nAnswer: D", "D"),
])
def test_extract_choice(text, want):
    assert extract_choice(text, ["Rome", "Paris", "Berlin", "Madrid"]) == want


@pytest.mark.parametrize("text,kind", [
    ("", "empty"), ("   \n", "empty"), ("the the the the the the the the", "repetition"),
    ("ab" * 30, "repetition"), ("\ufffd\ufffd\x00\x01##\ufffd\ufffd", "garbage"),
    ("Seven days make a week.\nAnswer: 7", None),
])
def test_degenerate_kind(text, kind):
    assert degenerate_kind(text) == kind


def test_shipped_sets_have_200_items_and_valid_answers():
    total = 0
    for name in builtin_sets():
        items = load_set(name)
        total += len(items)
        for it in items:
            if it.kind == "choice":
                assert it.answer in "ABCD"[: len(it.choices)] and len(set(it.choices)) == len(it.choices)
            else:
                assert extract_number(it.answer) == it.answer
    assert total >= 200


def test_jsonl_adapter_errors_name_the_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"id": "a", "kind": "numeric", "question": "1+1?", "answer": "2"}\n{"id": 3}\n')
    with pytest.raises(QualityError, match=r"x.jsonl:2: bad eval item"):
        read_jsonl(p)
    with pytest.raises(QualityError, match="unknown eval set"):
        load_set("nope")


def test_wilson_and_mcnemar():
    lo, hi = wilson(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(10, 0) == pytest.approx(2 * 0.5 ** 10)


def _result(correct_flags, outputs=None, ppl=None):
    items = {"s": [EvalItem(id=str(i), kind="numeric", question=f"q{i}", answer="1") for i in range(len(correct_flags))]}
    outs = {"s": outputs or [f"Answer: {1 if c else 2}" for c in correct_flags]}
    outcomes, scores = score_outputs(items, outs)
    return build_result(outcomes, scores, (ppl, 100) if ppl else None, "cfg")


def test_gate_garbage_out_degraded_kept():
    base = _result([True] * 80 + [False] * 20, ppl=8.0)
    garbage = _result([False] * 100, outputs=["\ufffd\x00#\ufffd"] * 100, ppl=9.0)
    garbage = apply_gate(garbage.model_copy(update={"comparison": compare(garbage, base, "b")}), GateSpec(), base)
    assert not garbage.gate_passed and any("degenerate" in r for r in garbage.gate_reasons)
    slight = _result([True] * 75 + [False] * 25, ppl=8.2)
    slight = apply_gate(slight.model_copy(update={"comparison": compare(slight, base, "b")}), GateSpec(), base)
    assert slight.gate_passed and slight.comparison.accuracy_delta == pytest.approx(-0.05)
    worse = _result([True] * 40 + [False] * 60, ppl=8.0)
    worse = apply_gate(worse.model_copy(update={"comparison": compare(worse, base, "b")}), GateSpec(), base)
    assert not worse.gate_passed and any("McNemar" in r for r in worse.gate_reasons)
    ppl = _result([True] * 80 + [False] * 20, ppl=30.0)
    ppl = apply_gate(ppl.model_copy(update={"comparison": compare(ppl, base, "b")}), GateSpec(), base)
    assert not ppl.gate_passed and any("perplexity" in r for r in ppl.gate_reasons)


def test_agreement_counts_identical_answers():
    a = _result([True, True, False, False])
    b = _result([True, False, False, True])
    c = compare(b, a, "a")
    assert c.agreement == 0.5 and c.discordant == (1, 1)
    assert isinstance(a.items[0], ItemOutcome)


def test_lm_eval_results_become_a_set_score():
    from atlas.lm_eval_adapter import primary_metric, score_from_results

    res = {"results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.75,
                                 "exact_match_stderr,strict-match": 0.04, "exact_match,flexible-extract": 0.8}},
           "n-samples": {"gsm8k": {"original": 1319, "effective": 200}}}
    sc = score_from_results(res, "gsm8k")
    assert (sc.n, sc.correct, sc.accuracy) == (200, 150, 0.75) and sc.ci_low < 0.75 < sc.ci_high
    assert primary_metric({"acc,none": 0.5, "acc_stderr,none": 0.1}) == ("acc,none", 0.5)
    with pytest.raises(QualityError, match="no results for task"):
        score_from_results({"results": {}}, "mmlu")


def test_lm_eval_missing_is_a_clear_error():
    import importlib.util

    from atlas.lm_eval_adapter import run_task

    if importlib.util.find_spec("lm_eval") is not None:
        pytest.skip("lm-eval is installed here")
    with pytest.raises(QualityError, match="needs lm-eval"):
        run_task("lm_eval:gsm8k", "http://127.0.0.1:1", "m", None, 10, 32)
