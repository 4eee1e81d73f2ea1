"""`atlas` alone, `atlas --version` and shell completion."""

from typer.testing import CliRunner

from atlas import __version__
from atlas.cli import app

runner = CliRunner()


def test_atlas_alone_prints_the_two_commands_a_newcomer_needs():
    r = runner.invoke(app, [])
    assert r.exit_code == 0
    assert "bash scripts/setup.sh && .venv/bin/atlas sweep --gpu cpu && .venv/bin/atlas frontier results/" in r.output
    assert "bash scripts/test.sh" in r.output and "atlas --help" in r.output


def test_version_names_atlas_and_every_engine():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0] == f"atlas {__version__}"
    assert {x.split(":")[0] for x in lines[1:]} >= {"vllm", "llamacpp", "mock", "sglang"}
    assert any(x.startswith("mock: atlas-mock==") for x in lines)


def test_shell_completion_is_offered():
    r = runner.invoke(app, ["--help"])
    assert "--install-completion" in r.output and "--show-completion" in r.output
    r = runner.invoke(app, ["sweep", "--help"])  # a command still has its own help
    assert r.exit_code == 0 and "--client-procs" in r.output
