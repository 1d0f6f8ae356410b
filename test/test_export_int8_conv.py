"""8da4w exports run the vision encoder's convolutions in int8, calibrated on tabletop frames."""

from pathlib import Path

import numpy as np
import pytest
import torch
from policy_synthetic import tiny_config, write_dataset

from vla_edge.archs.bundled.model import VlaPolicy
from vla_edge.core.errors import ConfigError
from vla_edge.export.architecture import stage_programs_of
from vla_edge.export.executorch_export import export_stage_executorch, quantize_convs_int8
from vla_edge.sim.frames import calibration_images, expert_observations

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def frames() -> list[tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return calibration_images(VlaPolicy(tiny_config(vision_keypoints=4)), 12)


def test_calibration_frames_are_rendered_tabletop_images_from_training_states(frames) -> None:
    assert len(frames) == 12
    for (images,) in frames:
        assert images.shape == (2, 3, 32, 32) and images.dtype == torch.float32
        assert 0.0 <= float(images.min()) and float(images.max()) <= 1.0
        assert float(images.std()) > 0.02  # a scene, not a blank frame
    train = expert_observations(["agentview"], (32, 32), 10, 1, "train")[0][0]
    evaluation = expert_observations(["agentview"], (32, 32), 10, 1, "eval")[0][0]
    assert not np.array_equal(train.images["agentview"], evaluation.images["agentview"])
    first = frames[0][0][0].numpy().transpose(1, 2, 0)
    np.testing.assert_allclose(first, train.images["agentview"] / 255.0, atol=1e-6)


def test_calibration_frames_can_come_from_recorded_demonstrations(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "demos.hdf5", episodes_per_task=2, steps=10)
    policy = VlaPolicy(tiny_config(vision_keypoints=4))
    frames = calibration_images(policy, 5, data)
    assert len(frames) == 5 and frames[0][0].shape == (2, 3, 32, 32)
    assert not torch.equal(frames[0][0], frames[-1][0])


def _vision_stage():
    torch.manual_seed(0)
    policy = VlaPolicy(tiny_config(vision_keypoints=4))
    return stage_programs_of(policy, "executorch", names=("vision_encoder",))[0]


@pytest.mark.slow
def test_8da4w_vision_program_has_int8_convolutions_close_to_torch(tmp_path: Path, frames) -> None:
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    stage = _vision_stage()
    calibration, held_out = frames[:8], frames[8:]
    details = export_stage_executorch(stage, tmp_path / "q.pte", "8da4w", calibration)
    convs = sum(1 for m in stage.module.modules() if isinstance(m, torch.nn.Conv2d))
    assert details["int8_convs"] == convs > 0 and details["fp32_convs"] == 0
    assert details["calibration_inputs"] == 8
    assert details["delegation"]["non_delegated_ops"] == {}
    fp32 = export_stage_executorch(stage, tmp_path / "f.pte", "fp32", calibration)
    assert fp32["int8_convs"] == 0 and fp32["fp32_convs"] == convs
    assert (tmp_path / "q.pte").stat().st_size < (tmp_path / "f.pte").stat().st_size

    program = _load_for_executorch(str(tmp_path / "q.pte"))
    for (images,) in held_out:
        with torch.no_grad():
            reference = stage.module(images)
        got = program.forward([images.contiguous()])[0]
        rel_rms = float((got - reference).pow(2).mean().sqrt() / reference.pow(2).mean().sqrt())
        assert rel_rms < 0.1


@pytest.mark.slow
def test_without_calibration_the_convolutions_stay_fp32(tmp_path: Path) -> None:
    details = export_stage_executorch(_vision_stage(), tmp_path / "v.pte", "8da4w")
    assert details["int8_convs"] == 0 and details["fp32_convs"] > 0
    assert details["calibration_inputs"] == 0


def test_int8_convolutions_refuse_an_empty_calibration() -> None:
    stage = _vision_stage()
    with pytest.raises(ConfigError, match="calibration"):
        quantize_convs_int8(stage.module, stage.example_inputs, [])


def test_missing_calibration_data_is_refused_before_any_export(tmp_path: Path) -> None:
    from vla_edge.export.architecture import export_checkpoint

    policy = VlaPolicy(tiny_config(vision_keypoints=4))
    with pytest.raises(ConfigError, match="calibration_data"):
        export_checkpoint(
            policy, tmp_path / "out", "executorch", "8da4w", calibration_data=tmp_path / "none"
        )
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_8da4w_without_a_calibration_source_is_refused_before_any_export(tmp_path: Path) -> None:
    from vla_edge.export.architecture import export_checkpoint

    policy = VlaPolicy(tiny_config(vision_keypoints=4))
    with pytest.raises(ConfigError, match="calibration_source = None.*calibration_frames = 0"):
        export_checkpoint(policy, tmp_path / "out", "executorch", "8da4w")
    assert not (tmp_path / "out").exists()
