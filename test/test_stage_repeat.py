"""A stage run as K calls of its program (the manifest's ``repeat``): checks and the loop.

π0's and SmolVLA's action heads are exported as one Euler step that the runner calls K
times (lowering K unrolled steps runs out of memory at full size); the loop must give what
the reference sampling gives, and a manifest whose loop does not fit its stage is refused by name.
"""

import numpy as np
import pytest
import torch
from export_fixtures import edited_export, observation, shared_onnx_export

from vla_edge.archs.host import TensorSpec
from vla_edge.archs.pi0 import Pi0Config, Pi0Model, build_stages
from vla_edge.archs.pi0.layers import euler_times, sinusoidal_time_embedding
from vla_edge.archs.smolvla import SmolVLAConfig, SmolVLAModel
from vla_edge.archs.smolvla import build_stages as smolvla_stages
from vla_edge.archs.smolvla.layers import flow_times
from vla_edge.core.errors import ManifestMismatchError
from vla_edge.export.manifest import load_manifest, stage_repeat
from vla_edge.runners.onnx_runner import OnnxRunner
from vla_edge.runners.stage_loop import run_stage

CHUNK = (1, 4, 2)
INPUTS = (
    TensorSpec("base", CHUNK, "float32", "host:state"),
    TensorSpec("x", CHUNK, "float32", "host:noise"),
    TensorSpec("time", (1,), "float32", "repeat"),
)
OUTPUTS = (TensorSpec("y", CHUNK, "float32"), TensorSpec("last_time", (1,), "float32"))


def loop(count: int = 3, **changes) -> dict:
    raw = {
        "count": count,
        "inputs": {"time": [[float(i)] for i in range(count)]},
        "carry": {"x": "y"},
    }
    raw.update(changes)
    return raw


def test_the_loop_feeds_each_calls_value_and_carries_the_output() -> None:
    repeat = stage_repeat(loop(), INPUTS, OUTPUTS)
    calls = []

    def program(args):
        base, x, time = args
        calls.append((x.copy(), float(time[0])))
        return [x + base * (time[0] + 1.0), time.copy()]

    base = np.full(CHUNK, 0.5, np.float32)
    x0 = np.zeros(CHUNK, np.float32)
    y, last = run_stage(program, INPUTS, OUTPUTS, repeat, {"host:state": base, "host:noise": x0})
    assert [t for _, t in calls] == [0.0, 1.0, 2.0]
    np.testing.assert_array_equal(calls[0][0], x0)  # the first call: x from its source
    np.testing.assert_allclose(calls[1][0], base * 1.0)  # then the previous call's y
    np.testing.assert_allclose(y, base * (1.0 + 2.0 + 3.0))
    assert last.tolist() == [2.0]


def test_a_stage_without_a_loop_is_called_once() -> None:
    inputs = INPUTS[:2]
    got = run_stage(lambda args: [args[0] + args[1]], inputs, OUTPUTS[:1], None, {
        "host:state": np.ones(CHUNK, np.float32), "host:noise": np.ones(CHUNK, np.float32)
    })  # fmt: skip
    np.testing.assert_array_equal(got[0], np.full(CHUNK, 2.0, np.float32))


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (loop(count=0), "repeat.count = 0"),
        (loop(inputs={}), r"expected the inputs whose source is 'repeat': \['time'\]"),
        (loop(inputs={"time": [[0.0]]}), "repeat.inputs.time must list 3 values"),
        (loop(inputs={"time": [[0.0, 1.0]] * 3}), r"repeat.inputs.time\[0\] must be finite"),
        (loop(inputs={"time": [[float("nan")]] * 3}), r"repeat.inputs.time\[0\] must be finite"),
        (loop(carry={"x": "nothing"}), "repeat.carry.x = 'nothing'"),
        (loop(carry={"x": "last_time"}), r"the input is \[1, 4, 2\] float32, the output \[1\]"),
        (loop(carry={"time": "last_time"}), "repeat.carry.time"),
        ({"count": 3}, "must be an object with count, inputs and carry"),
    ],
)
def test_a_loop_that_does_not_fit_its_stage_is_refused_naming_the_field(raw, words) -> None:
    with pytest.raises(ManifestMismatchError, match=words):
        stage_repeat(raw, INPUTS, OUTPUTS)


# -- in a manifest -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return shared_onnx_export(tmp_path_factory)


def _carry_noise(data, count=2):
    data["stages"]["action_head"]["repeat"] = {
        "count": count,
        "inputs": {},
        "carry": {"noise": "actions_norm"},
    }


