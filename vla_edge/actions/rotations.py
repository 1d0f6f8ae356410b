"""Rotation formats a policy may emit, turned into rotation matrices.

Every function takes ``[H, k]`` rows and returns ``[H, 3, 3]`` matrices. A row
that names no rotation (a zero quaternion, parallel rot6d vectors) gives NaN,
which the adapter refuses as a non-finite chunk.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

RotationFormat = Literal["axis_angle", "euler_xyz", "quat_wxyz", "rot6d", "none"]

ROTATION_DIMS: dict[str, int] = {
    "axis_angle": 3,  # rotation vector: axis times angle (rad), as robosuite's OSC_POSE
    "euler_xyz": 3,  # roll, pitch, yaw (rad) about the fixed x, y, z axes: R = Rz @ Ry @ Rx
    "quat_wxyz": 4,  # unit quaternion, scalar first (normalised here)
    "rot6d": 6,  # the first two rows of the matrix (pytorch3d's matrix_to_rotation_6d)
    "none": 0,  # position only: the orientation is held
}


def _skew(v: np.ndarray) -> np.ndarray:
    out = np.zeros((*v.shape[:-1], 3, 3))
    out[..., 0, 1], out[..., 0, 2] = -v[..., 2], v[..., 1]
    out[..., 1, 0], out[..., 1, 2] = v[..., 2], -v[..., 0]
    out[..., 2, 0], out[..., 2, 1] = -v[..., 1], v[..., 0]
    return out


def axis_angle_to_matrix(rotvec_rad: np.ndarray) -> np.ndarray:
    """Rodrigues' formula; exact at angle 0 (the series limit)."""
    rotvec_rad = np.asarray(rotvec_rad, dtype=np.float64)
    angle = np.linalg.norm(rotvec_rad, axis=-1)[..., None, None]
    k = _skew(rotvec_rad)
    small = angle < 1e-8
    safe = np.where(small, 1.0, angle)
    a = np.where(small, 1.0 - angle**2 / 6.0, np.sin(safe) / safe)
    b = np.where(small, 0.5 - angle**2 / 24.0, (1.0 - np.cos(safe)) / safe**2)
    return np.eye(3) + a * k + b * (k @ k)


def euler_xyz_to_matrix(rpy_rad: np.ndarray) -> np.ndarray:
    """Extrinsic x, y, z rotations (scipy's ``from_euler("xyz")``): ``Rz Ry Rx``."""
    rpy_rad = np.asarray(rpy_rad, dtype=np.float64)
    cr, sr = np.cos(rpy_rad[..., 0]), np.sin(rpy_rad[..., 0])
    cp, sp = np.cos(rpy_rad[..., 1]), np.sin(rpy_rad[..., 1])
    cy, sy = np.cos(rpy_rad[..., 2]), np.sin(rpy_rad[..., 2])
    out = np.empty((*rpy_rad.shape[:-1], 3, 3))
    out[..., 0, 0] = cy * cp
    out[..., 0, 1] = cy * sp * sr - sy * cr
    out[..., 0, 2] = cy * sp * cr + sy * sr
    out[..., 1, 0] = sy * cp
    out[..., 1, 1] = sy * sp * sr + cy * cr
    out[..., 1, 2] = sy * sp * cr - cy * sr
    out[..., 2, 0] = -sp
    out[..., 2, 1] = cp * sr
    out[..., 2, 2] = cp * cr
    return out


def quat_wxyz_to_matrix(quat: np.ndarray) -> np.ndarray:
    """Unit quaternion (normalised first; a zero one gives NaN) to matrix."""
    quat = np.asarray(quat, dtype=np.float64)
    norm = np.linalg.norm(quat, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        w, x, y, z = np.moveaxis(quat / norm, -1, 0)
    out = np.empty((*quat.shape[:-1], 3, 3))
    out[..., 0, 0] = 1 - 2 * (y * y + z * z)
    out[..., 0, 1] = 2 * (x * y - w * z)
    out[..., 0, 2] = 2 * (x * z + w * y)
    out[..., 1, 0] = 2 * (x * y + w * z)
    out[..., 1, 1] = 1 - 2 * (x * x + z * z)
    out[..., 1, 2] = 2 * (y * z - w * x)
    out[..., 2, 0] = 2 * (x * z - w * y)
    out[..., 2, 1] = 2 * (y * z + w * x)
    out[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return out


def rot6d_to_matrix(d6: np.ndarray) -> np.ndarray:
    """Gram-Schmidt on the two rows, third row their cross product (pytorch3d's convention)."""
    d6 = np.asarray(d6, dtype=np.float64)
    a1, a2 = d6[..., :3], d6[..., 3:]
    with np.errstate(invalid="ignore", divide="ignore"):
        b1 = a1 / np.linalg.norm(a1, axis=-1, keepdims=True)
        b2 = a2 - np.sum(b1 * a2, axis=-1, keepdims=True) * b1
        b2 = b2 / np.linalg.norm(b2, axis=-1, keepdims=True)
    b3 = np.cross(b1, b2)
    return np.stack([b1, b2, b3], axis=-2)


def matrix_to_rot6d(mat: np.ndarray) -> np.ndarray:
    """The first two rows, flattened (the inverse of :func:`rot6d_to_matrix`)."""
    return np.asarray(mat, dtype=np.float64)[..., :2, :].reshape(*np.shape(mat)[:-2], 6)


def quat_wxyz_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """Rotation vector (axis times angle, rad) of a quaternion ``[..., 4]``, angle in [0, π].

    robosuite's ``quat2axisangle`` (openpi's LIBERO example) on the quaternion taken with
    ``w >= 0``: ``2 acos(w) v / |v|``, here as ``2 atan2(|v|, w) v / |v|`` (exact near 0,
    where the vector is ``2 v``). robosuite keeps the sign its quaternion has, so for
    ``w < 0`` it returns the same rotation with an angle in (π, 2π).
    """
    quat = np.asarray(quat, dtype=np.float64)
    quat = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
    quat = np.where(quat[..., :1] < 0.0, -quat, quat)
    vec = quat[..., 1:]
    sin_half = np.linalg.norm(vec, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(sin_half, quat[..., :1])
    small = sin_half < 1e-12
    return vec * np.where(small, 2.0, angle / np.where(small, 1.0, sin_half))


def to_matrix(values: np.ndarray, fmt: RotationFormat) -> np.ndarray:
    """``[H, ROTATION_DIMS[fmt]]`` rows in ``fmt`` to ``[H, 3, 3]`` matrices."""
    values = np.asarray(values, dtype=np.float64)
    if fmt == "axis_angle":
        return axis_angle_to_matrix(values)
    if fmt == "euler_xyz":
        return euler_xyz_to_matrix(values)
    if fmt == "quat_wxyz":
        return quat_wxyz_to_matrix(values)
    if fmt == "rot6d":
        return rot6d_to_matrix(values)
    if fmt == "none":
        return np.broadcast_to(np.eye(3), (*values.shape[:-1], 3, 3)).copy()
    raise ValueError(f"unknown rotation format {fmt!r}; known: {sorted(ROTATION_DIMS)}")
