import pytest

from atlas.config import LoadPoint, ModelSpec, parse_spec
from atlas.engines.vllm.knobs import VllmKnobs as ServerKnobs
from atlas.engines.vllm.knobs import VllmQuant as Quantization
from atlas.hardware import get_gpu
from atlas.knobs import Dtype, LoadMode
from atlas.metrics import summarize_load
from atlas.plan import expand
from atlas.results import RunResult
from atlas.simulator.features import Efficiencies, SimulatorError, step_costs
from atlas.simulator.fit import _log_errors, fit, load, save
from atlas.simulator.predict import predict_config, predict_spec
from atlas.simulator.queue import simulate

MODEL = ModelSpec(id="m", source="path", path="/m", params_b=7.6, num_layers=28, num_kv_heads=4, head_dim=128,
                  max_model_len=4096)
EFF = Efficiencies(overhead_s=0.004, bw_eff=0.7, compute_eff=0.5)


def lp(c=1, **kw):
    return LoadPoint(**{"concurrency": c, "num_requests": 40, "warmup_requests": 2, "prompt_tokens": 128,
                        "output_tokens": 32, "min_requests": 4, "min_duration_s": 0, "repeats": 1, **kw})


def run(server=None, point=None, gpu="h100", eff=EFF):
    server = server or ServerKnobs(max_num_seqs=64)
    costs = step_costs(MODEL, server, get_gpu(gpu))
    return summarize_load(simulate(costs, eff, server, point or lp(), max_model_len=4096)), costs


def test_single_stream_tpot_is_one_decode_step():
    s, costs = run()
    step = EFF.step_s(costs, 1, 128 + 16) * 1e3
    assert s.tpot_ms.p50.value == pytest.approx(step, rel=0.02)
    assert s.tpot_ms.p50.value >= costs.roofline_s(1, 144) * 1e3


def test_batching_raises_throughput_and_max_num_seqs_caps_it():
    one, _ = run(point=lp(1))
    many, _ = run(point=lp(16))
    capped, _ = run(server=ServerKnobs(max_num_seqs=2), point=lp(16))
    assert many.output_tok_s > 8 * one.output_tok_s
    assert capped.output_tok_s < many.output_tok_s / 4
    assert capped.ttft_ms.p50.value > 5 * many.ttft_ms.p50.value  # queued behind the cap


def test_quantization_and_hardware_change_the_step():
    bf16, _ = run()
    awq, _ = run(server=ServerKnobs(max_num_seqs=64, quantization=Quantization.AWQ))
    l4, _ = run(gpu="l4")
    assert awq.tpot_ms.p50.value < bf16.tpot_ms.p50.value < l4.tpot_ms.p50.value


def test_open_loop_overload_is_invalid_like_a_measurement():
    s, _ = run(point=lp(None, mode=LoadMode.POISSON, rate_rps=500.0, num_requests=200, concurrency=None),
               server=ServerKnobs(max_num_seqs=4))
    assert any("oversaturated" in r for r in s.invalid_reasons)


def test_missing_model_sizes_are_a_clear_error():
    with pytest.raises(SimulatorError, match="needs params_b"):
        step_costs(ModelSpec(id="x", source="embedded"), ServerKnobs(), get_gpu("h100"))


def _measured_from_simulation(true_eff):
    """Synthetic 'measurements' made by the simulator itself with known efficiencies."""
    spec = parse_spec({"name": "syn", "model": MODEL.model_dump(mode="json"),
                       "grid": {"max_num_seqs": [4, 16, 64]},
                       "load": {"concurrency": [1, 8, 32], "num_requests": 24, "warmup_requests": 2,
                                "prompt_tokens": 128, "output_tokens": 16, "min_requests": 4, "min_duration_s": 0}})
    out = []
    for item in expand(spec, get_gpu("h100")):
        cfg = item.config
        costs = step_costs(MODEL, cfg.server, get_gpu("h100"))
        m = summarize_load(simulate(costs, true_eff, cfg.server, cfg.load, max_model_len=4096))
        out.append(RunResult(run_id=item.run_id, sweep="syn", status="ok", label="x", config=cfg, metrics=m))
    return spec, out


@pytest.fixture(scope="module")
def fitted():
    spec, measured = _measured_from_simulation(EFF)
    return spec, measured, fit(measured, "syn")


def test_fit_recovers_known_efficiencies_and_reports_held_out_error(tmp_path, fitted):
    spec, measured, art = fitted
    (g,) = art.groups
    # overhead and bandwidth trade off at small contexts (both are per-step costs), so the fit is judged by
    # the decode step it implies and by the compute efficiency, which batching identifies
    costs = step_costs(MODEL, ServerKnobs(), get_gpu("h100"))
    assert g.efficiencies().step_s(costs, 1, 150) == pytest.approx(EFF.step_s(costs, 1, 150), rel=0.03)
    assert g.compute_eff == pytest.approx(EFF.compute_eff, rel=0.15)
    assert g.n_configs == 3 and g.loco_mape["tpot_p50_ms"] < 0.05 and g.loco_mape["output_tok_s"] < 0.05
    path = save(art, tmp_path / "a.json")
    assert load(path) == art
    path.write_text("{oops")
    with pytest.raises(SimulatorError, match="corrupted calibration artifact"):
        load(path)


