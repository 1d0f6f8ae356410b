r"""One validated config that builds GR00T N1.7 at every size.

Sizes follow NVIDIA/Isaac-GR00T (``gr00t/configs/model/gr00t_n1d7.py`` @543b4527, the
N1.7 checkpoints' ``config.json``, ``scripts/deployment/README.md`` @1ca4b070) and the
Cosmos-Reason2-2B backbone (Qwen3-VL-2B sizes): a 24-block Qwen3-VL vision tower with
deepstack taps after blocks 5, 11 and 17, the language model cut to ``select_layer = 16``
layers, a 4-layer VL self-attention (32 heads of 64), a 32-layer ``AlternateVLDiT`` (32
heads of 48), per-embodiment encoders with 32 weight slices, 4 Euler steps over 1000 time
buckets. :meth:`GrootConfig.full_n17` and :meth:`GrootConfig.tiny` are the named sizes;
every invalid field or inconsistent pair is a :class:`~vla_edge.core.errors.ConfigError`.

The prompt layout (what the host feeds and what the language model reads), in order:

* ``lead_token_ids``: the chat template's opening (``<|im_start|>user\n``), constant;
* per image slot: ``<|vision_start|>``, the slot's image tokens, ``<|vision_end|>``;
* ``max_token_len`` host tokens: the instruction and the template's closing, right-padded.

That is upstream's ``apply_chat_template`` of one user turn with the images first
(``processing_gr00t_n1d7.py: _apply_vlm_processing``) at batch 1, with fixed shapes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from vla_edge.archs.config_base import FrozenConfig, check_heads, check_patches
from vla_edge.core.errors import ConfigError

QWEN3_VL_VOCAB_SIZE = 151936
"""Rows of Qwen3-VL's token table."""
IMAGE_TOKEN_ID = 151655
"""``<|image_pad|>``."""
VISION_START_ID = 151652
"""``<|vision_start|>``."""
VISION_END_ID = 151653
"""``<|vision_end|>``."""
LEAD_TOKEN_IDS = (151644, 872, 198)
"""``<|im_start|>``, ``user``, ``\\n``: the user turn's opening in Qwen3-VL's template."""
IMAGE_SLOTS = ("image", "wrist_image")
"""Camera slots of the LIBERO fine-tunes (``libero_sim``), in prompt order."""
MAX_EMBODIMENTS = 32
"""Weight slices of each per-embodiment encoder (``max_num_embodiments``)."""


