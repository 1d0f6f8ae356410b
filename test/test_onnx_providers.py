"""ONNX Runtime execution providers: parsed from config entries, used or refused by name."""

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from export_fixtures import observation, shared_onnx_export

from vla_edge.core.errors import ConfigError, ExecutionProviderError
from vla_edge.runners.onnx_program import OnnxProgram, check_providers, parse_providers
from vla_edge.runners.onnx_runner import OnnxRunner
from vla_edge.runners.programs import open_program

TRT = (
    "TensorrtExecutionProvider;trt_fp16_enable=True;trt_engine_cache_enable=True;"
    "trt_engine_cache_path=/var/cache/vla_edge/trt"
)
CPU_WITH_OPTION = "CPUExecutionProvider;arena_extend_strategy=kSameAsRequested"


@pytest.fixture(scope="module")
def linear_onnx(tmp_path_factory) -> Path:
    """A 1-layer ``Linear(3, 2)`` exported to ONNX (input ``x`` [1, 3], output ``y`` [1, 2])."""
    path = tmp_path_factory.mktemp("providers") / "linear.onnx"
    torch.manual_seed(0)
    torch.onnx.export(
        torch.nn.Linear(3, 2).eval(),
        (torch.zeros(1, 3),),
        str(path),
        input_names=["x"],
        output_names=["y"],
        dynamo=True,
        verbose=False,
    )
    return path


def _program(path: Path, providers: list[str] | None) -> OnnxProgram:
    return OnnxProgram(path, threads=1, input_names=["x"], output_names=["y"], providers=providers)


def test_entries_parse_into_names_and_string_options_in_priority_order() -> None:
    parsed = parse_providers([TRT, "CUDAExecutionProvider;device_id=0", "CPUExecutionProvider"])
    assert parsed == [
        (
            "TensorrtExecutionProvider",
            {
                "trt_fp16_enable": "True",
                "trt_engine_cache_enable": "True",
                "trt_engine_cache_path": "/var/cache/vla_edge/trt",
            },
        ),
        ("CUDAExecutionProvider", {"device_id": "0"}),
        ("CPUExecutionProvider", {}),
    ]


def test_whitespace_is_dropped_and_a_value_keeps_later_equals_signs() -> None:
    parsed = parse_providers([" CUDAExecutionProvider ; device_id = 1 ; tag=a=b "])
    assert parsed == [("CUDAExecutionProvider", {"device_id": "1", "tag": "a=b"})]


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("", ["onnx_providers[0]", "empty provider name"]),
        (";device_id=0", ["onnx_providers[0]", "empty provider name"]),
        ("CUDA ExecutionProvider", ["onnx_providers[0]", "bad provider name"]),
        ("CUDAExecutionProvider;device_id", ["onnx_providers[0]", "'device_id'", "without '='"]),
        ("CUDAExecutionProvider;device_id=", ["'device_id'", "without a value"]),
        ("CUDAExecutionProvider;=0", ["bad option key", "'=0'"]),
        ("CUDAExecutionProvider;;device_id=0", ["empty option", "stray ';'"]),
        ("CUDAExecutionProvider;device_id=0;device_id=1", ["duplicate option key", "'device_id'"]),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_entry(entry: str, words: list[str]) -> None:
    with pytest.raises(ExecutionProviderError) as info:
        parse_providers([entry])
    message = str(info.value)
    assert f"onnx_providers[0] = {entry!r}" in message
    for word in words:
        assert word in message, (word, message)


def test_a_provider_named_twice_is_refused_naming_both_entries() -> None:
    with pytest.raises(ExecutionProviderError) as info:
        parse_providers(["CUDAExecutionProvider;device_id=0", "CUDAExecutionProvider;device_id=1"])
    message = str(info.value)
    assert "onnx_providers[1]" in message and "onnx_providers[0]" in message
    assert "duplicate provider 'CUDAExecutionProvider'" in message


def test_an_empty_list_or_a_bare_string_is_refused() -> None:
    with pytest.raises(ExecutionProviderError, match=r"onnx_providers = \[\].*at least one"):
        parse_providers([])
    with pytest.raises(ExecutionProviderError, match="expected a list"):
        parse_providers("CPUExecutionProvider")


def test_execution_provider_error_is_a_config_error() -> None:
    assert issubclass(ExecutionProviderError, ConfigError)


def test_a_provider_missing_from_the_build_is_named_with_the_available_ones_and_the_jetson_fix():
    with pytest.raises(ExecutionProviderError) as info:
        check_providers(parse_providers([TRT]), available=["CPUExecutionProvider"])
    message = str(info.value)
    assert "'TensorrtExecutionProvider'" in message and "not in this onnxruntime build" in message
    assert "['CPUExecutionProvider']" in message
    assert "Jetson" in message and "onnxruntime-gpu" in message and "JetPack" in message


