"""openpi's ``resize_with_pad`` in numpy (no torch, no PIL): aspect kept, centred on black.

openpi resizes every camera image to the model's input size with
``openpi_client.image_tools.resize_with_pad`` (its LIBERO client before
sending, its ``transforms.ResizeImages`` on the server). That function:

1. returns the image untouched when it already has the target size;
2. scales by ``ratio = max(w / width, h / height)`` to
   ``int(h / ratio) x int(w / ratio)`` with PIL's ``BILINEAR`` filter;
3. pastes the result on a black (0) canvas at
   ``(int((height - rh) / 2), int((width - rw) / 2))``, i.e. centred, the odd
   pixel of padding going to the bottom / right.

PIL's ``BILINEAR`` is not textbook bilinear sampling: when shrinking, the
triangle filter is widened by the scale factor (antialiasing), and the two
one-axis passes run in 22-bit fixed point with a uint8 image in between.
:func:`resample_bilinear` reproduces that bit for bit, so a server using
:func:`resize_with_pad` feeds its model exactly the pixels an openpi server
would.

Departure from openpi, named here once: an image so elongated that a scaled
side would round to 0 px (where PIL raises) keeps 1 px on that side.

LeRobot's SmolVLA fits images differently (``resize_with_pad`` in
``src/lerobot/policies/smolvla/modeling_smolvla.py``), on float images in
[0, 1] (``uint8 / 255``) rather than uint8:

1. the same scale, ``int(h / ratio) x int(w / ratio)`` with
   ``ratio = max(w / width, h / height)``, but resized with
   ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``:
   textbook bilinear sampling at ``(dst + 0.5) * in / out - 0.5`` (clamped at
   0), no antialiasing when shrinking, in float32;
2. zeros padded on the LEFT and TOP only (the image sits bottom-right), then
   the caller maps ``x * 2 - 1`` (so the padding becomes -1).

:func:`resize_with_pad_top_left` (a manifest's ``resize: pad_top_left``,
``resample: bilinear``) does that in numpy; :func:`resample_bilinear_float` is
the torch resize alone. The 1-px departure above applies to it too.

Isaac-GR00T N1.7's evaluation transform (albumentations, ``build_image_transformations_
albumentations`` in ``gr00t/model/gr00t_n1d7/image_augmentations.py``) fits a camera
image in up to four steps, each with OpenCV's ``INTER_AREA`` filter:

1. pads it to a square on zeros, centred, the odd pixel of padding going to the
   bottom / right (``LetterBoxPad``; always at the commit followed, optional through
   ``letter_box_transform`` in later versions);
2. resizes it so that its shortest side is the model's (``SmallestMaxSize``: each side
   ``round(side * size / shortest)``, Python's rounding; no resize at scale 1);
3. crops the centre ``int(h * f) x int(w * f)`` (at least 1 px) at
   ``((h - ch) // 2, (w - cw) // 2)``, ``f`` the crop fraction;
4. resizes that crop as in step 2.

:func:`fit_center_crop` (a manifest's ``resize: center_crop``, ``resample: cv2_area``)
does those steps with ``cv2.resize``, so its pixels are upstream's wherever both run the
same OpenCV build. Without the letterbox it takes square images only: upstream then
hands a non-square result to the Qwen3-VL processor at its own shape, which a program of
fixed square input cannot take.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from vla_edge.core.errors import InvalidObservationError

MAX_IMAGE_SIDE_PX = 4096
"""Largest accepted image height or width, source or target."""

FIT_MODES = ("pad", "pad_top_left", "center_crop")
"""Resize modes with which a runner fits images of any size itself: ``pad`` (openpi's
:func:`resize_with_pad`), ``pad_top_left`` (LeRobot SmolVLA's, :func:`resize_with_pad_top_left`),
``center_crop`` (Isaac-GR00T N1.7's, :func:`fit_center_crop`; square images, or any with
the letterbox)."""

_PRECISION_BITS = 22
"""Fixed-point bits of PIL's 8-bit resampling coefficients (32 - 8 - 2)."""


def _triangle(x: float) -> float:
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


@functools.lru_cache(maxsize=64)
def _taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Source indices ``[n_out, k]`` and fixed-point weights ``[n_out, k]`` of one axis.

    PIL's ``precompute_coeffs`` + ``normalize_coeffs_8bpc`` for the bilinear
    filter (support 1): pixel centres at ``+ 0.5``, the filter widened by the
    scale when shrinking, weights normalised in double precision, then rounded
    half away from zero to ``_PRECISION_BITS``. Computed in plain Python floats
    in PIL's order so the sums round the same way.
    """
    scale = n_in / n_out
    filter_scale = max(scale, 1.0)
    support = filter_scale  # bilinear support 1.0, widened
    inv_filter_scale = 1.0 / filter_scale  # PIL multiplies by the reciprocal
    k_size = math.ceil(support) * 2 + 1
    index = np.zeros((n_out, k_size), dtype=np.intp)
    weight = np.zeros((n_out, k_size), dtype=np.int64)
    one = float(1 << _PRECISION_BITS)
    for out_x in range(n_out):
        centre = (out_x + 0.5) * scale
        lo = max(int(centre - support + 0.5), 0)
        hi = min(int(centre + support + 0.5), n_in)
        taps = [_triangle((x - centre + 0.5) * inv_filter_scale) for x in range(lo, hi)]
        total = 0.0
        for w in taps:
            total += w
        for k, w in enumerate(taps):
            w = w / total if total != 0.0 else w
            index[out_x, k] = lo + k
            weight[out_x, k] = int(w * one - 0.5) if w < 0.0 else int(w * one + 0.5)
        index[out_x, len(taps) :] = lo  # zero weight: any valid index
    index.setflags(write=False)
    weight.setflags(write=False)
    return index, weight


def _pass(image: np.ndarray, axis: int, n_out: int) -> np.ndarray:
    """Resample ``uint8`` ``image`` along ``axis`` (0: rows, 1: columns) to ``n_out``."""
    index, weight = _taps(image.shape[axis], n_out)
    shape = [1] * image.ndim
    shape[axis] = n_out
    out_shape = list(image.shape)
    out_shape[axis] = n_out
    acc = np.full(out_shape, 1 << (_PRECISION_BITS - 1), dtype=np.int64)
    for k in range(index.shape[1]):  # one tap at a time: memory stays one output image
        acc += np.take(image, index[:, k], axis=axis) * weight[:, k].reshape(shape)
    return np.clip(acc >> _PRECISION_BITS, 0, 255).astype(np.uint8)


def resample_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``uint8 [h, w, C]`` -> ``uint8 [height, width, C]`` exactly as PIL's ``BILINEAR`` resize.

    Two passes with a uint8 image in between; an axis already at its size is not
    resampled. The order is Pillow 13's: vertical first when the height
    shrinks by more than twice as many pixels as the width, else horizontal
    first (older Pillow always went horizontal first; the two orders can
    differ by 1 in a pixel, and only for images more than twice as tall as
    wide).
    """
    h, w = image.shape[:2]
    vertical_first = h - height > 0 and h - height > 2 * (w - width)
    out = image
    for axis in (0, 1) if vertical_first else (1, 0):
        n_out = height if axis == 0 else width
        if out.shape[axis] != n_out:
            out = _pass(out, axis, n_out)
    return out


def _check_side(name: str, value: int) -> None:
    if not 1 <= value <= MAX_IMAGE_SIDE_PX:
        raise InvalidObservationError(f"{name} = {value} px: must be in [1, {MAX_IMAGE_SIDE_PX}]")


def padded_geometry(h: int, w: int, height: int, width: int) -> tuple[int, int, int, int]:
    """``(resized_h, resized_w, top, left)``: an ``h x w`` image fitted into ``height x width``."""
    ratio = max(w / width, h / height)
    resized_h = max(1, int(h / ratio))
    resized_w = max(1, int(w / ratio))
    top = max(0, int((height - resized_h) / 2))
    left = max(0, int((width - resized_w) / 2))
    return resized_h, resized_w, top, left


def _check_image(image: np.ndarray, height: int, width: int) -> tuple[int, int]:
    """``(h, w)`` of a ``uint8 [..., h, w, C]`` image, refusing bad images and targets."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim < 3:
        shown = (
            f"{image.dtype} {list(image.shape)}"
            if isinstance(image, np.ndarray)
            else type(image).__name__
        )
        raise InvalidObservationError(f"image = {shown}: must be a uint8 array [..., H, W, C]")
    h, w = image.shape[-3], image.shape[-2]
    for name, value in (("image height", h), ("image width", w)):
        _check_side(name, value)
    for name, value in (("target height", height), ("target width", width)):
        _check_side(name, value)
    return h, w


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``uint8 [..., h, w, C]`` -> ``uint8 [..., height, width, C]`` as openpi does.

    Aspect ratio kept, scaled with PIL's bilinear filter, centred on zeros;
    returned as is when already ``height x width``. Leading axes are a batch.

    Raises:
        InvalidObservationError: ``image`` is not a uint8 array of at least 3
            dimensions, or a side (source or target) is outside
            ``[1, MAX_IMAGE_SIDE_PX]``.
    """
    h, w = _check_image(image, height, width)
    if (h, w) == (height, width):
        return image
    resized_h, resized_w, top, left = padded_geometry(h, w, height, width)
    frames = image.reshape(-1, h, w, image.shape[-1])
    out = np.zeros((frames.shape[0], height, width, image.shape[-1]), dtype=np.uint8)
    for frame, canvas in zip(frames, out, strict=True):
        resized = resample_bilinear(frame, resized_h, resized_w)
        canvas[top : top + resized_h, left : left + resized_w] = resized
    return out.reshape(*image.shape[:-3], height, width, image.shape[-1])


# ------------------------------------------------------- LeRobot SmolVLA's variant


@functools.lru_cache(maxsize=64)
def _linear_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(i0, i1, w0, w1)`` of one axis as torch's bilinear kernel computes them.

    ATen's ``area_pixel_compute_scale`` / ``area_pixel_compute_source_index``
    (``align_corners=False``, no scale factor given) in float32:
    ``src = max(in / out * (dst + 0.5) - 0.5, 0)``, ``i0 = floor(src)``,
    ``i1 = i0 + 1`` except at the last pixel, ``w1 = src - i0``, ``w0 = 1 - w1``;
    an axis of the same size is copied (``w0 = 1``). The compiled kernel fuses
    ``scale * (dst + 0.5) - 0.5`` into one multiply-add (one rounding), done
    here exactly in float64 and rounded once to float32: the weights then
    equal torch's bit for bit.
    """
    dst = np.arange(n_out)
    if n_in == n_out:
        taps = (dst, dst, np.ones(n_out, np.float32), np.zeros(n_out, np.float32))
    else:
        scale = np.float64(np.float32(n_in) / np.float32(n_out))
        half = (dst.astype(np.float32) + np.float32(0.5)).astype(np.float64)
        src = (scale * half - 0.5).astype(np.float32)  # a float32 product is exact in float64
        src = np.maximum(src, np.float32(0.0))
        i0 = np.minimum(np.floor(src).astype(np.intp), n_in - 1)
        w1 = np.clip(src - i0.astype(np.float32), np.float32(0.0), np.float32(1.0))
        i1 = i0 + (i0 < n_in - 1)
        taps = (i0, i1, np.float32(1.0) - w1, w1)
    for array in taps:
        array.setflags(write=False)
    return taps


def resample_bilinear_float(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``float32 [h, w, C]`` -> ``float32 [height, width, C]`` as torch's bilinear resize.

    ``torch.nn.functional.interpolate(x, size=(height, width), mode="bilinear",
    align_corners=False)`` (no antialiasing): torch's sampling positions and
    weights, each output ``(x00 w0 + x01 w1) h0 + (x10 w0 + x11 w1) h1`` in
    float32. Torch itself picks one of two kernels by thread count and channels
    (and fuses multiply-adds in them), so the sums can differ from its result
    in the last bit or two (below 3e-7 on [0, 1] pixels).
    """
    image = np.asarray(image, dtype=np.float32)
    r0, r1, h0, h1 = _linear_taps(image.shape[0], height)
    c0, c1, w0, w1 = _linear_taps(image.shape[1], width)
    w0, w1 = w0[None, :, None], w1[None, :, None]

    def across(rows: np.ndarray) -> np.ndarray:
        return rows[:, c0] * w0 + rows[:, c1] * w1

    return across(image[r0]) * h0[:, None, None] + across(image[r1]) * h1[:, None, None]


def resize_with_pad_top_left(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``uint8 [..., h, w, C]`` -> ``float32 [..., height, width, C]`` in [0, 1] as LeRobot SmolVLA.

    ``image / 255`` resized with :func:`resample_bilinear_float` to the aspect-kept
    size of :func:`padded_geometry`, placed bottom-right on zeros (the padding on
    the left and the top). Leading axes are a batch.

    Raises:
        InvalidObservationError: as :func:`resize_with_pad`.
    """
    h, w = _check_image(image, height, width)
    resized_h, resized_w, _, _ = padded_geometry(h, w, height, width)
    top, left = height - resized_h, width - resized_w
    frames = image.reshape(-1, h, w, image.shape[-1])
    out = np.zeros((frames.shape[0], height, width, image.shape[-1]), dtype=np.float32)
    for frame, canvas in zip(frames, out, strict=True):
        pixels = frame.astype(np.float32) / np.float32(255.0)
        canvas[top:, left:] = resample_bilinear_float(pixels, resized_h, resized_w)
    return out.reshape(*image.shape[:-3], height, width, image.shape[-1])


# ------------------------------------------------------- Isaac-GR00T N1.7's eval transform


def letterbox_square(image: np.ndarray) -> np.ndarray:
    """``uint8 [h, w, C]`` centred on a zero ``max(h, w)`` square (the odd pixel bottom / right)."""
    h, w = image.shape[:2]
    if h == w:
        return image
    side = max(h, w)
    top, left = (side - h) // 2, (side - w) // 2
    out = np.zeros((side, side, *image.shape[2:]), dtype=image.dtype)
    out[top : top + h, left : left + w] = image
    return out


def shortest_side_size(h: int, w: int, size: int) -> tuple[int, int]:
    """``(h, w)`` with the shortest side at ``size`` (albumentations' ``SmallestMaxSize``)."""
    scale = size / float(min(h, w))
    if scale == 1.0:
        return h, w
    return round(h * scale), round(w * scale)


def center_crop_box(h: int, w: int, crop_fraction: float) -> tuple[int, int, int, int]:
    """``(top, left, crop_h, crop_w)`` of the centre ``crop_fraction`` of an ``h x w`` image."""
    crop_h = max(1, int(h * crop_fraction))
    crop_w = max(1, int(w * crop_fraction))
    return (h - crop_h) // 2, (w - crop_w) // 2, crop_h, crop_w


def _area_resize(image: np.ndarray, size: int) -> np.ndarray:
    """``image`` with its shortest side scaled to ``size`` by ``cv2.INTER_AREA`` (or as it is)."""
    import cv2

    h, w = image.shape[:2]
    new_h, new_w = shortest_side_size(h, w, size)
    if (new_h, new_w) == (h, w):
        return image
    resized = cv2.resize(np.ascontiguousarray(image), (new_w, new_h), interpolation=cv2.INTER_AREA)
    return resized.reshape(new_h, new_w, *image.shape[2:])


def fit_center_crop(
    image: np.ndarray, height: int, width: int, crop_fraction: float, letterbox: bool = False
) -> np.ndarray:
    """``uint8 [..., h, w, C]`` -> ``uint8 [..., height, width, C]`` as Isaac-GR00T N1.7 evaluates.

    Letterbox (when ``letterbox``), shortest side to ``height``, centre crop of
    ``crop_fraction``, shortest side to ``height`` again, each resize ``cv2.INTER_AREA``
    (see the module docstring). Leading axes are a batch.

    Raises:
        InvalidObservationError: as :func:`resize_with_pad`; the target is not square;
            ``crop_fraction`` is outside ``(0, 1]``; the image is not square and
            ``letterbox`` is off.
    """
    h, w = _check_image(image, height, width)
    if height != width:
        raise InvalidObservationError(
            f"target = {height} x {width} px: the centre-crop fit makes square images only"
        )
    if not 0.0 < crop_fraction <= 1.0:
        raise InvalidObservationError(f"crop_fraction = {crop_fraction}: must be in (0, 1]")
    if h != w and not letterbox:
        raise InvalidObservationError(
            f"image = {h} x {w} px is not square: GR00T's processor gives such an image to "
            "its vision model at that shape, which the square program cannot take; crop the "
            "camera to a square, or fit with the letterbox (host.images.letterbox: true, "
            "as a GR00T import writes)"
        )
    frames = image.reshape(-1, h, w, image.shape[-1])
    out = np.empty((frames.shape[0], height, width, image.shape[-1]), dtype=np.uint8)
    for frame, canvas in zip(frames, out, strict=True):
        square = _area_resize(letterbox_square(frame), height)
        top, left, crop_h, crop_w = center_crop_box(*square.shape[:2], crop_fraction)
        canvas[...] = _area_resize(square[top : top + crop_h, left : left + crop_w], height)
    return out.reshape(*image.shape[:-3], height, width, image.shape[-1])
