r"""One validated config that builds GR00T N1.5 at every size.

Sizes follow NVIDIA/Isaac-GR00T at the N1.5 release: the Eagle 2.5 backbone
(``gr00t/model/backbone/eagle2_hg_model/modeling_eagle2_5_vl.py`` @c395eca8: a SigLIP
vision tower, an optional 2x2 pixel shuffle (``use_pixel_shuffle``, ``downsample_ratio``
0.5) and the ``mlp1`` projector of one or two linears (``mlp_connector_layers``) into a
Qwen3 language model cut to ``select_layer`` layers) and the flow-matching action
head (``gr00t/model/action_head/flow_matching_action_head.py`` @04c7ee10,
``cross_attention_dit.py`` @c395eca8), with the shapes of
the Eagle 2.5 config shipped with the N1.5 code (``gr00t/model/backbone/eagle2_hg_model/
config.json``, read in the fork peri044/Isaac-GR00T @82bdf04e: SigLIP 27 x 1152 at 224²
with 14² patches, ``use_pixel_shuffle`` false, ``mlp_connector_layers`` 1, Qwen3-1.7B of
151680 tokens with RoPE base 1e6, ``image_token_index`` 151669) and
``deployment_scripts/build_engine.sh`` @56996fcb (224² images → 256 SigLIP patches of
1152 that the language-model engine takes whole, so no pixel shuffle and a one-linear
projector at full size, sequences of up to 300 tokens; backbone features of 2048, state
64, actions 16 x 32, DiT tokens 1 + 32 + 16 of 1536, DiT output 1024).
:meth:`GrootN15Config.full_n15` and :meth:`GrootN15Config.tiny` are the named sizes;
every invalid field or inconsistent pair is a :class:`~vla_edge.core.errors.ConfigError`.

The prompt layout the language model reads, in order (fixed shapes, batch 1):

* ``lead_token_ids``: the chat template's system turn and the user turn's opening, constant;
* per image slot ``k``: ``slot_label_ids[k]`` (the text ``<image k+1>`` Eagle 2.5's
  processor writes before each image), ``image_start_id`` (``<img>``), the slot's
  ``num_tokens`` image tokens (``<IMG_CONTEXT>``), ``image_end_id`` (``</img>``);
* ``max_token_len`` host tokens: the instruction and the template's closing, right-padded.

The layout is :mod:`vla_edge.archs.groot.n15_prompt`'s. The token ids are the
tokenizer's: ``image_token_id`` is Eagle 2.5's ``<IMG_CONTEXT>`` (``image_token_index``
151669 in the Eagle 2.5 config); ``vla-edge import`` replaces the lead tokens, the slot
labels and the image start / end ids with the ids the user's tokenizer gives them
(:func:`vla_edge.archs.groot.n15_prompt.chat_layout`), checking its ``<IMG_CONTEXT>``
against ``image_token_id``. The defaults below are what Qwen3's byte-level BPE gives the
lead (its published ids) and the ids after ``<IMG_CONTEXT>``; no slot labels: a config
built without a tokenizer describes a model, not a policy.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from vla_edge.archs.config_base import FrozenConfig, check_heads, check_patches
from vla_edge.archs.groot.config import FlowHeadConfig, TransformerSize
from vla_edge.core.errors import ConfigError

QWEN3_VOCAB_SIZE = 151680
"""Rows of the Eagle 2.5 language model's token table (Qwen3-1.7B's, padded)."""
IMAGE_SLOTS = ("ego_view",)
"""Camera slots of GR1's data config (``video.ego_view``)."""
QWEN3_LEAD_IDS = (
    151644,
    8948,
    198,
    2610,
    525,
    264,
    10950,
    17847,
    13,
    151645,
    198,
    151644,
    872,
    198,
)
"""``<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n`` in
Qwen3's ids (replaced at import by the user's tokenizer's)."""


