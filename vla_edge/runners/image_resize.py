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
"""

from __future__ import annotations

import functools
import math

import numpy as np

from vla_edge.core.errors import InvalidObservationError

MAX_IMAGE_SIDE_PX = 4096
"""Largest accepted image height or width, source or target."""

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


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``uint8 [..., h, w, C]`` -> ``uint8 [..., height, width, C]`` as openpi does.

    Aspect ratio kept, scaled with PIL's bilinear filter, centred on zeros;
    returned as is when already ``height x width``. Leading axes are a batch.

    Raises:
        InvalidObservationError: ``image`` is not a uint8 array of at least 3
            dimensions, or a side (source or target) is outside
            ``[1, MAX_IMAGE_SIDE_PX]``.
    """
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
    if (h, w) == (height, width):
        return image
    resized_h, resized_w, top, left = padded_geometry(h, w, height, width)
    frames = image.reshape(-1, h, w, image.shape[-1])
    out = np.zeros((frames.shape[0], height, width, image.shape[-1]), dtype=np.uint8)
    for frame, canvas in zip(frames, out, strict=True):
        resized = resample_bilinear(frame, resized_h, resized_w)
        canvas[top : top + resized_h, left : left + resized_w] = resized
    return out.reshape(*image.shape[:-3], height, width, image.shape[-1])
