"""The `vla-edge` command turns the package's named errors into one line and exit code 2."""

from __future__ import annotations

import importlib
import json
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


def test_every_command_and_bench_module_exists_with_its_entry_points():
    """A command whose module is missing would still print a bare ``--help``: import each."""
    from vla_edge.cli import BENCHES, COMMANDS

    for name, (module_name, _) in {**COMMANDS, **BENCHES}.items():
        module = importlib.import_module(module_name)
        assert callable(module.add_arguments) and callable(module.run), name


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (["launch", "--help"], ["--namespace", "--stop-on-success", "--json"]),
        (["soak", "--help"], ["--fault-every-s", "--switch-probability", "--out"]),
    ],
    ids=["launch", "soak"],
)
def test_launch_and_soak_help_lists_their_options(argv, options, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: vla-edge {argv[0]}")
    for option in options:
        assert option in out, option


def test_launch_command_imports_no_model_library():
    """``vla-edge launch`` starts processes and reads /diagnostics: no torch, no runtimes."""
    script = (
        "import json, sys\n"
        "from vla_edge.cli import build_parser\n"
        "build_parser(['launch', 'sim']).parse_args(['launch', 'sim'])\n"
        "import vla_edge.cli.launch\n"
        "heavy = ('torch', 'transformers', 'onnxruntime', 'executorch')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
