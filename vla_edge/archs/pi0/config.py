"""One validated config that builds π0 and π0.5 at every size.

Sizes follow openpi (``src/openpi/models/gemma.py: get_config``,
``src/openpi/models/pi0_config.py``): PaliGemma's Gemma 2B (``gemma_2b``) with a
Gemma 300M action expert (``gemma_300m``), SigLIP So400m/14 at 224², 32 padded
action dimensions. :meth:`Pi0Config.full_pi0`, :meth:`Pi0Config.full_pi05` and
:meth:`Pi0Config.tiny` are the named sizes; every invalid field or inconsistent
pair of sizes is a :class:`~vla_edge.core.errors.ConfigError` at construction.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from vla_edge.archs.config_base import FrozenConfig, check_heads, check_patches
from vla_edge.core.errors import ConfigError

PALIGEMMA_VOCAB_SIZE = 257152
"""Rows of PaliGemma's token embedding (and of its tied ``lm_head``)."""

IMAGE_SLOTS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
"""openpi's image slots, in prefix order (``preprocessing_pytorch.IMAGE_KEYS``)."""


class GemmaSize(FrozenConfig):
    """Sizes of one Gemma decoder (the PaliGemma language model or the action expert)."""

    width: int = Field(ge=2, le=16384)
    depth: int = Field(ge=1, le=128)
    mlp_dim: int = Field(ge=1, le=131072)
    num_heads: int = Field(ge=1, le=128)
    num_kv_heads: int = Field(ge=1, le=128)
    head_dim: int = Field(ge=2, le=1024)

    @model_validator(mode="after")
    def _check(self) -> GemmaSize:
        check_heads("GemmaSize", self.num_heads, self.num_kv_heads, self.head_dim)
        if self.width % 2:
            raise ConfigError(f"GemmaSize: width={self.width} must be even")
        return self

    @classmethod
    def gemma_2b(cls) -> GemmaSize:
        """PaliGemma's language model (openpi ``gemma_2b``)."""
        return cls(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256)

    @classmethod
    def gemma_300m(cls) -> GemmaSize:
        """The action expert (openpi ``gemma_300m``)."""
        return cls(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256)

    @classmethod
    def dummy(cls, depth: int = 2) -> GemmaSize:
        """Openpi's ``dummy`` variant (width 64, 8 heads of 16), at ``depth`` layers."""
        return cls(width=64, depth=depth, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16)