def test_predictions_are_labelled_and_flag_extrapolation(fitted):
    spec, measured, art = fitted
    inside = predict_config(art, measured[4].config, measured[4].run_id, "syn")
    assert inside.source == "simulated" and not inside.simulation.extrapolated
    assert inside.metrics.tpot_ms.p50.ci_low < inside.metrics.tpot_ms.p50.value < inside.metrics.tpot_ms.p50.ci_high
    other = parse_spec({**spec.model_dump(mode="json"), "grid": {"max_num_seqs": [256], "dtype": [Dtype.BFLOAT16]},
                        "load": {**spec.load.model_dump(mode="json"), "concurrency": [128]}})
    preds = predict_spec(art, other, get_gpu("a100-80"), measured)
    assert preds and all(p.simulation.extrapolated for p in preds)
    reasons = " ".join(preds[0].simulation.extrapolation_reasons)
    assert "a100-80 not measured" in reasons and "max_num_seqs=256 outside" in reasons
    assert all(p.metrics.tpot_ms.p50.value >= p.simulation.roofline_tpot_ms for p in preds)
    # A100-80 at 0.9: 72 GiB - 2 GiB reserve - 14.2 GiB bf16 weights over 56 KiB per token
    assert preds[0].simulation.kv_cache_tokens == pytest.approx(1_060_000, rel=0.02)
    # measured points are not predicted again
    assert not predict_spec(art, spec, get_gpu("h100"), measured)
    # outside the knob range alone the interval is the held-out one (leave-one-out made such extrapolations);
    # another GPU, which leave-one-out never did, doubles it
    (g,) = art.groups
    knobs = parse_spec({**spec.model_dump(mode="json"), "grid": {"max_num_seqs": [256], "dtype": [Dtype.BFLOAT16]}})
    [far] = predict_spec(art, knobs, get_gpu("h100"), measured)[:1]
    assert far.simulation.extrapolated and not any("not measured" in r for r in far.simulation.extrapolation_reasons)
    assert far.simulation.intervals == g.intervals
    assert preds[0].simulation.intervals["tpot_p50_ms"]["80"] == pytest.approx(
        min(3.0, 2 * g.intervals["tpot_p50_ms"]["80"]))


def test_kv_memory_model_limits_concurrency():
    from atlas.simulator.features import kv_capacity_tokens

    server = ServerKnobs(max_num_seqs=256)
    l4 = kv_capacity_tokens(step_costs(MODEL, server, get_gpu("l4")), get_gpu("l4"), server)
    fp8 = ServerKnobs(max_num_seqs=256, kv_cache_dtype="fp8")
    l4_fp8 = kv_capacity_tokens(step_costs(MODEL, fp8, get_gpu("l4")), get_gpu("l4"), fp8)
    assert 80_000 < l4 < 120_000 and l4_fp8 == pytest.approx(2 * l4, rel=0.01)  # FP8 KV doubles the tokens
    assert kv_capacity_tokens(step_costs(MODEL, server, get_gpu("cpu")), get_gpu("cpu"), server) is None
    few, _ = run(server=server, point=lp(64))
    costs = step_costs(MODEL, server, get_gpu("h100"))
    tight = summarize_load(simulate(costs, EFF, server, lp(64), max_model_len=4096, kv_capacity_tokens=1600))
    assert tight.output_tok_s < few.output_tok_s / 2  # only ~10 of the 64 requests fit at once: the rest wait


def test_leave_one_out_is_a_fit_that_never_saw_the_held_out_config():
    """The intervals come from leave-one-config-out errors; a refit started at the full fit's solution (which has
    seen the held-out config) stays near it on a flat objective, and the errors then read smaller than a new
    config's. Each refit must be the fit the other configs alone give. Here one config runs 40% slower than the
    others' efficiencies say (a server on a worse moment), as recorded servers do."""
    _, measured = _measured_from_simulation(EFF)
    slow = Efficiencies(EFF.overhead_s * 1.4, EFF.bw_eff / 1.4, EFF.compute_eff / 1.4)
    odd = measured[-1].config.server_key()
    for i, r in enumerate(measured):
        if r.config.server_key() == odd:
            costs = step_costs(MODEL, r.config.server, get_gpu("h100"))
            m = summarize_load(simulate(costs, slow, r.config.server, r.config.load, max_model_len=4096))
            measured[i] = r.model_copy(update={"metrics": m})
    (g,) = fit(measured, "syn").groups
    expected: dict[str, list[float]] = {}
    for key in {r.config.server_key() for r in measured}:
        (alone,) = fit([r for r in measured if r.config.server_key() != key], "syn", cross_validate=False).groups
        for r in (r for r in measured if r.config.server_key() == key):
            for name, errs in _log_errors([(r, MODEL)], alone.efficiencies()).items():
                expected.setdefault(name, []).extend(errs)
    for name in ("tpot_p50_ms", "output_tok_s", "ttft_p50_ms"):
        assert sorted(g.loco_log_errors[name]) == pytest.approx(sorted(expected[name]), abs=1e-4)
