"""The bundled model registers here (no torch: every function is named, imported when used)."""

from __future__ import annotations

from vla_edge.archs.architecture import Architecture, Layout, PromptFormat

ARCHITECTURES = (
    Architecture(
        name="bundled",
        title="this package's VLA (MiniLM, ViT, fusion, flow head; vla-edge train)",
        layouts=(Layout("vla_edge", "vla-edge train's checkpoint .pt"),),
        config="vla_edge.archs.bundled.config:PolicyConfig",
        model="vla_edge.archs.bundled.model:VlaPolicy",
        stages="vla_edge.archs.bundled.stages:bundled_stage_modules",
        read_checkpoint="vla_edge.archs.bundled.model:load_checkpoint",
        tokenizer="bundled",
        prompts=(
            PromptFormat(
                "instruction",
                tokenizer="wordpiece",
                encoder="vla_edge.archs.bundled.prompt:WordPiecePromptTokenizer",
                policy=False,
                implied=True,
            ),
        ),
        export="vla_edge.archs.bundled.programs:EXPORT",
    ),
)
