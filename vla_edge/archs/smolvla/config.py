"""One validated config that builds SmolVLA (LeRobot) at every size.

The full size is LeRobot's ``SmolVLAConfig`` defaults
(``src/lerobot/policies/smolvla/configuration_smolvla.py``) on the
``HuggingFaceTB/SmolVLM2-500M-Video-Instruct`` backbone, whose ``config.json`` gives:

* vision (``smolvlm_vision``): hidden 768, 12 heads, patch 16, image 512; the file leaves
  ``intermediate_size`` (3072), ``num_hidden_layers`` (12), ``hidden_act``
  (``gelu_pytorch_tanh``) and ``layer_norm_eps`` (1e-6) at ``SmolVLMVisionConfig``'s defaults;
* text (``llama``): hidden 960, 32 layers, 15 heads, 5 key/value heads, head_dim 64,
  intermediate 2560, vocabulary 49280, ``rms_norm_eps`` 1e-5, ``tie_word_embeddings`` false;
* ``scale_factor`` 4 (the pixel shuffle: 1024 patches → 64 tokens per 512² image).

(The ``config.json`` values were read from a verbatim copy in a public test fixture and
cross-checked against the tensor shapes of ``lerobot/smolvla_base``'s ``model.safetensors``;
see ``test/data/make_smolvla_keys.py``.)

SmolVLA keeps the first ``num_vlm_layers`` (16) text layers and adds an action expert of
``int(960 * expert_width_multiplier)`` = 720 wide, MLP ``get_intermediate_size(720)`` = 2048,
with the backbone's heads (15 × 64, 5 key/value heads). :meth:`SmolVLAConfig.full` and
:meth:`SmolVLAConfig.tiny` are the named sizes; every invalid field or inconsistent pair is a
:class:`~vla_edge.core.errors.ConfigError` at construction.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from vla_edge.archs.config_base import FrozenConfig, check_heads, check_patches
from vla_edge.core.errors import ConfigError

SMOLVLM2_VOCAB_SIZE = 49280
"""Rows of SmolVLM2's token embedding and of its (untied) ``lm_head``."""

IMAGE_SLOTS = (
    "observation.images.camera1",
    "observation.images.camera2",
    "observation.images.camera3",
)
"""Default image slots, in prefix order. A checkpoint's own come from its ``input_features``."""


def get_intermediate_size(
    hidden_dim: int, ffn_dim_multiplier: int = 4, multiple_of: int = 256
) -> int:
    """The expert's MLP width, as LeRobot's ``smolvlm_with_expert.get_intermediate_size``.

    ``multiple_of * ceil(ffn_dim_multiplier * int(2 * hidden_dim / 3) / multiple_of)``
    (720 → 2048).
    """
    hidden_dim = int(2 * hidden_dim / 3)
    hidden_dim = int(ffn_dim_multiplier * hidden_dim)
    return multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)


class SmolVLMTextSize(FrozenConfig):
    """Sizes of SmolVLM's Llama text decoder, as published (``depth`` before truncation)."""

    width: int = Field(ge=2, le=16384)
    depth: int = Field(ge=1, le=128)
    mlp_dim: int = Field(ge=1, le=131072)
    num_heads: int = Field(ge=1, le=128)
    num_kv_heads: int = Field(ge=1, le=128)
    head_dim: int = Field(ge=2, le=1024)
    vocab_size: int = Field(SMOLVLM2_VOCAB_SIZE, ge=2)
    rms_norm_eps: float = Field(1e-5, gt=0.0, le=1e-2)

    @model_validator(mode="after")
    def _check(self) -> SmolVLMTextSize:
        check_heads("SmolVLMTextSize", self.num_heads, self.num_kv_heads, self.head_dim)
        return self

    @classmethod
    def smolvlm2_500m(cls) -> SmolVLMTextSize:
        """SmolVLM2-500M's text model (SmolLM2-360M: 960 wide, 32 layers, 15/5 heads of 64)."""
        return cls(width=960, depth=32, mlp_dim=2560, num_heads=15, num_kv_heads=5, head_dim=64)


class SmolVLMVisionSize(FrozenConfig):
    """Sizes of SmolVLM's SigLIP-style vision encoder and its pixel-shuffle connector."""

    hidden: int = Field(ge=1, le=8192)
    depth: int = Field(ge=1, le=128)
    num_heads: int = Field(ge=1, le=128)
    mlp_dim: int = Field(ge=1, le=65536)
    patch_size: int = Field(ge=1, le=64)
    image_size: int = Field(ge=1, le=2048)
    scale_factor: int = Field(ge=1, le=16)
    """Pixel-shuffle factor: ``scale_factor²`` neighbouring patches become one token."""
    layer_norm_eps: float = Field(1e-6, gt=0.0, le=1e-2)

    @model_validator(mode="after")
    def _check(self) -> SmolVLMVisionSize:
        check_patches(
            "SmolVLMVisionSize", self.hidden, self.num_heads, self.image_size, self.patch_size
        )
        side = self.image_size // self.patch_size
        if side % self.scale_factor:
            raise ConfigError(
                f"SmolVLMVisionSize: scale_factor={self.scale_factor} does not divide the "
                f"{side} patches per side (image_size={self.image_size} / "
                f"patch_size={self.patch_size})"
            )
        return self

    @property
    def num_patches(self) -> int:
        """Patches per image, ``(image_size / patch_size)²``."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_tokens(self) -> int:
        """Image tokens per image after the pixel shuffle, ``num_patches / scale_factor²``."""
        return self.num_patches // self.scale_factor**2

    @classmethod
    def smolvlm2_500m(cls) -> SmolVLMVisionSize:
        """SmolVLM2-500M's vision encoder at 512² (1024 patches → 64 tokens)."""
        return cls(
            hidden=768,
            depth=12,
            num_heads=12,
            mlp_dim=3072,
            patch_size=16,
            image_size=512,
            scale_factor=4,
        )

    @classmethod
    def tiny(cls) -> SmolVLMVisionSize:
        """A two-layer encoder at 64² (64 patches of 8 → 16 tokens)."""
        return cls(
            hidden=32,
            depth=2,
            num_heads=4,
            mlp_dim=64,
            patch_size=8,
            image_size=64,
            scale_factor=2,
        )


