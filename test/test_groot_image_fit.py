"""GR00T N1.7's image fit (``resize: center_crop``): upstream's evaluation transform.

Each step is checked against the OpenCV calls upstream's albumentations transform makes
(``LetterBoxPad``: ``cv2.copyMakeBorder``; ``SmallestMaxSize`` / ``Resize``: ``cv2.resize``
with ``INTER_AREA``; ``FractionalCenterCrop``: a slice), then the schema, the import and
the runner that carry the mode.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from export_fixtures import edited_export, observation, shared_onnx_export
from test_arch_groot_layout import write_upstream_n17

from vla_edge.archs.groot import GrootConfig, GrootModel
from vla_edge.archs.groot.checkpoint import image_fit_fields, read_checkpoint
from vla_edge.archs.groot.processor import image_fit
from vla_edge.archs.policy_dir import check_image_fit
from vla_edge.core.errors import (
    CheckpointError,
    InvalidObservationError,
    ManifestMismatchError,
    PolicyDirError,
)
from vla_edge.export.manifest import load_manifest
from vla_edge.runners.image_resize import (
    FIT_MODES,
    center_crop_box,
    fit_center_crop,
    shortest_side_size,
)
from vla_edge.runners.preprocess import images_input


def _rgb(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _area(image: np.ndarray, h: int, w: int) -> np.ndarray:
    return cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA)


# ------------------------------------------------------------------ the fit, step by step


def test_crop_of_256_at_095_keeps_243_px_centred_at_6() -> None:
    assert center_crop_box(256, 256, 0.95) == (6, 6, 243, 243)
    assert center_crop_box(224, 224, 0.95) == (6, 6, 212, 212)  # int(212.8), (224 - 212) // 2
    assert center_crop_box(3, 3, 0.1) == (1, 1, 1, 1)  # at least one pixel


def test_shortest_side_rounds_as_python_and_skips_scale_one() -> None:
    assert shortest_side_size(480, 640, 256) == (256, 341)  # 341.33
    assert shortest_side_size(2, 3, 3) == (3, 4)  # 4.5 rounds to even, as round() does
    assert shortest_side_size(256, 300, 256) == (256, 300)


def test_square_camera_equals_upstreams_opencv_steps() -> None:
    image = _rgb(300, 300)
    want = _area(image, 256, 256)[6:249, 6:249]
    want = _area(np.ascontiguousarray(want), 256, 256)
    np.testing.assert_array_equal(fit_center_crop(image, 256, 256, 0.95), want)


def test_square_camera_at_the_model_size_is_only_cropped_and_resized_once() -> None:
    image = _rgb(256, 256, seed=1)
    want = _area(np.ascontiguousarray(image[6:249, 6:249]), 256, 256)
    np.testing.assert_array_equal(fit_center_crop(image, 256, 256, 0.95), want)
    np.testing.assert_array_equal(fit_center_crop(image, 256, 256, 1.0), image)


@pytest.mark.parametrize(("h", "w"), [(201, 300), (300, 201)])
def test_letterbox_pads_centred_with_the_odd_pixel_bottom_right(h: int, w: int) -> None:
    image = _rgb(h, w, seed=2)
    pad_h, pad_w = 300 - h, 300 - w
    square = cv2.copyMakeBorder(
        image,
        pad_h // 2,
        pad_h - pad_h // 2,
        pad_w // 2,
        pad_w - pad_w // 2,
        cv2.BORDER_CONSTANT,
        value=0,
    )
    assert square.shape == (300, 300, 3)
    want = _area(square, 64, 64)
    top, left, ch, cw = center_crop_box(64, 64, 0.9)
    want = _area(np.ascontiguousarray(want[top : top + ch, left : left + cw]), 64, 64)
    got = fit_center_crop(image, 64, 64, 0.9, letterbox=True)
    np.testing.assert_array_equal(got, want)


def test_leading_axes_are_a_batch() -> None:
    frames = np.stack([_rgb(40, 40, seed=s) for s in range(3)])
    got = fit_center_crop(frames, 32, 32, 0.95)
    assert got.shape == (3, 32, 32, 3)
    np.testing.assert_array_equal(got[2], fit_center_crop(frames[2], 32, 32, 0.95))


def test_non_square_image_without_letterbox_is_refused_with_its_size() -> None:
    with pytest.raises(InvalidObservationError, match="480 x 640 px is not square"):
        fit_center_crop(_rgb(480, 640), 256, 256, 0.95)
    with pytest.raises(InvalidObservationError, match="crop_fraction = 0"):
        fit_center_crop(_rgb(8, 8), 8, 8, 0.0)


def test_images_input_names_the_non_square_camera_and_what_to_do() -> None:
    images = {"wrist": _rgb(48, 64)}
    with pytest.raises(
        InvalidObservationError, match=r"images\['wrist'\]: image = 48 x 64 px"
    ) as err:
        images_input(images, ["wrist", None], 32, 32, (-1.0, 1.0), "center_crop", 0.95)
    assert "crop the camera to a square" in str(err.value)
    nchw, mask = images_input(
        images, ["wrist", None], 32, 32, (-1.0, 1.0), "center_crop", 0.95, True
    )
    fitted = fit_center_crop(images["wrist"], 32, 32, 0.95, letterbox=True)
    np.testing.assert_array_equal(nchw[0], fitted.transpose(2, 0, 1) / np.float32(255) * 2 - 1)
    np.testing.assert_array_equal(mask, [1.0, 0.0])


def test_center_crop_is_a_mode_the_runner_fits() -> None:
    assert FIT_MODES == ("pad", "pad_top_left", "center_crop")


# ---------------------------------------------------------------- manifest and policy dir


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return shared_onnx_export(tmp_path_factory)


def _center_crop(**fields):
    def edit(data):
        data["host"]["images"].update({"resize": "center_crop", **fields})

    return edit


def test_manifest_with_center_crop_loads_and_the_runner_refuses_a_non_square_camera(
    onnx_dir, tmp_path
) -> None:
    from vla_edge.runners.onnx_runner import OnnxRunner

    folder = edited_export(
        onnx_dir, tmp_path / "ok", _center_crop(crop_fraction=0.95, resample="cv2_area")
    )
    assert load_manifest(folder).data["host"]["images"]["crop_fraction"] == 0.95
    runner = OnnxRunner(folder, threads=1)
    assert runner.spec.fits_images and runner.image_resize == "center_crop"
    obs = observation()
    camera = sorted(obs.images)[0]
    obs.images[camera] = _rgb(40, 56)
    with pytest.raises(InvalidObservationError, match=rf"images\['{camera}'\]: image = 40 x 56 px"):
        runner.infer(obs)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({}, "host.images.crop_fraction = None"),
        ({"crop_fraction": 1.5}, r"host.images.crop_fraction = 1.5, expected a number in \(0, 1\]"),
        ({"crop_fraction": 0.9, "letterbox": "yes"}, "host.images.letterbox = 'yes'"),
        ({"crop_fraction": 0.9, "resample": "pil_bilinear"}, "host.images.resample"),
    ],
)
def test_manifest_center_crop_fields_are_checked_by_name(onnx_dir, tmp_path, fields, match) -> None:
    bad = edited_export(onnx_dir, tmp_path / "bad", _center_crop(**fields))
    with pytest.raises(ManifestMismatchError, match=match):
        load_manifest(bad)


def test_manifest_crop_fields_with_another_resize_are_refused(onnx_dir, tmp_path) -> None:
    def edit(data):
        data["host"]["images"]["crop_fraction"] = 0.9

    bad = edited_export(onnx_dir, tmp_path / "bad", edit)
    with pytest.raises(
        ManifestMismatchError, match="host.images.crop_fraction = 0.9 is for resize"
    ):
        load_manifest(bad)


@pytest.mark.parametrize(
    ("images", "match"),
    [
        ({"resize": "center_crop", "height": 32, "width": 32}, "images.crop_fraction = None"),
        (
            {
                "resize": "center_crop",
                "crop_fraction": 0.9,
                "letterbox": 1,
                "height": 32,
                "width": 32,
            },
            "images.letterbox = 1",
        ),
        (
            {"resize": "center_crop", "crop_fraction": 0.9, "height": 32, "width": 48},
            "fits square images",
        ),
        ({"resize": "pad", "letterbox": True}, "images.letterbox = True is for resize center_crop"),
    ],
)
def test_policy_dir_center_crop_fields_are_checked_by_name(images, match) -> None:
    with pytest.raises(PolicyDirError, match=match):
        check_image_fit(images, "policy.yaml")


def test_policy_dir_check_passes_pi0_and_smolvla_fits_as_they_are() -> None:
    from vla_edge.archs.pi0.arch import facts as pi0_facts
    from vla_edge.archs.pi0.config import Pi0Config
    from vla_edge.archs.smolvla.arch import facts as smolvla_facts
    from vla_edge.archs.smolvla.config import SmolVLAConfig

    pi0 = pi0_facts(Pi0Config.tiny()).images
    smolvla = smolvla_facts(SmolVLAConfig.tiny()).images
    assert pi0 == {"pixel_range": [-1.0, 1.0], "resize": "pad"}
    assert smolvla == {"pixel_range": [-1.0, 1.0], "resize": "pad_top_left", "resample": "bilinear"}
    for images in (pi0, smolvla):
        check_image_fit(images, "policy.yaml")


# ---------------------------------------------------------------- the import


def test_image_fit_fields_follow_upstreams_precedence() -> None:
    assert image_fit_fields({}, 256) == {"image_crop_fraction": 0.95, "image_letterbox": True}
    albumentations = {"use_albumentations": True, "shortest_image_edge": 256}
    # letter_box_transform is stored, unread, at the followed commit: the pad is always on
    assert image_fit_fields(
        {**albumentations, "crop_fraction": 0.9, "letter_box_transform": False}, 256
    ) == {"image_crop_fraction": 0.9, "image_letterbox": True}
    cropped = {"image_crop_size": [240, 240], "image_target_size": [256, 256]}
    assert image_fit_fields({**albumentations, **cropped, "crop_fraction": None}, 256)[
        "image_crop_fraction"
    ] == pytest.approx(240 / 256)
    # torchvision's transform (use_albumentations false) crops image_crop_size
    assert image_fit_fields({**cropped, "crop_fraction": 0.5}, 256)["image_crop_fraction"] == (
        240 / 256
    )


@pytest.mark.parametrize(
    ("processor", "match"),
    [
        ({"use_albumentations": True, "crop_fraction": None}, "crop_fraction is null"),
        ({"crop_fraction": 1.2}, r"expected a value in \(0, 1\]"),
        ({"use_albumentations": True, "shortest_image_edge": 224}, "shortest_image_edge = 224 px"),
    ],
)
def test_image_fit_fields_refuse_what_the_programs_cannot_reproduce(processor, match) -> None:
    with pytest.raises(CheckpointError, match=match):
        image_fit_fields(processor, 256)


@pytest.fixture(scope="module")
def tiny() -> GrootModel:
    torch.manual_seed(0)
    return GrootModel(GrootConfig.tiny()).eval()


def test_import_reads_the_fit_from_processor_config_and_writes_center_crop(
    tmp_path: Path, tiny: GrootModel
) -> None:
    size = tiny.config.vision.image_size
    path = write_upstream_n17(
        tmp_path / "ckpt",
        tiny,
        processor_kwargs={
            "use_albumentations": True,
            "shortest_image_edge": size,
            "crop_fraction": 0.9,
            "letter_box_transform": False,
        },
    )
    config = read_checkpoint(path, embodiment="libero_sim", defaults=GrootConfig.tiny()).config
    assert (config.image_crop_fraction, config.image_letterbox) == (0.9, True)
    assert image_fit(config) == {
        "resize": "center_crop",
        "resample": "cv2_area",
        "crop_fraction": 0.9,
        "letterbox": True,
    }
