import pytest
from pydantic import ValidationError

from atlas.config import SpecError, load_spec, parse_spec
from atlas.engines.vllm.knobs import VllmKV
from atlas.knobs import Dtype

MIN = {"name": "t", "model": {"id": "m", "source": "embedded"}}


def test_minimal_spec_has_defaults():
    s = parse_spec(MIN)
    assert s.grid.dtype == [Dtype.BFLOAT16]
    assert s.load.repeats == 3
    assert s.quality.gate.max_accuracy_drop == 0.10


def test_shipped_specs_are_valid():
    from atlas.hardware import PACKAGED

    for p in sorted(PACKAGED.glob("*.yaml")):
        if p.name in ("gpus.yaml", "prices.yaml"):
            continue
        assert load_spec(p).name


def test_unknown_field_is_one_line_naming_it(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\nmodel: {id: m, source: embedded}\ngrid: {dtypes: [float32]}\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and "grid.dtypes" in msg


def test_bad_enum_names_field_and_value(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\nmodel: {id: m, source: embedded}\ngrid: {kv_cache_dtype: [fp4]}\n")
    with pytest.raises(SpecError, match=r"grid\.kv_cache_dtype\.0"):
        load_spec(p)


def test_malformed_yaml_gives_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\nmodel: [unclosed\n")
    with pytest.raises(SpecError, match=r"malformed YAML at line \d+"):
        load_spec(p)


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="expected a mapping"):
        parse_spec([1, 2])


def test_impossible_values_rejected():
    with pytest.raises(SpecError, match="max_num_seqs"):
        parse_spec({**MIN, "grid": {"max_num_seqs": [0]}})
    with pytest.raises(SpecError, match="repeated"):
        parse_spec({**MIN, "grid": {"dtype": ["float32", "float32"]}})
    with pytest.raises(SpecError, match="rate_rps"):
        parse_spec({**MIN, "load": {"mode": "poisson"}})
    with pytest.raises(SpecError, match="model.path is required"):
        parse_spec({"name": "t", "model": {"id": "m", "source": "path"}})


def test_spec_is_frozen():
    s = parse_spec(MIN)
    with pytest.raises(ValidationError):
        s.name = "x"  # type: ignore[misc]
    assert VllmKV("fp8_calibrated")


def test_knobs_are_per_engine_and_a_knob_an_engine_lacks_names_the_field():
    from atlas.engines.llamacpp.knobs import LlamaCppKnobs
    from atlas.engines.vllm.knobs import VllmKnobs

    s = parse_spec({**MIN, "grid": [{"max_num_seqs": [4]},
                                    {"engine": "llamacpp", "quantization": ["q8_0"], "n_ubatch": [64]}]})
    (e1, g1), (e2, g2) = s.grids()
    assert (e1, e2) == ("vllm", "llamacpp") and g2.quantization == ["q8_0"]
    # the same knob name in two engines, each with its own values
    with pytest.raises(SpecError, match=r"grid\.0\.vllm\.quantization\.0|grid\..*quantization"):
        parse_spec({**MIN, "grid": {"quantization": ["q8_0"]}})
    for bad, field in (({"engine": "llamacpp", "dtype": ["float32"]}, "dtype"),
                       ({"engine": "llamacpp", "enable_chunked_prefill": [True]}, "enable_chunked_prefill"),
                       ({"n_ubatch": [8]}, "n_ubatch")):
        with pytest.raises(SpecError) as e:
            parse_spec({**MIN, "grid": bad})
        assert field in str(e.value) and "Extra inputs are not permitted" in str(e.value), str(e.value)
    with pytest.raises(SpecError, match="unknown engine 'sglangx'"):
        parse_spec({**MIN, "engine": "sglangx"})
    assert VllmKnobs(max_num_seqs=4).numerics().is_baseline_candidate
    assert not LlamaCppKnobs(engine="llamacpp", kv_cache_dtype="q8_0").numerics().is_baseline_candidate


def test_defaults_ship_in_the_package_and_user_files_override_them(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from atlas.cli import app
    from atlas.hardware import PACKAGED, config_file, get_gpu, price_usd_per_hour

    assert (PACKAGED / "gpus.yaml").is_file() and (PACKAGED / "cpu-smollm2.yaml").is_file()
    assert config_file("gpus.yaml") == PACKAGED / "gpus.yaml"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "prices.yaml").write_text("default_provider: me\nproviders:\n  me:\n    as_of: today\n"
                                      "    usd_per_gpu_hour: {h100: 1.5, cpu: 0.01}\n")
    monkeypatch.setenv("ATLAS_CONFIG_DIR", str(mine))
    assert config_file("prices.yaml") == mine / "prices.yaml"  # the user's where present
    assert config_file("gpus.yaml") == PACKAGED / "gpus.yaml"  # the shipped one where not
    assert price_usd_per_hour("h100") == (1.5, "me as of today")
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("gpus:\n  tiny: {name: Tiny, memory_gib: 8, bandwidth_gb_s: 100, bf16_tflops: 10, "
                    "fp8_native: false, nvml_names: [Tiny], source: a test}\n")
    for var in ("ATLAS_GPUS_FILE", "ATLAS_PRICES_FILE"):
        monkeypatch.setenv(var, "")  # restored after the test: --gpus sets it for the whole process
    r = CliRunner().invoke(app, ["--gpus", str(gpus), "validate", str(PACKAGED / "qwen2.5-7b.yaml"), "--gpu", "tiny"])
    assert "unknown GPU" not in r.output, r.output
    assert get_gpu("tiny").memory_gib == 8  # --gpus set it for the process (and the processes it starts)
    r = CliRunner().invoke(app, ["--gpus", str(tmp_path / "nope.yaml"), "--version"])
    assert r.exit_code == 0  # --version is eager: answered before anything else is read
    r = CliRunner().invoke(app, ["--gpus", str(tmp_path / "nope.yaml"), "schema"])
    assert r.exit_code == 2 and "nope.yaml: no such file" in r.output
