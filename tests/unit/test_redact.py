"""Secrets in engine arguments and environment never reach what Atlas writes."""

from atlas.redact import MASK, Redactor, redact_argv, redact_env


def test_secret_flags_are_masked_in_both_forms():
    argv = ["--model", "m", "--api-key", "sk-live-123", "--hf-token=hf_abc", "--port", "8000", "--api-key"]
    assert redact_argv(argv) == ["--model", "m", "--api-key", MASK, f"--hf-token={MASK}", "--port", "8000",
                                 "--api-key"]


def test_secret_env_values_are_masked_and_scrubbed_from_text(tmp_path):
    env = {"HF_TOKEN": "hf_secret_value", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert redact_env(env) == {"HF_TOKEN": MASK, "VLLM_CPU_KVCACHE_SPACE": "1"}
    r = Redactor.of(["x", "--api-key", "sk-live-123"], env)
    line = "non-default args: {'api_key': ['sk-live-123'], 'token': 'hf_secret_value'}"
    assert "sk-live-123" not in r.text(line) and "hf_secret_value" not in r.text(line)
    log = tmp_path / "engine.log"
    log.write_text(line + "\n")
    r.scrub_file(log)
    assert "sk-live" not in log.read_text() and MASK in log.read_text()
