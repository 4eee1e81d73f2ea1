"""Workload files, specs and request plans: each loader on small files in each format (written here), the
one-line errors a bad file gets, token accounting per workload kind, and run ids."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atlas.config import LoadPoint, SpecError, parse_spec
from atlas.knobs import LoadMode
from atlas.plan import load_points
from atlas.workloads.files import WorkloadError, read_items, read_trace, resolve
from atlas.workloads.requests import SESSION_TURN, chat_prompt, draw_lengths, plan_requests
from atlas.workloads.spec import LengthDist


def words(text):
    return len(text.split())


def point(workload, **kw):
    return LoadPoint(mode=kw.pop("mode", LoadMode.CLOSED), concurrency=kw.pop("concurrency", 2), workload=workload,
                     **kw)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


SHAREGPT = [{"id": "a", "conversations": [{"from": "system", "value": "Be brief."},
                                          {"from": "human", "value": "What is a lighthouse?"},
                                          {"from": "gpt", "value": "A tower with a light that guides ships."},
                                          {"from": "human", "value": "Who keeps it?"},
                                          {"from": "gpt", "value": "A keeper."}]},
            {"id": "b", "conversations": [{"from": "human", "value": "Name a sea."},
                                          {"from": "gpt", "value": "The North Sea."}]}]


# --- loaders ---------------------------------------------------------------------------------------------------

def test_sharegpt_json_and_jsonl_keep_every_turn(tmp_path):
    for name, text in (("s.json", json.dumps(SHAREGPT)), ("s.jsonl", "\n".join(json.dumps(c) for c in SHAREGPT))):
        fmt, convs = read_items(resolve(write(tmp_path, name, text)))
        assert fmt == "sharegpt" and len(convs) == 2
        assert [r for r, _ in convs[0].turns] == ["system", "user", "assistant", "user", "assistant"]


def test_messages_and_prompt_rows(tmp_path):
    msgs = write(tmp_path, "m.jsonl", json.dumps({"messages": [{"role": "user", "content": "hi there"},
                                                               {"role": "assistant", "content": "hello"}]}))
    fmt, convs = read_items(resolve(msgs))
    assert fmt == "messages" and convs[0].turns == [("user", "hi there"), ("assistant", "hello")]
    rows = write(tmp_path, "p.jsonl", '{"prompt": "one two three", "output_tokens": 7}\n{"prompt": "four"}\n')
    fmt, items = read_items(resolve(rows))
    assert fmt == "prompts" and [(r.prompt, r.output_tokens) for r in items] == [("one two three", 7), ("four", None)]


@pytest.mark.parametrize("name,text,match", [
    ("e.jsonl", "\n  \n", r"e\.jsonl: empty workload file"),
    ("u.jsonl", '{"text": "x"}\n', r"u\.jsonl: line 1: not a known dataset format"),
    ("n.jsonl", '{"prompt": "a"}\n' + json.dumps({"conversations": [{"from": "gpt", "value": "x"}]}) + "\n",
     r"n\.jsonl: line 2: not a prompts item"),
    ("t.jsonl", json.dumps({"conversations": [{"from": "gpt", "value": "only an answer"}]}) + "\n",
     r"t\.jsonl: line 1: a conversation with no user turn"),
    ("m.jsonl", '{"prompt": "a"}\n{"prompt": \n', r"m\.jsonl: line 2: malformed JSON"),
    ("r.jsonl", json.dumps({"messages": [{"role": "robot", "content": "x"}]}), r"r\.jsonl: line 1: unknown role"),
    ("o.jsonl", '{"prompt": "a", "output_tokens": -3}', r"o\.jsonl: line 1: output_tokens must be a positive"),
])
def test_bad_dataset_files_name_the_file_and_line(tmp_path, name, text, match):
    with pytest.raises(WorkloadError, match=match) as e:
        read_items(resolve(write(tmp_path, name, text)))
    assert "\n" not in str(e.value)


def test_missing_file_and_unknown_builtin(tmp_path):
    with pytest.raises(WorkloadError, match=r"nope\.jsonl: workload file not found"):
        resolve(str(tmp_path / "nope.jsonl"))
    with pytest.raises(WorkloadError, match=r"builtin:nope: no such shipped workload \(shipped: .*chat-sessions"):
        resolve("builtin:nope")


TRACES = {
    "azure.csv": ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                  "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.2000000,879,20\n", "azure"),
    "burst.csv": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,"
                  "Conversation log\n45,ChatGPT,1087,241,1328,Conversation log\n45.5,GPT-4,417,276,693,API log\n",
                  "burstgpt"),
    "moon.jsonl": ('{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}\n'
                   '{"timestamp": 31332, "input_length": 7000, "output_length": 8, "hash_ids": [46, 48]}\n'
                   '{"timestamp": 31432, "input_length": 100, "output_length": 8}\n', "mooncake"),
    "own.csv": ("timestamp_s,input_tokens,output_tokens\n0.5,10,4\n0.75,20,5\n2.0,30,6\n", "atlas"),
}


@pytest.mark.parametrize("name", sorted(TRACES))
def test_trace_layouts(tmp_path, name):
    text, fmt = TRACES[name]
    got, rows = read_trace(resolve(write(tmp_path, name, text)))
    assert got == fmt and len(rows) == 3 and rows[0].t_s == 0.0
    assert all(b.t_s >= a.t_s for a, b in zip(rows, rows[1:], strict=False))
    expect_dt = {"azure": 4.314579, "burstgpt": 40.0, "mooncake": 3.85, "atlas": 0.25}[fmt]
    assert rows[1].t_s == pytest.approx(expect_dt, abs=1e-6)
    if fmt == "mooncake":
        assert rows[0].hash_ids == (46, 47) and rows[2].hash_ids == ()


def test_trace_that_goes_backwards_names_the_line(tmp_path):
    p = write(tmp_path, "bad.csv", "timestamp_s,input_tokens,output_tokens\n1,10,4\n3,10,4\n2,10,4\n")
    with pytest.raises(WorkloadError, match=r"bad\.csv: line 4: timestamps go backwards"):
        read_trace(resolve(p))
    p = write(tmp_path, "cols.csv", "time,in,out\n1,2,3\n")
    with pytest.raises(WorkloadError, match=r"cols\.csv: line 1: not a known trace header"):
        read_trace(resolve(p))
    p = write(tmp_path, "neg.csv", "timestamp_s,input_tokens,output_tokens\n1,-10,4\n")
    with pytest.raises(WorkloadError, match=r"neg\.csv: line 2: bad trace row"):
        read_trace(resolve(p))


# --- plans: token accounting -----------------------------------------------------------------------------------

def test_fixed_plan_is_the_old_prompts():
    from atlas.prompt_fit import exact_prompts

    p = LoadPoint(concurrency=2, prompt_tokens=40, output_tokens=8)
    plan = plan_requests(p, 6, 1, 2048, words)
    assert [r.prompt for r in plan.requests] == exact_prompts(6, 40, 1, words)[0]
    assert all(r.prompt_tokens == 40 and r.output_tokens == 8 for r in plan.requests)


@settings(max_examples=25, deadline=None)
@given(mean=st.floats(5, 400), stdev=st.floats(0, 300), lo=st.integers(1, 50), cap=st.integers(60, 500),
       dist=st.sampled_from(["normal", "lognormal", "uniform"]))
def test_drawn_lengths_stay_in_bounds(mean, stdev, lo, cap, dist):
    import numpy as np

    d = LengthDist(dist=dist, mean=mean, stdev=stdev, min=lo, max=lo + 100)
    got = draw_lengths(d, 200, np.random.default_rng(0), cap)
    assert all(lo <= g <= max(lo, min(lo + 100, cap)) for g in got)


def test_distribution_plan_counts_every_prompt_in_the_served_tokenizer():
    w = {"kind": "distribution", "prompt": {"dist": "lognormal", "mean": 80, "stdev": 60, "max": 300},
         "output": {"dist": "uniform", "min": 4, "max": 40}}
    plan = plan_requests(point(w), 50, 0, 256, words)
    assert len({r.prompt_tokens for r in plan.requests}) > 10  # really a distribution
    for r in plan.requests:
        assert r.prompt_tokens == words(r.prompt)  # counted, exact
        assert 4 <= r.output_tokens <= 40 and r.prompt_tokens + r.output_tokens <= 256
    again = plan_requests(point(w), 50, 0, 256, words)
    assert [r.prompt for r in again.requests] == [r.prompt for r in plan.requests]  # seeded
    other = plan_requests(point(w), 50, 1, 256, words)
    assert [r.prompt for r in other.requests] != [r.prompt for r in plan.requests]  # each repeat its own


def test_shared_prefix_plan_structure_and_reuse():
    w = {"kind": "shared_prefix", "groups": 3, "prefix_tokens": 50, "questions_per_group": 4,
         "question_tokens": 10, "output_tokens": 5}
    plan = plan_requests(point(w), 12, 0, 2048, words)
    prefixes = {r.prompt.split("\nQuestion:")[0] for r in plan.requests}
    assert len(prefixes) == 3 and all(words(p) == 50 for p in prefixes)
    assert len({r.prompt for r in plan.requests}) == 12 and all(r.output_tokens == 5 for r in plan.requests)
    # 12 prompts of 60 tokens; each group's first request shares nothing, the other 9 share their 50-token prefix
    assert plan.structural_reuse() == pytest.approx(9 * 50 / (12 * 60))


def test_shared_prefix_longer_than_the_model_is_refused():
    w = {"kind": "shared_prefix", "groups": 1, "prefix_tokens": 2000, "questions_per_group": 1,
         "question_tokens": 40, "output_tokens": 64}
    with pytest.raises(WorkloadError, match="exceeds max_model_len 2048"):
        plan_requests(point(w), 4, 0, 2048, words)


def test_dataset_plan_uses_history_and_answer_lengths_and_drops_what_is_too_long(tmp_path):
    path = write(tmp_path, "s.json", json.dumps(SHAREGPT))
    plan = plan_requests(point({"kind": "dataset", "path": path}), 3, 0, 2048, words)
    turns = [("system", "Be brief."), ("user", "What is a lighthouse?"),
             ("assistant", "A tower with a light that guides ships."), ("user", "Who keeps it?")]
    # every user turn of every conversation is a request: the conversation so far, the next answer's length
    expected = {chat_prompt(turns, 1): 8, chat_prompt(turns, 3): 2, SESSION_TURN.format(text="Name a sea."): 3}
    assert chat_prompt(turns, 3) == ("Be brief.\nUser: What is a lighthouse?\nAssistant: A tower with a light "
                                     "that guides ships.\nUser: Who keeps it?\nAssistant:")
    assert {r.prompt: r.output_tokens for r in plan.requests} == expected
    assert all(r.prompt_tokens == words(r.prompt) for r in plan.requests)
    long = write(tmp_path, "long.jsonl", json.dumps({"prompt": "w " * 3000, "output_tokens": 10}) + "\n" +
                 json.dumps({"prompt": "short one", "output_tokens": 10}))
    plan = plan_requests(point({"kind": "dataset", "path": long}), 4, 0, 2048, words)
    assert {r.prompt for r in plan.requests} == {"short one"} and plan.dropped > 0
    assert any("dropped" in w for w in plan.warnings)


def test_sessions_plan_turns_and_context():
    w = {"kind": "sessions", "turns": 3, "user_tokens": 10, "system_tokens": 6, "output_tokens": 8,
         "think_time_s": 2.0}
    plan = plan_requests(point(w), 9, 0, 2048, words)
    assert len({r.session for r in plan.requests}) == 3
    for r in plan.requests:
        assert words(SESSION_TURN.format(text=r.prompt)) == 12  # the turn itself; history is added when sent
        assert (r.think_s > 0) == (r.turn > 0) and bool(r.system) == (r.turn == 0)
        # turn k's prompt = system (6) + k x (turn 12 + answer 8 + newline) + 12
        assert r.prompt_tokens == 6 + r.turn * 21 + 12
        assert r.shared_tokens == (0 if r.turn == 0 else r.prompt_tokens - 12)


def test_trace_plan_scales_arrivals_and_keeps_mooncake_prefixes(tmp_path):
    path = write(tmp_path, "moon.jsonl", TRACES["moon.jsonl"][0])
    w = {"kind": "trace", "path": path, "time_scale": 0.5}
    plan = plan_requests(point(w, mode=LoadMode.TRACE, concurrency=None), 10, 0, 8192, words)
    assert [r.arrival_s for r in plan.requests] == pytest.approx([0.0, 1.925, 1.975])
    a, b, _ = plan.requests
    assert a.prompt.split()[:512] == b.prompt.split()[:512]  # the shared block 46 is the same text
    assert a.prompt.split()[512:600] != b.prompt.split()[512:600]
    assert b.shared_tokens == 512 and a.shared_tokens == 0
    assert [r.output_tokens for r in plan.requests] == [52, 8, 8]


# --- specs and run ids -----------------------------------------------------------------------------------------

SPEC = {"name": "w", "engine": "mock", "model": {"id": "m", "source": "embedded"}, "grid": {"max_num_seqs": [4]},
        "load": {"concurrency": [2], "num_requests": 8}}


def _ids(spec):
    from atlas.hardware import get_gpu
    from atlas.plan import expand

    return [p.run_id for p in expand(parse_spec(spec), get_gpu("cpu"))]


def test_fixed_workload_keeps_run_ids_and_others_change_them(tmp_path):
    base = _ids(SPEC)
    assert _ids({**SPEC, "load": {**SPEC["load"], "workload": {"kind": "fixed"}}}) == base
    sp = {**SPEC, "load": {**SPEC["load"], "workload": {"kind": "shared_prefix", "groups": 2, "prefix_tokens": 20,
                                                        "questions_per_group": 2, "question_tokens": 4}}}
    assert _ids(sp) != base


def test_a_file_workload_pins_the_files_sha256_in_the_run_id(tmp_path):
    path = write(tmp_path, "p.jsonl", '{"prompt": "a b c", "output_tokens": 3}\n')
    spec = {**SPEC, "load": {**SPEC["load"], "workload": {"kind": "dataset", "path": path}}}
    points = load_points(parse_spec(spec))
    assert points[0].workload.sha256 and len(points[0].workload.sha256) == 64
    first = _ids(spec)
    write(tmp_path, "p.jsonl", '{"prompt": "a b c d", "output_tokens": 3}\n')
    assert _ids(spec) != first  # a changed file is another measurement
    pinned = {**spec, "load": {**spec["load"], "workload": {"kind": "dataset", "path": path, "sha256": "0" * 64}}}
    with pytest.raises(WorkloadError, match=r"p\.jsonl: the file's sha256 is .* not the pinned 0000"):
        _ids(pinned)


@pytest.mark.parametrize("load,match", [
    ({"mode": "trace", "workload": {"kind": "shared_prefix", "groups": 1, "prefix_tokens": 2,
                                    "questions_per_group": 1, "question_tokens": 1}}, "load.mode trace needs"),
    ({"mode": "poisson", "rate_rps": [1], "workload": {"kind": "trace", "path": "x.csv"}}, "is replayed with"),
    ({"workload": {"kind": "distribution", "prompt": {"dist": "normal", "mean": 10}, "output": {
        "dist": "uniform", "max": 4}}}, "a normal length needs mean and stdev"),
    ({"workload": {"kind": "sessionz"}}, "workload"),
    ({"workload": {"kind": "dataset", "path": "a", "colour": 1}}, "colour"),
])
def test_bad_workload_specs_are_one_line(load, match):
    with pytest.raises(SpecError, match=match) as e:
        parse_spec({**SPEC, "load": {**SPEC["load"], **load}}, "spec.yaml")
    assert str(e.value).startswith("spec.yaml: load") and "\n" not in str(e.value)


def test_trace_levels_are_time_scales(tmp_path):
    path = write(tmp_path, "own.csv", TRACES["own.csv"][0])
    spec = {**SPEC, "load": {"mode": "trace", "num_requests": 3,
                             "workload": {"kind": "trace", "path": path, "time_scale": [1.0, 0.5]}}}
    pts = load_points(parse_spec(spec))
    assert [p.workload.time_scale for p in pts] == [1.0, 0.5] and [p.label() for p in pts] == ["trace x1", "trace x0.5"]


def test_a_sweep_with_a_bad_workload_file_fails_in_one_line_before_anything_starts(tmp_path):
    from typer.testing import CliRunner

    from atlas.cli import app

    spec = tmp_path / "s.yaml"
    for workload, said in (({"kind": "dataset", "path": str(tmp_path / "gone.jsonl")}, "gone.jsonl: workload file not found"),
                           ({"kind": "dataset", "path": "builtin:chat-trace.csv"}, "not a JSON or JSONL file"),
                           ({"kind": "sessions", "path": write(tmp_path, "x.jsonl", '{"messages": []}')},
                            "x.jsonl: line 1: a conversation with no user turn")):
        spec.write_text(json.dumps({**SPEC, "load": {**SPEC["load"], "workload": workload}}))
        r = CliRunner().invoke(app, ["sweep", str(spec), "--results", str(tmp_path / "res")])
        assert r.exit_code != 0 and said in r.output, r.output
        assert [line for line in r.output.splitlines() if line.startswith("error:")] == \
            [line for line in r.output.splitlines() if said in line]
        assert not (tmp_path / "res").exists()  # no engine, no result directory
        v = CliRunner().invoke(app, ["validate", str(spec)])
        assert v.exit_code == 2 and said in v.output, v.output
    good = {"kind": "dataset", "path": write(tmp_path, "ok.jsonl", '{"prompt": "a b c d", "output_tokens": 5}')}
    spec.write_text(json.dumps({**SPEC, "load": {**SPEC["load"], "workload": good}}))
    v = CliRunner().invoke(app, ["validate", str(spec)])
    assert v.exit_code == 0 and "workload: dataset: 8 requests, prompts ~2 tokens" in v.output  # 7 chars: estimated, v.output
    assert "file sha256 " in v.output


def test_capacity_rate_points_carry_the_pinned_workload(tmp_path):
    from atlas.capacity import rate_point

    path = write(tmp_path, "p.jsonl", '{"prompt": "a b c", "output_tokens": 3}\n')
    spec = parse_spec({**SPEC, "load": {**SPEC["load"], "workload": {"kind": "dataset", "path": path}},
                       "slo": {"ttft_p90_ms": 1000}})
    ladder = load_points(spec)[0]
    p = rate_point(spec, 2.0)
    assert p.mode == LoadMode.POISSON and p.workload == ladder.workload and len(p.workload.sha256) == 64
    trace = parse_spec({**SPEC, "load": {"mode": "trace", "workload": {"kind": "trace", "path": path}},
                        "slo": {"ttft_p90_ms": 1000}})
    assert not trace.capacity_on()  # a trace's arrivals are its own: no rate to search
    with pytest.raises(SpecError, match="capacity.enabled: a trace replay"):
        parse_spec({**SPEC, "load": {"mode": "trace", "workload": {"kind": "trace", "path": path}},
                    "slo": {"ttft_p90_ms": 1000}, "capacity": {"enabled": True}})


def test_a_prompt_the_server_counts_otherwise_than_planned_is_a_warning():
    from atlas.loadgen import LoadRun, RequestRecord
    from atlas.measure import prompt_mismatch

    p = point({"kind": "distribution", "prompt": {"dist": "uniform", "min": 5, "max": 50},
               "output": {"dist": "uniform", "min": 2, "max": 4}})
    plan = plan_requests(p, 4, 0, 2048, words)
    recs = [RequestRecord(index=i, phase="measure", scheduled_s=0.0, prompt_tokens=r.prompt_tokens)
            for i, r in enumerate(plan.requests)]
    run = LoadRun(point=p, records=recs, started_at_unix=0.0, wall_s=1.0, offered_rate_rps=None)
    assert prompt_mismatch([plan], [run]) is None
    recs[2].prompt_tokens += 1  # e.g. the engine added a BOS token the plan did not count
    assert prompt_mismatch([plan], [run]) == ("prompt length: the server counted another length than planned "
                                              "for 1 of 4 requests")
