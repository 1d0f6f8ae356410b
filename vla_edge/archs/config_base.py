"""What every architecture's config shares: a frozen pydantic base and the size checks.

* :class:`FrozenConfig`: extra fields forbidden, immutable, and every validation failure
  a :class:`~vla_edge.core.errors.ConfigError` naming the class, field, problem and value.
* :func:`check_heads`, :func:`check_patches`: the consistency checks of a decoder's
  attention heads and of a vision tower's patch grid, each message naming the sizes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from vla_edge.core.errors import ConfigError


class FrozenConfig(BaseModel):
    """An immutable pydantic model whose validation errors are :class:`ConfigError`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or type(self).__name__}: {err['msg']}"
                f" (got {err.get('input')!r})"
                for err in exc.errors()
            )
            raise ConfigError(f"{type(self).__name__}: {problems}") from None


def check_heads(owner: str, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
    """Grouped-query heads and RoPE: ``num_kv_heads`` divides ``num_heads``, ``head_dim`` even.

    Raises:
        ConfigError: prefixed with ``owner`` (the config class's name).
    """
    if num_heads % num_kv_heads:
        raise ConfigError(
            f"{owner}: num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}"
        )
    if head_dim % 2:
        raise ConfigError(f"{owner}: head_dim={head_dim} must be even (RoPE)")


def check_patches(
    owner: str, hidden: int, num_heads: int, image_size: int, patch_size: int
) -> None:
    """A vision tower: ``num_heads`` divides ``hidden``, ``patch_size`` divides ``image_size``.

    Raises:
        ConfigError: prefixed with ``owner`` (the config class's name).
    """
    if hidden % num_heads:
        raise ConfigError(f"{owner}: num_heads={num_heads} does not divide hidden={hidden}")
    if image_size % patch_size:
        raise ConfigError(
            f"{owner}: patch_size={patch_size} does not divide image_size={image_size}"
        )
