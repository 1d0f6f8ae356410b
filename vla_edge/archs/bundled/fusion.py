"""Stage 3, ``fusion``: a small transformer over visual, language and state tokens.

``(visual_tokens [B*n_cams, T_v, D], lang [B, 384], state_norm [B, A]) ->
context [B, T_c, D]`` with ``T_c = n_cams * T_v + 2`` (the visual tokens of
all cameras, one language token, one proprio-state token).

Weights in any dtype: the inputs are cast to the weights' dtype where they
enter the stage and the context leaves in the dtype of ``lang`` (float32 from
the runners, as the manifest declares it).
"""

from __future__ import annotations

import torch
from torch import nn

from vla_edge.archs.bundled.config import LANGUAGE_DIM, PolicyConfig
from vla_edge.archs.bundled.layers import SelfAttentionBlock, cast


class Fusion(nn.Module):
    """Pre-norm transformer encoder with learned token-position embeddings.

    The language embedding both enters as a token and modulates every visual
    token (FiLM: ``v * (1 + scale) + shift``), so the instruction shapes what
    the attention sees from the first layer on.
    """

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        d = config.d_model
        self.num_visual = len(config.cameras) * config.tokens_per_camera
        self.d_model = d
        self.lang_proj = nn.Sequential(nn.Linear(LANGUAGE_DIM, d), nn.GELU(approximate="tanh"))
        self.lang_out = nn.Linear(d, d)
        self.lang_film = nn.Linear(d, 2 * d)
        nn.init.zeros_(self.lang_film.weight)
        nn.init.zeros_(self.lang_film.bias)
        self.state_proj = nn.Sequential(
            nn.Linear(config.action_dim, d), nn.GELU(approximate="tanh"), nn.Linear(d, d)
        )
        self.position = nn.Parameter(torch.randn(1, config.context_tokens, d) * 0.02)
        self.blocks = nn.ModuleList(
            SelfAttentionBlock(d, config.num_heads, config.mlp_ratio)
            for _ in range(config.fusion_layers)
        )
        self.norm = nn.LayerNorm(d)

    def forward(
        self, visual_tokens: torch.Tensor, lang: torch.Tensor, state_norm: torch.Tensor
    ) -> torch.Tensor:
        """Fuse one context per observation."""
        dtype = self.position.dtype
        batch = lang.shape[0]
        visual = cast(visual_tokens, dtype).reshape(batch, self.num_visual, self.d_model)
        lang_h = self.lang_proj(cast(lang, dtype))
        scale, shift = self.lang_film(lang_h).unsqueeze(1).chunk(2, dim=-1)
        visual = visual * (1.0 + scale) + shift
        lang_tok = self.lang_out(lang_h).unsqueeze(1)
        state_tok = self.state_proj(cast(state_norm, dtype)).unsqueeze(1)
        x = torch.cat([visual, lang_tok, state_tok], dim=1) + self.position
        for block in self.blocks:
            x = block(x)
        return cast(self.norm(x), lang.dtype)