class VisionSize(FrozenConfig):
    """Sizes of the Qwen3-VL vision tower (``Qwen3VLVisionConfig``)."""

    hidden: int = Field(ge=2, le=8192)
    depth: int = Field(ge=1, le=128)
    num_heads: int = Field(ge=1, le=128)
    mlp_dim: int = Field(ge=1, le=65536)
    patch_size: int = Field(ge=1, le=64)
    temporal_patch_size: int = Field(2, ge=1, le=8)
    spatial_merge_size: int = Field(2, ge=1, le=8)
    num_position_embeddings: int = Field(ge=1, le=65536)
    image_size: int = Field(ge=1, le=2048)
    deepstack_layers: tuple[int, ...] = Field(min_length=0, max_length=16)
    """Vision blocks whose output feeds a deepstack merger (``deepstack_visual_indexes``)."""
    rope_theta: float = Field(10000.0, gt=1.0)

    @model_validator(mode="after")
    def _check(self) -> VisionSize:
        check_patches("VisionSize", self.hidden, self.num_heads, self.image_size, self.patch_size)
        grid = self.image_size // self.patch_size
        if grid % self.spatial_merge_size:
            raise ConfigError(
                f"VisionSize: spatial_merge_size={self.spatial_merge_size} does not divide the "
                f"patch grid {grid} (image_size={self.image_size} / patch_size={self.patch_size})"
            )
        side = round(self.num_position_embeddings**0.5)
        if side * side != self.num_position_embeddings:
            raise ConfigError(
                f"VisionSize: num_position_embeddings={self.num_position_embeddings} is not a "
                "square grid"
            )
        bad = [i for i in self.deepstack_layers if not 0 <= i < self.depth]
        if bad:
            raise ConfigError(
                f"VisionSize: deepstack_layers {bad} outside the {self.depth} vision blocks"
            )
        if (self.hidden // self.num_heads) % 4:
            raise ConfigError(
                f"VisionSize: head dim {self.hidden // self.num_heads} must be a multiple of 4 "
                "(axial RoPE over height and width)"
            )
        return self

    @property
    def grid(self) -> int:
        """Patches per side of one image."""
        return self.image_size // self.patch_size

    @property
    def merged_grid(self) -> int:
        """Image tokens per side after the 2x2 patch merger."""
        return self.grid // self.spatial_merge_size

    @property
    def num_tokens(self) -> int:
        """Image tokens per slot (after the merger)."""
        return self.merged_grid**2

    @property
    def patch_dim(self) -> int:
        """Values per flattened patch: ``3 * temporal_patch_size * patch_size²``."""
        return 3 * self.temporal_patch_size * self.patch_size**2

    @classmethod
    def qwen3_vl_2b(cls) -> VisionSize:
        """Cosmos-Reason2-2B's vision tower (Qwen3-VL-2B) at GR00T's 256² images."""
        return cls(
            hidden=1024,
            depth=24,
            num_heads=16,
            mlp_dim=4096,
            patch_size=16,
            num_position_embeddings=2304,
            image_size=256,
            deepstack_layers=(5, 11, 17),
        )


class TextSize(FrozenConfig):
    """Sizes of the Qwen3-VL language model (``Qwen3VLTextConfig``), as built here.

    ``depth`` is the number of layers kept (upstream's ``select_layer``): the rest are
    popped at load and absent from the checkpoint.
    """

    width: int = Field(ge=2, le=16384)
    depth: int = Field(ge=1, le=128)
    mlp_dim: int = Field(ge=1, le=131072)
    num_heads: int = Field(ge=1, le=128)
    num_kv_heads: int = Field(ge=1, le=128)
    head_dim: int = Field(ge=2, le=1024)
    vocab_size: int = Field(QWEN3_VL_VOCAB_SIZE, ge=2)
    rope_theta: float = Field(5_000_000.0, gt=1.0)
    mrope_section: tuple[int, int, int] = (24, 20, 20)
    """Frequencies given to time, height and width (interleaved, Qwen3-VL's M-RoPE)."""
    rms_norm_eps: float = Field(1e-6, gt=0.0, le=1e-2)

    @model_validator(mode="after")
    def _check(self) -> TextSize:
        check_heads("TextSize", self.num_heads, self.num_kv_heads, self.head_dim)
        if sum(self.mrope_section) != self.head_dim // 2:
            raise ConfigError(
                f"TextSize: mrope_section {self.mrope_section} sums to {sum(self.mrope_section)}, "
                f"expected head_dim / 2 = {self.head_dim // 2}"
            )
        return self

    @classmethod
    def qwen3_vl_2b(cls, depth: int = 16) -> TextSize:
        """Cosmos-Reason2-2B's language model (Qwen3-VL-2B), cut to ``depth`` layers."""
        return cls(
            width=2048, depth=depth, mlp_dim=6144, num_heads=16, num_kv_heads=8, head_dim=128
        )


class TransformerSize(FrozenConfig):
    """A stack of upstream's ``BasicTransformerBlock`` s (the DiT or the VL self-attention)."""

    depth: int = Field(ge=1, le=128)
    num_heads: int = Field(ge=1, le=128)
    head_dim: int = Field(ge=1, le=1024)

    @property
    def width(self) -> int:
        """``num_heads * head_dim`` (``inner_dim``)."""
        return self.num_heads * self.head_dim


class FlowHeadConfig(FrozenConfig):
    """What every GR00T version's config shares (the VL self-attention, the action head).

    The flow-matching action head with its per-embodiment weight slices, and the prompt's
    fixed sizes. Each version declares the rest with its own defaults (``dit``,
    ``max_state_dim``, ``max_action_dim``, ``action_horizon``, ``embodiment_id``,
    ``image_slots``, ``lead_token_ids``, ``image_token_id``, the vision tower's and the
    language model's sizes ``vision`` and ``text``, and ``slot_len``) and validates itself
    with :meth:`check_head`.
    """

    if TYPE_CHECKING:  # declared by each version, with its defaults
        vision: Any
        text: Any
        dit: TransformerSize
        max_state_dim: int
        max_action_dim: int
        action_horizon: int
        embodiment_id: int
        image_slots: tuple[str, ...]
        lead_token_ids: tuple[int, ...]
        image_token_id: int
        slot_len: int

    vl_self_attention: TransformerSize = Field(
        default_factory=lambda: TransformerSize(depth=4, num_heads=32, head_dim=64)
    )
    hidden_size: int = Field(1024, ge=1, le=16384)
    """The DiT's output width and the action decoder's (``hidden_size``)."""
    max_seq_len: int = Field(1024, ge=1, le=65536)
    """Rows of the action tokens' position table."""
    max_num_embodiments: int = Field(MAX_EMBODIMENTS, ge=1, le=1024)
    flow_steps: int = Field(4, ge=1, le=100)
    """Euler steps (``num_inference_timesteps``)."""
    num_timestep_buckets: int = Field(1000, ge=1, le=1_000_000)
    timestep_channels: int = Field(256, ge=2, le=4096)
    """Width of the DiT's sinusoidal time features before its MLP."""
    max_token_len: int = Field(48, ge=1, le=4096)
    image_crop_fraction: float = Field(0.95, gt=0.0, le=1.0)
    """The fraction of each side upstream's evaluation transform keeps in its centre crop
    (N1.7's ``crop_fraction``, or ``image_crop_size / image_target_size``; N1.5's
    ``VideoCrop(scale=0.95)``; 0.95 by default)."""

    def check_head(self, vl_width: int, vl_source: str, token_ids: tuple[int, ...]) -> None:
        """The checks every version shares.

        ``vl_width``: the width of what the DiT attends to (``vl_source`` names it in the
        message); ``token_ids``: every fixed prompt id.

        Raises:
            ConfigError: prefixed with the config class's name.
        """
        name = type(self).__name__
        if self.embodiment_id >= self.max_num_embodiments:
            raise ConfigError(
                f"{name}: embodiment_id={self.embodiment_id} must be below "
                f"max_num_embodiments={self.max_num_embodiments}"
            )
        if self.vl_self_attention.width != vl_width:
            raise ConfigError(
                f"{name}: vl_self_attention width {self.vl_self_attention.width} "
                f"(num_heads * head_dim) must equal {vl_source} {vl_width}"
            )
        if self.action_horizon > self.max_seq_len:
            raise ConfigError(
                f"{name}: action_horizon={self.action_horizon} exceeds the position table "
                f"max_seq_len={self.max_seq_len}"
            )
        if self.timestep_channels % 2 or self.dit.width % 2:
            raise ConfigError(
                f"{name}: timestep_channels={self.timestep_channels} and the DiT width "
                f"{self.dit.width} must be even"
            )
        bad = [i for i in token_ids if not 0 <= i < self.text.vocab_size]
        if bad:
            raise ConfigError(
                f"{name}: token ids {bad} outside the vocabulary of {self.text.vocab_size}"
            )
        if len(set(self.image_slots)) != len(self.image_slots):
            raise ConfigError(f"{name}: image_slots {self.image_slots} repeat a name")

    @property
    def input_embedding_dim(self) -> int:
        """Width of the DiT's tokens (state, actions): ``dit.num_heads * dit.head_dim``."""
        return self.dit.width

    @property
    def n_slots(self) -> int:
        """Number of image slots."""
        return len(self.image_slots)

    @property
    def lead_len(self) -> int:
        """Tokens before the first slot."""
        return len(self.lead_token_ids)

    @property
    def prefix_len(self) -> int:
        """Tokens the language model reads (and the DiT attends to)."""
        return self.lead_len + self.n_slots * self.slot_len + self.max_token_len


class GrootConfig(FlowHeadConfig):
    """GR00T N1.7 at any size.

    ``embodiment_id`` is the weight slice (0 to ``max_num_embodiments - 1``) the
    per-embodiment encoders use; a checkpoint's ``embodiment_id.json`` maps a tag to it.
    """

    vision: VisionSize = Field(default_factory=VisionSize.qwen3_vl_2b)
    text: TextSize = Field(default_factory=TextSize.qwen3_vl_2b)
    dit: TransformerSize = Field(
        default_factory=lambda: TransformerSize(depth=32, num_heads=32, head_dim=48)
    )
    max_state_dim: int = Field(132, ge=1, le=1024)
    max_action_dim: int = Field(132, ge=1, le=1024)
    action_horizon: int = Field(40, ge=1, le=1024)
    embodiment_id: int = Field(0, ge=0)
    attend_text_every_n_blocks: int = Field(2, ge=1, le=64)
    image_slots: tuple[str, ...] = Field(IMAGE_SLOTS, min_length=1, max_length=16)
    image_letterbox: bool = True
    """Whether the evaluation transform first pads a non-square image to a square (always,
    at the followed commit)."""
    lead_token_ids: tuple[int, ...] = Field(LEAD_TOKEN_IDS, max_length=64)
    image_token_id: int = Field(IMAGE_TOKEN_ID, ge=0)
    vision_start_id: int = Field(VISION_START_ID, ge=0)
    vision_end_id: int = Field(VISION_END_ID, ge=0)

    @model_validator(mode="after")
    def _check(self) -> GrootConfig:
        ids = (*self.lead_token_ids, self.image_token_id, self.vision_start_id, self.vision_end_id)
        self.check_head(self.text.width, "the language model width", ids)
        if self.dit.depth % 2:
            raise ConfigError(
                f"GrootConfig: dit.depth={self.dit.depth} must be even (cross- and "
                "self-attention blocks alternate)"
            )
        return self

    @property
    def slot_len(self) -> int:  # type: ignore[override]
        """Tokens per slot: ``<|vision_start|>``, the image tokens, ``<|vision_end|>``."""
        return self.vision.num_tokens + 2

    @property
    def suffix_len(self) -> int:
        """The DiT's tokens: the state token, then the action tokens."""
        return 1 + self.action_horizon

    @classmethod
    def full_n17(cls, **overrides: Any) -> GrootConfig:
        """Full-size GR00T N1.7 (Cosmos-Reason2-2B cut to 16 layers, 32-layer DiT, K = 4)."""
        return cls(**overrides)

    @classmethod
    def tiny(cls, **overrides: Any) -> GrootConfig:
        """A small size for tests: every part present, a few layers of each, 32² images.

        The vision tower has 4 blocks with deepstack taps after blocks 0, 1 and 2, so the
        three injections land in language-model layers 0, 1 and 2 of 4.
        """
        base: dict[str, Any] = {
            "vision": VisionSize(
                hidden=32,
                depth=4,
                num_heads=4,
                mlp_dim=64,
                patch_size=8,
                num_position_embeddings=36,
                image_size=32,
                deepstack_layers=(0, 1, 2),
            ),
            "text": TextSize(
                width=64,
                depth=4,
                mlp_dim=96,
                num_heads=4,
                num_kv_heads=2,
                head_dim=16,
                vocab_size=512,
                rope_theta=10000.0,
                mrope_section=(4, 2, 2),
            ),
            "vl_self_attention": TransformerSize(depth=2, num_heads=4, head_dim=16),
            "dit": TransformerSize(depth=4, num_heads=4, head_dim=8),
            "hidden_size": 48,
            "max_state_dim": 12,
            "max_action_dim": 10,
            "action_horizon": 6,
            "max_seq_len": 16,
            "max_num_embodiments": 4,
            "embodiment_id": 2,
            "max_token_len": 8,
            "timestep_channels": 16,
            "lead_token_ids": (500, 501, 502),
            "image_token_id": 510,
            "vision_start_id": 508,
            "vision_end_id": 509,
        }
        return cls(**{**base, **overrides})