def test_providers_of_the_build_pass_the_check() -> None:
    check_providers(parse_providers(["CPUExecutionProvider"]))


@pytest.mark.parametrize("missing", ["TensorrtExecutionProvider", "CUDAExecutionProvider"])
def test_a_gpu_provider_this_cpu_build_lacks_is_refused_at_construction(
    linear_onnx: Path, missing: str
) -> None:
    if missing in onnxruntime.get_available_providers():
        pytest.skip(f"this onnxruntime build has {missing}")
    with pytest.raises(ExecutionProviderError) as info:
        _program(linear_onnx, [f"{missing};device_id=0", "CPUExecutionProvider"])
    message = str(info.value)
    assert repr(missing) in message and "CPUExecutionProvider" in message
    assert "onnxruntime-gpu" in message


@pytest.mark.filterwarnings("ignore:Specified provider")
def test_a_provider_the_session_silently_drops_is_refused(
    linear_onnx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX Runtime leaves out a provider that fails to initialise; the program does not."""
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime build has CUDA: it would not be dropped")
    real = onnxruntime.get_available_providers()
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", *real]
    )
    with pytest.raises(ExecutionProviderError) as info:
        _program(linear_onnx, ["CUDAExecutionProvider"])
    message = str(info.value)
    assert "'CUDAExecutionProvider'" in message and "failed to initialise" in message
    assert "linear.onnx" in message and "['CPUExecutionProvider']" in message


def test_a_provider_that_fails_while_the_session_is_made_is_refused_not_retried_on_cpu(
    linear_onnx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions: list[dict] = []

    def failing_session(path: str, **kwargs: object) -> None:
        sessions.append(kwargs)
        raise RuntimeError("CUDA failure 100: no CUDA-capable device is detected")

    real = onnxruntime.get_available_providers()
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", *real]
    )
    monkeypatch.setattr(onnxruntime, "InferenceSession", failing_session)
    with pytest.raises(ExecutionProviderError) as info:
        _program(linear_onnx, ["CUDAExecutionProvider;device_id=0"])
    message = str(info.value)
    assert "onnx_providers = ['CUDAExecutionProvider;device_id=0']" in message
    assert "could not open program linear.onnx" in message and "CUDA failure 100" in message
    assert len(sessions) == 1 and sessions[0]["enable_fallback"] == 0
    assert sessions[0]["providers"] == ["CUDAExecutionProvider"]
    assert sessions[0]["provider_options"] == [{"device_id": "0"}]


def test_the_cpu_provider_with_an_option_gives_the_default_outputs(linear_onnx: Path) -> None:
    x = np.random.default_rng(0).standard_normal((1, 3)).astype(np.float32)
    default = _program(linear_onnx, None)
    optioned = _program(linear_onnx, [CPU_WITH_OPTION])
    assert default.providers == optioned.providers == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(optioned.run([x])[0], default.run([x])[0])
    assert default.run([x])[0].shape == (1, 2)


def test_open_program_passes_providers_to_an_onnx_stage(linear_onnx: Path) -> None:
    program = open_program("onnx", linear_onnx, 1, ["x"], ["y"], providers=[CPU_WITH_OPTION])
    assert program.providers == ["CPUExecutionProvider"]
    with pytest.raises(ExecutionProviderError, match="bad provider name"):
        open_program("onnx", linear_onnx, 1, ["x"], ["y"], providers=["not a provider"])


@pytest.fixture(scope="module")
def onnx_export(tmp_path_factory) -> Path:
    return shared_onnx_export(tmp_path_factory)


def test_onnx_runner_runs_on_the_providers_it_is_given(onnx_export: Path) -> None:
    noise = np.random.default_rng(3).standard_normal((10, 7)).astype(np.float32)
    default = OnnxRunner(onnx_export, threads=1).infer(observation(), noise=noise)
    optioned = OnnxRunner(onnx_export, threads=1, providers=[CPU_WITH_OPTION])
    np.testing.assert_array_equal(
        optioned.infer(observation(), noise=noise).positions, default.positions
    )


def test_onnx_runner_refuses_a_provider_the_build_lacks(onnx_export: Path) -> None:
    if "TensorrtExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime build has TensorRT")
    with pytest.raises(ExecutionProviderError, match="'TensorrtExecutionProvider'"):
        OnnxRunner(onnx_export, threads=1, providers=[TRT, "CPUExecutionProvider"])