class SiglipSize(FrozenConfig):
    """Sizes of the SigLIP vision tower."""

    hidden: int = Field(ge=1, le=8192)
    depth: int = Field(ge=1, le=128)
    num_heads: int = Field(ge=1, le=128)
    mlp_dim: int = Field(ge=1, le=65536)
    patch_size: int = Field(ge=1, le=64)
    image_size: int = Field(ge=1, le=1024)

    @model_validator(mode="after")
    def _check(self) -> SiglipSize:
        check_patches("SiglipSize", self.hidden, self.num_heads, self.image_size, self.patch_size)
        return self

    @property
    def num_tokens(self) -> int:
        """Image tokens per image slot: ``(image_size / patch_size)²``."""
        return (self.image_size // self.patch_size) ** 2

    @classmethod
    def so400m(cls) -> SiglipSize:
        """SigLIP So400m/14 at 224² (what openpi's converter hard-codes)."""
        return cls(hidden=1152, depth=27, num_heads=16, mlp_dim=4304, patch_size=14, image_size=224)

    @classmethod
    def tiny(cls) -> SiglipSize:
        """A two-layer SigLIP at 224² (256 tokens per image, like the full size)."""
        return cls(hidden=32, depth=2, num_heads=4, mlp_dim=64, patch_size=14, image_size=224)


class Pi0Config(FrozenConfig):
    """π0 / π0.5 at any size.

    ``pi05`` switches the suffix to π0.5's (no state token, time through adaRMS in the
    expert) and the expert norms to adaRMS. ``projection_dim`` is the width of the
    image projector's output; it must equal the language model's width.
    """

    pi05: bool = False
    paligemma: GemmaSize = Field(default_factory=GemmaSize.gemma_2b)
    expert: GemmaSize = Field(default_factory=GemmaSize.gemma_300m)
    vision: SiglipSize = Field(default_factory=SiglipSize.so400m)
    projection_dim: int = Field(2048, ge=1)
    vocab_size: int = Field(PALIGEMMA_VOCAB_SIZE, ge=2)
    action_dim: int = Field(32, ge=1, le=256)
    action_horizon: int = Field(50, ge=1, le=1024)
    max_token_len: int = Field(48, ge=1, le=4096)
    image_slots: tuple[str, ...] = Field(IMAGE_SLOTS, min_length=1, max_length=16)
    flow_steps: int = Field(10, ge=1, le=100)
    discrete_state_input: bool | None = None
    """π0.5 only: the state goes into the prompt as 256-bin text; ``None`` means ``pi05``."""
    rms_norm_eps: float = Field(1e-6, gt=0.0, le=1e-2)
    rope_theta: float = Field(10000.0, gt=1.0)

    @model_validator(mode="after")
    def _check(self) -> Pi0Config:
        if self.projection_dim != self.paligemma.width:
            raise ConfigError(
                f"Pi0Config: projection_dim={self.projection_dim} must equal the language "
                f"model width paligemma.width={self.paligemma.width}"
            )
        for field in ("depth", "num_kv_heads", "head_dim"):
            lm, ex = getattr(self.paligemma, field), getattr(self.expert, field)
            if lm != ex:
                raise ConfigError(
                    f"Pi0Config: expert.{field}={ex} must equal paligemma.{field}={lm} "
                    "(the expert attends to the language model's per-layer key/value cache)"
                )
        if len(set(self.image_slots)) != len(self.image_slots):
            raise ConfigError(f"Pi0Config: image_slots {self.image_slots} repeat a name")
        if self.discrete_state_input and not self.pi05:
            raise ConfigError("Pi0Config: discrete_state_input=True needs pi05=True")
        return self

    @property
    def state_in_prompt(self) -> bool:
        """Whether the (π0.5) state is written into the prompt as discrete text."""
        return self.pi05 if self.discrete_state_input is None else self.discrete_state_input

    @property
    def n_slots(self) -> int:
        """Number of image slots."""
        return len(self.image_slots)

    @property
    def image_tokens(self) -> int:
        """Image tokens over all slots."""
        return self.n_slots * self.vision.num_tokens

    @property
    def prefix_len(self) -> int:
        """Prefix length: every slot's image tokens, then ``max_token_len`` text tokens."""
        return self.image_tokens + self.max_token_len

    @property
    def suffix_len(self) -> int:
        """Suffix length: π0's state token (not in π0.5) and the action tokens."""
        return self.action_horizon + (0 if self.pi05 else 1)

    @classmethod
    def full_pi0(cls, **overrides: Any) -> Pi0Config:
        """Full-size π0 (PaliGemma 3B, Gemma 300M expert, horizon 50, 48 text tokens)."""
        return cls(**{"pi05": False, "max_token_len": 48, **overrides})

    @classmethod
    def full_pi05(cls, **overrides: Any) -> Pi0Config:
        """Full-size π0.5 (adaRMS expert, 200 text tokens, horizon 50 unless overridden)."""
        return cls(**{"pi05": True, "max_token_len": 200, **overrides})

    @classmethod
    @classmethod
    def tiny(cls, pi05: bool = False, **overrides: Any) -> Pi0Config:
        """A small size for tests: openpi's ``dummy`` Gemma sizes, a 2-layer SigLIP, 1024 tokens."""
        base: dict[str, Any] = {
            "pi05": pi05,
            "paligemma": GemmaSize.dummy(),
            "expert": GemmaSize(
                width=32, depth=2, mlp_dim=64, num_heads=4, num_kv_heads=1, head_dim=16
            ),
            "vision": SiglipSize.tiny(),
            "projection_dim": 64,
            "vocab_size": 1024,
            "action_horizon": 10,
            "max_token_len": 16,
            "flow_steps": 10,
        }
        return cls(**{**base, **overrides})
