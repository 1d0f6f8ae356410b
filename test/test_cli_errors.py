"""The `vla-edge` command turns the package's named errors into one line and exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vla_edge.cli import main
from vla_edge.core.errors import ConfigError


def test_a_named_error_is_one_line_and_exit_code_2_not_a_traceback(tmp_path):
    missing = tmp_path / "no_such_export"
    result = subprocess.run(
        [sys.executable, "-m", "vla_edge.cli", "eval", "--policy", str(missing), "--episodes", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"vla-edge eval: ConfigError: policy '{missing}': {missing} does not exist"
    )


def test_called_with_arguments_the_error_propagates(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        main(["eval", "--policy", str(tmp_path / "none"), "--episodes", "1"])


@pytest.mark.parametrize("argv", [["--help"], ["export", "--help"], ["bench", "latency", "--help"]])
def test_help_prints_for_every_command_level(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 0
    assert "usage: vla-edge" in capsys.readouterr().out


def test_every_command_and_bench_helps_without_a_formatting_error(capsys):
    from vla_edge.cli import BENCHES, COMMANDS

    for argv in [[name, "--help"] for name in COMMANDS if name != "bench"] + [
        ["bench", name, "--help"] for name in BENCHES
    ]:
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 0, argv
    assert "SmolVLA" in capsys.readouterr().out
