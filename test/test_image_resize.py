"""``resize_with_pad`` fits any image to the model's input exactly as openpi does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_edge.core.errors import InvalidObservationError
from vla_edge.runners.image_resize import (
    MAX_IMAGE_SIDE_PX,
    padded_geometry,
    resample_bilinear,
    resize_with_pad,
)


def _rgb(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_wide_image_of_the_target_width_is_padded_top_and_bottom_unscaled() -> None:
    image = _rgb(2, 4)  # 2 rows x 4 columns into 4 x 4: scale 1, one black row each side
    out = resize_with_pad(image, 4, 4)
    expected = np.zeros((4, 4, 3), np.uint8)
    expected[1:3] = image
    np.testing.assert_array_equal(out, expected)


def test_tall_image_is_padded_left_and_right() -> None:
    image = _rgb(4, 2)
    out = resize_with_pad(image, 4, 4)
    expected = np.zeros((4, 4, 3), np.uint8)
    expected[:, 1:3] = image
    np.testing.assert_array_equal(out, expected)


def test_odd_padding_puts_the_extra_black_row_at_the_bottom() -> None:
    out = resize_with_pad(np.full((3, 8, 3), 200, np.uint8), 8, 8)
    rows_lit = np.flatnonzero(out[:, :, 0].any(axis=1))
    assert rows_lit.tolist() == [2, 3, 4]  # 2 black rows above, 3 below
    assert padded_geometry(3, 8, 8, 8) == (3, 8, 2, 0)


def test_shrinking_is_antialiased_like_pil_bilinear() -> None:
    # 1 x 4 -> 1 x 2: PIL widens the triangle filter to support 2, so output 0
    # weighs columns 0..2 by (3, 3, 1) / 7 and output 1 columns 1..3 by (1, 3, 3) / 7:
    # 500 / 7 = 71.4 and 820 / 7 = 117.1 (textbook bilinear would give 50 and 120).
    row = np.array([0, 100, 200, 40], np.uint8)
    image = np.repeat(row[None, :, None], 3, axis=2)
    out = resample_bilinear(image, 1, 2)
    np.testing.assert_array_equal(out[0, :, 0], [71, 117])
    two_rows = np.concatenate([image, image])  # 2 x 4 into 1 x 2: the same, no padding
    np.testing.assert_array_equal(resize_with_pad(two_rows, 1, 2)[0, :, 0], [71, 117])


def test_image_already_at_the_target_size_is_returned_as_is() -> None:
    image = _rgb(64, 64)
    assert resize_with_pad(image, 64, 64) is image


def test_batched_images_are_resized_one_by_one() -> None:
    batch = np.stack([_rgb(48, 96, seed) for seed in range(3)]).reshape(3, 1, 48, 96, 3)
    out = resize_with_pad(batch, 32, 32)
    assert out.shape == (3, 1, 32, 32, 3)
    for i in range(3):
        np.testing.assert_array_equal(out[i, 0], resize_with_pad(batch[i, 0], 32, 32))


def test_side_that_would_round_to_zero_keeps_one_pixel() -> None:
    out = resize_with_pad(np.full((1, 300, 3), 255, np.uint8), 64, 64)
    assert out.shape == (64, 64, 3)
    assert np.flatnonzero(out[:, :, 0].any(axis=1)).tolist() == [31]


@pytest.mark.parametrize(
    ("image", "height", "width", "words"),
    [
        (np.zeros((8, 8, 3), np.float32), 4, 4, r"image = float32 \[8, 8, 3\]: must be a uint8"),
        (np.zeros((8, 8), np.uint8), 4, 4, r"image = uint8 \[8, 8\]"),
        ([[0]], 4, 4, "image = list"),
        (np.zeros((0, 8, 3), np.uint8), 4, 4, "image height = 0 px"),
        (np.zeros((1, MAX_IMAGE_SIDE_PX + 1, 3), np.uint8), 4, 4, "image width = 4097 px"),
        (np.zeros((8, 8, 3), np.uint8), 0, 4, r"target height = 0 px: must be in \[1, 4096\]"),
    ],
)
def test_bad_images_and_targets_are_refused_by_name(image, height, width, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        resize_with_pad(image, height, width)


# ------------------------------------------------------- parity with openpi
image_tools = pytest.importorskip("openpi_client.image_tools")
PIL = pytest.importorskip("PIL")
# Pillow < 13 always resampled horizontally first; 13 goes vertically first for
# images more than twice as tall as wide (see resample_bilinear), as we do.
PILLOW_PICKS_PASS_ORDER = int(PIL.__version__.split(".")[0]) >= 13


@pytest.mark.parametrize(
    ("h", "w", "height", "width"),
    [
        (256, 256, 224, 224),  # LIBERO camera -> openpi's client
        (224, 224, 64, 64),  # openpi's client -> the bundled model
        (480, 640, 224, 224),  # 4:3 camera
        (640, 480, 224, 224),
        (180, 320, 64, 64),  # 16:9
        pytest.param(
            300,
            100,
            64,
            64,  # tall: Pillow 13 resamples vertically first
            marks=pytest.mark.skipif(not PILLOW_PICKS_PASS_ORDER, reason="Pillow < 13"),
        ),
        (20, 30, 224, 224),  # enlarging
        (7, 5, 3, 11),
    ],
)
def test_matches_openpi_client_resize_with_pad(h: int, w: int, height: int, width: int) -> None:
    image = _rgb(h, w, seed=h * 1000 + w)
    np.testing.assert_array_equal(
        resize_with_pad(image, height, width), image_tools.resize_with_pad(image, height, width)
    )


@settings(max_examples=40, deadline=None)
@given(
    h=st.integers(1, 300),
    w=st.integers(1, 300),
    height=st.integers(1, 256),
    width=st.integers(1, 256),
    seed=st.integers(0, 2**16),
)
def test_any_size_matches_openpi_client(h: int, w: int, height: int, width: int, seed: int) -> None:
    image = _rgb(h, w, seed)
    ratio = max(w / width, h / height)
    if int(h / ratio) == 0 or int(w / ratio) == 0:  # openpi (PIL) refuses a 0-px side
        return
    if h > 2 * w and not PILLOW_PICKS_PASS_ORDER:
        return
    out = resize_with_pad(image, height, width)
    assert out.shape == (height, width, 3)
    np.testing.assert_array_equal(out, image_tools.resize_with_pad(image, height, width))


def test_stretch_matches_pil_bilinear() -> None:
    from PIL import Image

    for h, w, height, width in [(224, 224, 64, 64), (10, 40, 3, 17), (5, 5, 12, 9), (100, 7, 9, 7)]:
        image = _rgb(h, w, seed=h + w)
        want = np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))
        np.testing.assert_array_equal(resample_bilinear(image, height, width), want)