class SiglipSize(FrozenConfig):
    """Sizes of the SigLIP vision tower (``SiglipVisionConfig``)."""

    hidden: int = Field(ge=2, le=8192)
    depth: int = Field(ge=1, le=128)
    num_heads: int = Field(ge=1, le=128)
    mlp_dim: int = Field(ge=1, le=65536)
    patch_size: int = Field(ge=1, le=64)
    image_size: int = Field(ge=1, le=2048)
    layer_norm_eps: float = Field(1e-6, gt=0.0, le=1e-2)
    shuffle: int = Field(1, ge=1, le=8)
    """Patches per side folded into one image token: 1 without the pixel shuffle, else
    ``1 / downsample_ratio``."""

    @model_validator(mode="after")
    def _check(self) -> SiglipSize:
        check_patches("SiglipSize", self.hidden, self.num_heads, self.image_size, self.patch_size)
        if self.grid % self.shuffle:
            raise ConfigError(
                f"SiglipSize: shuffle={self.shuffle} does not divide the patch grid {self.grid} "
                f"(image_size={self.image_size} / patch_size={self.patch_size})"
            )
        return self

    @property
    def grid(self) -> int:
        """Patches per side of one image."""
        return self.image_size // self.patch_size

    @property
    def num_patches(self) -> int:
        """SigLIP tokens per image (rows of the position table)."""
        return self.grid**2

    @property
    def num_tokens(self) -> int:
        """Image tokens per slot after the pixel shuffle."""
        return (self.grid // self.shuffle) ** 2

    @property
    def shuffled_dim(self) -> int:
        """Width of one image token after the pixel shuffle (``mlp1``'s input)."""
        return self.hidden * self.shuffle**2

    @classmethod
    def siglip_400m(cls) -> SiglipSize:
        """Eagle 2.5's SigLIP tower at GR00T N1.5's 224² images (27 blocks of 1152)."""
        return cls(hidden=1152, depth=27, num_heads=16, mlp_dim=4304, patch_size=14, image_size=224)


class Qwen3Size(FrozenConfig):
    """Sizes of the Qwen3 language model as built here (``depth`` = ``select_layer``)."""

    width: int = Field(ge=2, le=16384)
    depth: int = Field(ge=1, le=128)
    mlp_dim: int = Field(ge=1, le=131072)
    num_heads: int = Field(ge=1, le=128)
    num_kv_heads: int = Field(ge=1, le=128)
    head_dim: int = Field(ge=2, le=1024)
    vocab_size: int = Field(QWEN3_VOCAB_SIZE, ge=2)
    rope_theta: float = Field(1_000_000.0, gt=1.0)
    rms_norm_eps: float = Field(1e-6, gt=0.0, le=1e-2)

    @model_validator(mode="after")
    def _check(self) -> Qwen3Size:
        check_heads("Qwen3Size", self.num_heads, self.num_kv_heads, self.head_dim)
        return self

    @classmethod
    def qwen3_1_7b(cls, depth: int = 12) -> Qwen3Size:
        """Eagle 2.5's language model (Qwen3-1.7B), cut to ``depth`` layers."""
        return cls(
            width=2048, depth=depth, mlp_dim=6144, num_heads=16, num_kv_heads=8, head_dim=128
        )


class GrootN15Config(FlowHeadConfig):
    """GR00T N1.5 at any size.

    ``project_to_dim``: the backbone's output projection (``eagle_linear``) width, or
    ``None`` where upstream builds an identity (the backbone's features are the language
    model's width). ``embodiment_id`` is the per-embodiment weight slice.
    """

    vision: SiglipSize = Field(default_factory=SiglipSize.siglip_400m)
    text: Qwen3Size = Field(default_factory=Qwen3Size.qwen3_1_7b)
    projector_layers: int = Field(1, ge=1, le=2)
    """Linears of ``mlp1`` (``mlp_connector_layers``): 1 is ``Linear``; 2 is ``LayerNorm,
    Linear, GELU, Linear``."""
    project_to_dim: int | None = Field(None, ge=1, le=16384)
    dit: TransformerSize = Field(
        default_factory=lambda: TransformerSize(depth=16, num_heads=32, head_dim=48)
    )
    interleave_self_attention: bool = True
    """Odd DiT blocks attend to the DiT's own tokens, even ones to the backbone's."""
    max_state_dim: int = Field(64, ge=1, le=1024)
    max_action_dim: int = Field(32, ge=1, le=1024)
    action_horizon: int = Field(16, ge=1, le=1024)
    num_future_tokens: int = Field(32, ge=0, le=1024)
    """Learned tokens between the state token and the action tokens
    (``num_target_vision_tokens``)."""
    embodiment_id: int = Field(31, ge=0)
    image_slots: tuple[str, ...] = Field(IMAGE_SLOTS, min_length=1, max_length=16)
    lead_token_ids: tuple[int, ...] = Field(QWEN3_LEAD_IDS, max_length=64)
    slot_label_ids: tuple[tuple[int, ...], ...] = Field((), max_length=16)
    """Per slot, the tokens of the text before its ``<img>`` (``<image k>``); empty: none."""
    image_token_id: int = Field(151669, ge=0)
    image_start_id: int = Field(151670, ge=0)
    image_end_id: int = Field(151671, ge=0)

    @model_validator(mode="after")
    def _check(self) -> GrootN15Config:
        labels = [i for label in self.slot_label_ids for i in label]
        ids = (*self.lead_token_ids, *labels, self.image_token_id)
        ids += (self.image_start_id, self.image_end_id)
        self.check_head(self.backbone_width, "the backbone's width", ids)
        if self.slot_label_ids and len(self.slot_label_ids) != len(self.image_slots):
            raise ConfigError(
                f"GrootN15Config: slot_label_ids has {len(self.slot_label_ids)} entries, "
                f"expected one per image slot ({len(self.image_slots)}) or none"
            )
        if len({len(label) for label in self.slot_label_ids}) > 1:
            raise ConfigError(
                f"GrootN15Config: slot_label_ids {self.slot_label_ids} differ in length; the "
                "slots of the fixed layout need labels of one length"
            )
        return self

    @property
    def backbone_width(self) -> int:
        """Width of the backbone's features (``backbone_embedding_dim``)."""
        return self.project_to_dim or self.text.width

    @property
    def label_len(self) -> int:
        """Tokens of each slot's label (``slot_label_ids``)."""
        return len(self.slot_label_ids[0]) if self.slot_label_ids else 0

    @property
    def slot_len(self) -> int:  # type: ignore[override]
        """Tokens per slot: the label, the start token, the image tokens, the end token."""
        return self.label_len + self.vision.num_tokens + 2

    @property
    def suffix_len(self) -> int:
        """The DiT's tokens: the state token, the future tokens, the action tokens."""
        return 1 + self.num_future_tokens + self.action_horizon

    @classmethod
    def full_n15(cls, **overrides: Any) -> GrootN15Config:
        """Full-size GR00T N1.5 (SigLIP-400M, Qwen3-1.7B cut to 12 layers, 16-layer DiT)."""
        return cls(**overrides)

    @classmethod
    def tiny(cls, **overrides: Any) -> GrootN15Config:
        """A small size for tests: every part present, a few layers of each, 32² images.

        The 2x2 pixel shuffle and the two-linear projector, which the full size does not
        use, are on, so the tests exercise them.
        """
        base: dict[str, Any] = {
            "vision": SiglipSize(
                hidden=32, depth=2, num_heads=4, mlp_dim=64, patch_size=8, image_size=32, shuffle=2
            ),
            "projector_layers": 2,
            "text": Qwen3Size(
                width=64,
                depth=3,
                mlp_dim=96,
                num_heads=4,
                num_kv_heads=2,
                head_dim=16,
                vocab_size=512,
                rope_theta=10000.0,
            ),
            "vl_self_attention": TransformerSize(depth=2, num_heads=4, head_dim=16),
            "dit": TransformerSize(depth=4, num_heads=4, head_dim=8),
            "hidden_size": 48,
            "max_state_dim": 12,
            "max_action_dim": 10,
            "action_horizon": 6,
            "max_seq_len": 16,
            "num_future_tokens": 3,
            "max_num_embodiments": 4,
            "embodiment_id": 2,
            "max_token_len": 8,
            "timestep_channels": 16,
            "image_slots": ("ego_view", "wrist_view"),
            "lead_token_ids": (500, 501, 502),
            "image_token_id": 510,
            "image_start_id": 508,
            "image_end_id": 509,
        }
        return cls(**{**base, **overrides})


__all__ = ["GrootN15Config", "Qwen3Size", "SiglipSize"]
