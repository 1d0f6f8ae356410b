from dataclasses import replace

import pytest
from export_fixtures import copy_export, edited_export, observation, shared_onnx_export

from vla_edge.core.errors import ManifestMismatchError
from vla_edge.export.manifest import load_manifest
from vla_edge.runners.onnx_runner import OnnxRunner


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return shared_onnx_export(tmp_path_factory)


def _set_h(data, h):
    data["chunk_horizon"] = h


def test_manifest_with_wrong_chunk_horizon_is_refused_naming_the_field(onnx_dir, tmp_path) -> None:
    bad = edited_export(onnx_dir, tmp_path / "x", lambda d: _set_h(d, 12))
    with pytest.raises(ManifestMismatchError, match="chunk_horizon") as err:
        OnnxRunner(bad)
    assert "host.noise.shape = [1, 10, 7]" in str(err.value) and "[1, 12, 7]" in str(err.value)


def test_manifest_with_wrong_camera_count_is_refused_naming_the_field(onnx_dir, tmp_path) -> None:
    def three_cameras(d):
        d["cameras"] = ["agentview", "wrist", "side"]

    bad = edited_export(onnx_dir, tmp_path / "x", three_cameras)
    with pytest.raises(ManifestMismatchError, match="field cameras") as err:
        load_manifest(bad)
    assert "host.images.slots map the cameras ['agentview', 'wrist']" in str(err.value)

    def three_slots(d):
        three_cameras(d)
        d["host"]["images"]["slots"].append({"name": "side", "camera": "side"})

    bad = edited_export(onnx_dir, tmp_path / "y", three_slots)
    with pytest.raises(
        ManifestMismatchError, match="host.images.shape = \\[2, 3, 32, 32\\]"
    ) as err:
        load_manifest(bad)
    assert "imply [3, 3, 32, 32]" in str(err.value)


def test_manifest_with_wrong_dtype_is_refused_naming_the_field(onnx_dir, tmp_path) -> None:
    def half_images(d):
        d["stages"]["vision_encoder"]["inputs"][0]["dtype"] = "float16"

    bad = edited_export(onnx_dir, tmp_path / "x", half_images)
    with pytest.raises(ManifestMismatchError, match=r"images\.dtype = 'float16'") as err:
        OnnxRunner(bad)
    assert "its source host.images has 'float32'" in str(err.value)


def test_manifest_with_wrong_image_size_is_refused_naming_the_field(onnx_dir, tmp_path) -> None:
    bad = edited_export(onnx_dir, tmp_path / "x", lambda d: d.update(image_height=64))
    with pytest.raises(ManifestMismatchError, match="image_height"):
        OnnxRunner(bad)


def test_manifest_consistent_with_itself_but_not_with_its_program_is_refused(
    onnx_dir, tmp_path
) -> None:
    def horizon_12_everywhere(d):
        d["chunk_horizon"] = 12
        for name in ("noise", "prefix_actions"):
            d["host"][name]["shape"] = [1, 12, 7]
        d["host"]["prefix_mask"]["shape"] = [1, 12]
        for stage in ("action_head",):
            for t in d["stages"][stage]["inputs"] + d["stages"][stage]["outputs"]:
                if t["name"] in ("noise", "prefix_actions", "actions_norm"):
                    t["shape"] = [1, 12, 7]
                if t["name"] == "prefix_mask":
                    t["shape"] = [1, 12]

    bad = edited_export(onnx_dir, tmp_path / "x", horizon_12_everywhere)
    assert load_manifest(bad).data["chunk_horizon"] == 12
    with pytest.raises(ManifestMismatchError) as err:
        OnnxRunner(bad)
    message = str(err.value)
    assert "stages.action_head.inputs.noise.shape = [1, 12, 7]" in message
    assert "action_head.onnx has [1, 10, 7]" in message


def test_runner_refuses_an_export_that_differs_from_the_expected_spec(onnx_dir) -> None:
    spec = OnnxRunner(onnx_dir).spec
    with pytest.raises(ManifestMismatchError, match="chunk_horizon = 10 .* expected 12"):
        OnnxRunner(onnx_dir, expected=replace(spec, chunk_horizon=12))
    with pytest.raises(ManifestMismatchError, match="cameras"):
        OnnxRunner(onnx_dir, expected=replace(spec, cameras=("agentview",)))
    with pytest.raises(ManifestMismatchError, match="image_width = 32 .* expected 64"):
        OnnxRunner(onnx_dir, expected=replace(spec, image_width=64))
    assert OnnxRunner(onnx_dir, expected=spec).infer(observation()).positions.shape == (10, 7)


def test_manifest_missing_a_field_or_a_program_is_refused(onnx_dir, tmp_path) -> None:
    bad = edited_export(onnx_dir, tmp_path / "a", lambda d: d.pop("dt_action_s"))
    with pytest.raises(ManifestMismatchError, match="field dt_action_s is missing"):
        load_manifest(bad)
    gone = copy_export(onnx_dir, tmp_path / "b")
    (gone / "fusion.onnx").unlink()
    with pytest.raises(ManifestMismatchError, match="stages.fusion.file = 'fusion.onnx'"):
        load_manifest(gone)
    with pytest.raises(ManifestMismatchError, match="manifest.json not found"):
        load_manifest(tmp_path)


def test_a_program_is_reused_only_when_made_the_same_way(onnx_dir, tmp_path) -> None:
    from vla_edge.export.pipeline import reuse_stage
    from vla_edge.export.quant_recipes import StageQuant

    manifest = load_manifest(onnx_dir)
    stage = manifest.stages["fusion"]
    declared = (stage.rate, stage.inputs, stage.outputs)
    same = {
        "weights_sha256": manifest.data["source"]["weights_sha256"],
        "flow_steps": manifest.data["flow_steps"],
        "calibration_inputs": 24,
    }
    out = tmp_path / "out"
    out.mkdir()

    def reused(folder, settings=None, weights=same):  # noqa: ANN001, ANN202
        settings = settings or StageQuant()
        return reuse_stage("fusion", folder, out, "onnx", settings, declared, weights)

    entry = reused(onnx_dir)
    assert entry is not None and entry["reused_from"] == str(onnx_dir)
    assert (out / "fusion.onnx").read_bytes() == (onnx_dir / "fusion.onnx").read_bytes()
    assert reused(onnx_dir, StageQuant(scheme="8da8w")) is None
    assert reused(onnx_dir, weights={**same, "weights_sha256": "0" * 64}) is None
    assert reused(onnx_dir, weights={**same, "flow_steps": 9}) is None
    assert reused(onnx_dir, weights=None) is None  # only the frozen language stage goes without
    before_recipes = edited_export(onnx_dir, tmp_path / "old", lambda d: d.pop("quant_recipe"))
    assert reused(before_recipes) is None
