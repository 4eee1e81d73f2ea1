"""The engine's own counters against what the client received, and prompts fitted to a tokenizer."""

from atlas.config import LoadPoint
from atlas.loadgen import LoadRun, RequestRecord
from atlas.point_checks import served_check
from atlas.prompt_fit import exact_prompts

M = "vllm:generation_tokens_total"


def _runs(tokens: int) -> list[LoadRun]:
    recs = [RequestRecord(index=0, phase="measure", scheduled_s=0.0, output_tokens=tokens, status="ok")]
    return [LoadRun(point=LoadPoint(concurrency=1), records=recs, started_at_unix=0, wall_s=1, offered_rate_rps=None)]


def test_an_engine_that_served_nothing_makes_the_point_invalid():
    ok, why = served_check(M, {M: 100.0}, {M: 100.0}, _runs(500))
    assert ok is False and "rose by 0 while the client received 500 tokens" in why
    assert served_check(M, {M: 100.0}, {M: 600.0}, _runs(500)) == (True, None)
    ok, why = served_check(M, {}, {}, _runs(500))
    assert ok is None and "could not be read" in why
    assert served_check(None, {}, {}, _runs(500)) == (None, None)


def test_prompts_are_fitted_to_a_tokenizer_that_splits_some_words():
    # a tokenizer where every word of more than five letters is two tokens
    def count(text: str) -> int:
        return sum(2 if len(w) > 5 else 1 for w in text.split())

    prompts, fit = exact_prompts(40, 64, seed=3, count=count)
    assert fit.counted and fit.exact == 40 and fit.warning() is None
    assert all(count(p) == 64 for p in prompts)
    again, _ = exact_prompts(40, 64, seed=3, count=count)
    assert again == prompts  # reproducible from the seed


def test_an_engine_that_cannot_count_gives_word_prompts_and_says_so():
    prompts, fit = exact_prompts(4, 32, seed=0, count=lambda text: None)
    assert len(prompts) == 4 and not fit.counted and "approximate" in fit.warning()