class SmolVLAConfig(FrozenConfig):
    """SmolVLA at any size (LeRobot's ``attention_mode="cross_attn"``).

    The expert has as many layers as the truncated backbone (LeRobot's default
    ``num_expert_layers=-1``); layer ``i`` cross-attends to the backbone's cached keys and
    values unless ``i % self_attn_every_n_layers == 0`` (then it self-attends over the
    cache and its own tokens). ``self_attn_every_n_layers=0`` makes every layer cross-attend.
    """

    text: SmolVLMTextSize = Field(default_factory=SmolVLMTextSize.smolvlm2_500m)
    vision: SmolVLMVisionSize = Field(default_factory=SmolVLMVisionSize.smolvlm2_500m)
    num_vlm_layers: int = Field(16, ge=1, le=128)
    """Backbone text layers kept (the first ones); the rest are not built."""
    expert_width_multiplier: float = Field(0.75, gt=0.0, le=4.0)
    self_attn_every_n_layers: int = Field(2, ge=0, le=128)
    action_dim: int = Field(32, ge=1, le=256)
    """LeRobot's ``max_action_dim`` (actions are zero-padded to it)."""
    state_dim: int = Field(32, ge=1, le=256)
    """LeRobot's ``max_state_dim``."""
    chunk_size: int = Field(50, ge=1, le=1024)
    max_token_len: int = Field(48, ge=1, le=4096)
    """LeRobot's ``tokenizer_max_length``: prompt slots, right-padded with a mask."""
    image_slots: tuple[str, ...] = Field(IMAGE_SLOTS, min_length=1, max_length=16)
    flow_steps: int = Field(10, ge=1, le=100)
    min_period: float = Field(4e-3, gt=0.0)
    max_period: float = Field(4.0, gt=0.0)
    rope_max_wavelength: float = Field(10_000.0, gt=1.0)
    """LeRobot's own ``apply_rope`` (not the backbone config's ``rope_theta`` of 100000)."""

    @model_validator(mode="after")
    def _check(self) -> SmolVLAConfig:
        if self.num_vlm_layers > self.text.depth:
            raise ConfigError(
                f"SmolVLAConfig: num_vlm_layers={self.num_vlm_layers} exceeds the backbone's "
                f"text.depth={self.text.depth}"
            )
        if self.expert_width < 2 or self.expert_width % 2:
            raise ConfigError(
                f"SmolVLAConfig: the expert width int({self.text.width} * "
                f"expert_width_multiplier={self.expert_width_multiplier}) = {self.expert_width} "
                "must be even and at least 2 (its time embedding is half sine, half cosine)"
            )
        if self.min_period >= self.max_period:
            raise ConfigError(
                f"SmolVLAConfig: min_period={self.min_period} must be below "
                f"max_period={self.max_period}"
            )
        if len(set(self.image_slots)) != len(self.image_slots):
            raise ConfigError(f"SmolVLAConfig: image_slots {self.image_slots} repeat a name")
        return self

    @property
    def expert_width(self) -> int:
        """``int(text.width * expert_width_multiplier)`` (720 at full size)."""
        return int(self.text.width * self.expert_width_multiplier)

    @property
    def expert_mlp_dim(self) -> int:
        """:func:`get_intermediate_size` of the expert width (2048 at full size)."""
        return get_intermediate_size(self.expert_width)

    @property
    def depth(self) -> int:
        """Layers of the truncated backbone and of the expert."""
        return self.num_vlm_layers

    def is_cross_attention(self, layer: int) -> bool:
        """Whether expert layer ``layer`` cross-attends to the backbone's keys and values."""
        n = self.self_attn_every_n_layers
        return not (n > 0 and layer % n == 0)

    @property
    def cross_attention_layers(self) -> tuple[int, ...]:
        """Expert layers that cross-attend (odd ones at full size)."""
        return tuple(i for i in range(self.depth) if self.is_cross_attention(i))

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
        """Prefix length: every slot's image tokens, ``max_token_len`` text slots, the state."""
        return self.image_tokens + self.max_token_len + 1

    @classmethod
    def full(cls, **overrides: Any) -> SmolVLAConfig:
        """Full-size SmolVLA (``lerobot/smolvla_base``: SmolVLM2-500M truncated to 16 layers)."""
        return cls(**overrides)

    @classmethod
    def tiny(cls, **overrides: Any) -> SmolVLAConfig:
        """A small size for tests, built from the same code as the full size.

        A 6-layer backbone truncated to 4 (two self-, two cross-attention expert layers),
        64² images of 16 tokens, a 1024-token vocabulary, chunk 10.
        """
        base: dict[str, Any] = {
            "text": SmolVLMTextSize(
                width=64,
                depth=6,
                mlp_dim=128,
                num_heads=4,
                num_kv_heads=2,
                head_dim=16,
                vocab_size=1024,
            ),
            "vision": SmolVLMVisionSize.tiny(),
            "num_vlm_layers": 4,
            "chunk_size": 10,
            "max_token_len": 16,
        }
        return cls(**{**base, **overrides})
