import torch
from policy_synthetic import tiny_config
from torch import nn

from vla_edge.archs.bundled.model import VlaPolicy
from vla_edge.archs.bundled.stages import example_inputs
from vla_edge.archs.bundled.xnnpack import ATTENTION_REWRITE, XnnpackAttention
from vla_edge.export.xnnpack_rewrites import (
    XnnpackGroupNorm,
    XnnpackLayerNorm,
    rewrite_for_xnnpack,
)


def test_rewritten_stages_compute_the_same_outputs_as_the_policy() -> None:
    torch.manual_seed(0)
    policy = VlaPolicy(tiny_config(flow_steps=3)).eval()
    # non-trivial norm parameters so scale and shift are exercised
    for module in policy.modules():
        if isinstance(module, nn.LayerNorm | nn.GroupNorm):
            nn.init.normal_(module.weight, 1.0, 0.2)
            nn.init.normal_(module.bias, 0.0, 0.2)
    examples = example_inputs(policy)
    for name in ("vision_encoder", "fusion", "action_head"):
        original = getattr(policy, name)
        rewritten, counts = rewrite_for_xnnpack(original, attention=ATTENTION_REWRITE)
        assert counts["norms"] > 0
        with torch.no_grad():
            want = original(*examples[name])
            got = rewritten(*examples[name])
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    _, counts = rewrite_for_xnnpack(policy.action_head, attention=ATTENTION_REWRITE)
    assert counts == {"norms": 2 + 3 * 1, "attention": 2 * 1}
    # without the architecture's attention rewrite only the norms are rewritten
    _, counts = rewrite_for_xnnpack(policy.action_head)
    assert counts == {"norms": 2 + 3 * 1, "attention": 0}


def test_rewrite_replaces_every_norm_and_attention_and_leaves_the_original_alone() -> None:
    policy = VlaPolicy(tiny_config())
    rewritten, _ = rewrite_for_xnnpack(policy.fusion, attention=ATTENTION_REWRITE)
    kinds = {type(m) for m in rewritten.modules()}
    assert XnnpackLayerNorm in kinds and XnnpackAttention in kinds
    assert nn.LayerNorm not in kinds
    vision, _ = rewrite_for_xnnpack(policy.vision_encoder)
    assert nn.GroupNorm not in {type(m) for m in vision.modules()}
    assert XnnpackGroupNorm in {type(m) for m in vision.modules()}
    assert any(isinstance(m, nn.LayerNorm) for m in policy.fusion.modules())