def test_the_runner_calls_a_looped_stage_count_times(onnx_dir, tmp_path) -> None:
    looped = edited_export(onnx_dir, tmp_path / "looped", _carry_noise)
    assert load_manifest(looped).stages["action_head"].repeat.count == 2
    runner = OnnxRunner(looped, threads=1)
    calls = []
    real = runner._programs["action_head"].run

    def counted(args):
        calls.append(args)
        return real(args)

    runner._programs["action_head"].run = counted
    shape = (runner.spec.chunk_horizon, runner.spec.noise_dim)
    noise = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    runner.infer(observation(0), noise=noise)
    assert len(calls) == 2
    # the second call's noise is the first call's output
    first = real(calls[0])[0]
    np.testing.assert_allclose(calls[1][1], first, rtol=0, atol=1e-6)


def test_a_repeat_source_without_a_loop_is_refused(onnx_dir, tmp_path) -> None:
    def edit(data):
        data["stages"]["action_head"]["inputs"][1]["source"] = "repeat"

    bad = edited_export(onnx_dir, tmp_path / "bad", edit)
    with pytest.raises(ManifestMismatchError, match=r"inputs.noise.source = 'repeat'.*no repeat"):
        load_manifest(bad)


def test_a_bad_loop_in_a_manifest_is_refused_naming_the_stage(onnx_dir, tmp_path) -> None:
    bad = edited_export(onnx_dir, tmp_path / "bad", lambda d: _carry_noise(d, count=-1))
    with pytest.raises(ManifestMismatchError, match=r"stages.action_head.repeat.count = -1"):
        load_manifest(bad)


# -- π0's action head ----------------------------------------------------------------------


def randomised(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in eval mode with every parameter random (unit norms would hide bugs)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model.eval()


def run_declared_loop(stages, values: dict) -> tuple:
    """The action head's declared loop, checked as a manifest's is, run as a runner runs it."""
    inputs, outputs = stages.inputs()["action_head"], stages.outputs()["action_head"]
    repeat = stage_repeat(stages.repeats()["action_head"], tuple(inputs), tuple(outputs))
    with torch.no_grad():
        (got,) = run_stage(
            lambda args: [stages.action_head(*args)], inputs, outputs, repeat, values,
            torch.from_numpy,
        )  # fmt: skip
    return repeat, got


def cache_values(cache, noise) -> dict:
    """Fusion's outputs and the host's noise, with no executed prefix, by source."""
    names = ("prefix_keys", "prefix_values", "prefix_pad")
    values = {f"stage:fusion.{n}": t for n, t in zip(names, cache, strict=True)}
    values.update({
        "host:noise": noise,
        "host:prefix_actions": torch.zeros_like(noise),
        "host:prefix_mask": torch.zeros(noise.shape[:2]),
    })  # fmt: skip
    return values


@pytest.mark.parametrize("pi05", [False, True], ids=["pi0", "pi05"])
def test_pi0s_declared_loop_run_as_a_runner_does_equals_reference_sampling(pi05) -> None:
    model = randomised(Pi0Model(Pi0Config.tiny(pi05=pi05)))
    stages = build_stages(model)
    example = stages.example_inputs()
    (images,) = example["vision_encoder"]
    _, image_mask, token_ids, token_mask = example["fusion"]
    state, noise = example["action_head"][3:5]
    with torch.no_grad():
        cache = stages.fusion(stages.vision_encoder(images), image_mask, token_ids, token_mask)
        want = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)
    repeat, got = run_declared_loop(stages, {**cache_values(cache, noise), "host:state": state})
    steps = model.config.flow_steps
    assert repeat.count == steps and repeat.carry == {"x_t": "actions"}
    # each call's step is one row of the identity: it selects openpi's time and its embedding
    np.testing.assert_array_equal(np.concatenate(repeat.inputs["step"]), np.eye(steps))
    head = stages.action_head
    assert head.step_times.flatten().tolist() == euler_times(steps)
    width = model.config.expert.width
    assert torch.equal(
        head.time_embeddings, sinusoidal_time_embedding(head.step_times.flatten(), width)
    )
    assert (got - want).abs().max().item() <= 1e-5


def test_smolvlas_declared_loop_run_as_a_runner_does_equals_reference_sampling() -> None:
    model = randomised(SmolVLAModel(SmolVLAConfig.tiny()))
    stages = smolvla_stages(model)
    example = stages.example_inputs()
    (images,) = example["vision_encoder"]
    _, image_mask, token_ids, token_mask, state = example["fusion"]
    noise = example["action_head"][3]
    with torch.no_grad():
        cache = stages.fusion(stages.vision_encoder(images), *example["fusion"][1:])
        want = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)
    repeat, got = run_declared_loop(stages, cache_values(cache, noise))
    steps = model.config.flow_steps
    assert repeat.count == steps and repeat.carry == {"x_t": "actions"}
    # each call's step is one row of the identity: it selects that step's time and embedding
    np.testing.assert_array_equal(np.concatenate(repeat.inputs["step"]), np.eye(steps))
    head = stages.action_head
    assert head.step_times.flatten().tolist() == flow_times(steps)
    assert torch.equal(head.time_embeddings, model.time_embedding(head.step_times.flatten()))
    assert (got - want).abs().max().item() <= 1e-5
