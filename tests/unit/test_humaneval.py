"""HumanEval as a quality set: answers become programs, run with the problem's tests in a sandbox that
passes every reference solution and stops what a model's code must not do."""

import os

import pytest

from atlas.humaneval import _can_unshare_net, problems, program, run_program
from atlas.quality import degenerate_kind, load_set, prompt_for, score_item

PROBLEMS = problems()
P0 = PROBLEMS[0]


def test_every_reference_solution_passes_and_a_wrong_one_fails():
    assert len(PROBLEMS) == 164
    failed = [p.task_id for p in PROBLEMS
              if not run_program(program(p.prompt, p.entry_point, p.test, p.prompt + p.canonical_solution))[0]]
    assert failed == []
    ok, why = run_program(program(P0.prompt, P0.entry_point, P0.test, "    return False\n"))
    assert not ok and why == "AssertionError"


def test_answers_become_programs():
    whole = f"Sure:\n```python\nfrom typing import List\n\ndef {P0.entry_point}(numbers, threshold):\n" \
            "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```\nDone."
    assert run_program(program(P0.prompt, P0.entry_point, P0.test, whole)) == (True, "pass")
    body_only = P0.canonical_solution  # a completion of the prompt, as base models answer
    assert run_program(program(P0.prompt, P0.entry_point, P0.test, body_only))[0]
    unterminated = "```python\n" + P0.prompt + P0.canonical_solution  # cut off by max_tokens before ```
    assert run_program(program(P0.prompt, P0.entry_point, P0.test, unterminated))[0]
    assert not run_program(program(P0.prompt, P0.entry_point, P0.test, "I cannot help with that."))[0]


def test_sandbox_stops_loops_writes_memory_and_signals(tmp_path):
    assert run_program("while True:\n    pass\n", timeout_s=1) == (False, "timeout after 1 s")
    target = tmp_path / "escaped"
    ok, why = run_program(f"open({str(target)!r}, 'w').write('x')")
    if os.geteuid() == 0:  # runs as nobody: none of our files are its to write
        assert not ok and "PermissionError" in why and not target.exists()
    assert run_program("x = bytearray(8 * 2**30)")[1] == "MemoryError"
    assert not run_program("import os\nos.kill(1, 9)")[0]


def test_sandbox_has_no_network():
    if not _can_unshare_net():
        pytest.skip("this kernel does not let us unshare the network namespace")
    ok, why = run_program("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)")
    assert not ok and "Network is unreachable" in why


def test_quality_set_scores_code_and_indentation_is_not_degenerate():
    items = load_set("humaneval")
    assert items[0].kind == "code" and items[0].entry_point == P0.entry_point
    assert "```python" in prompt_for(items[0]) and P0.prompt in prompt_for(items[0])
    answer = f"```python\n{P0.prompt}{P0.canonical_solution}```"
    assert score_item(items[0], answer) == ("pass", True)
    assert degenerate_kind(answer) is None
    assert degenerate_kind("ha ha ha ha ha ha ha ha") == "repetition"
