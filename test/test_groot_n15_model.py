"""GR00T N1.5 at tiny size: each behaviour that differs from N1.7 against its reference
formula or the stock transformers model (the 2x2 pixel shuffle, the language model read
after its final norm with the image tokens in place, pads and absent slots as if removed,
the DiT's interleaved self-attention and all-token cross-attention, the future tokens),
the three stages against ``sample_actions``, and the config's sizes and named errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from vla_edge.archs.groot.layers import causal_pad_mask, sinusoid, timestep_features
from vla_edge.archs.groot.n15_config import GrootN15Config, SiglipSize
from vla_edge.archs.groot.n15_model import GrootN15Model, pixel_shuffle
from vla_edge.archs.groot.n15_stages import build_stages, run_stages
from vla_edge.core.errors import ConfigError


@pytest.fixture(scope="module")
def model() -> GrootN15Model:
    torch.manual_seed(0)
    model = GrootN15Model(GrootN15Config.tiny()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


def inputs(config: GrootN15Config, seed: int = 1, real_tokens: int = 5) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    v = config.vision
    mask = torch.zeros(1, config.max_token_len)
    mask[0, :real_tokens] = 1.0
    return {
        "images": torch.rand(config.n_slots, 3, v.image_size, v.image_size, generator=gen) * 2 - 1,
        "image_mask": torch.ones(config.n_slots),
        "token_ids": torch.randint(0, 500, (1, config.max_token_len), generator=gen),
        "token_mask": mask,
        "state": torch.randn(1, config.max_state_dim, generator=gen),
        "noise": torch.randn(1, config.action_horizon, config.max_action_dim, generator=gen),
    }


def test_pixel_shuffle_folds_each_2x2_block_of_patches_row_offset_first() -> None:
    vision = SiglipSize(
        hidden=3, depth=1, num_heads=1, mlp_dim=4, patch_size=2, image_size=8, shuffle=2
    )
    grid, dim = vision.grid, vision.hidden
    x = torch.randn(2, grid * grid, dim)
    out = pixel_shuffle(x, vision)
    assert out.shape == (2, (grid // 2) ** 2, 4 * dim)
    patches = x.reshape(2, grid, grid, dim)
    for a in range(grid // 2):
        for b in range(grid // 2):
            want = torch.cat(
                [patches[:, 2 * a + q, 2 * b + p] for q in range(2) for p in range(2)], dim=-1
            )
            torch.testing.assert_close(out[:, a * (grid // 2) + b], want, rtol=0, atol=0)


def test_the_vision_encoder_is_stock_siglip_then_the_shuffle_then_mlp1(model) -> None:
    x = inputs(model.config)["images"]
    with torch.no_grad():
        patches = model.siglip(pixel_values=x).last_hidden_state
        want = model.mlp1(pixel_shuffle(patches, model.config.vision))
        got = model.embed_images(x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert got.shape == (model.config.n_slots, model.config.vision.num_tokens, 64)


def stock_language_model(model: GrootN15Model, ids: torch.Tensor, images: torch.Tensor):
    """The stock Qwen3Model on the real tokens, images scattered at the image tokens."""
    lm = model.language_model
    x = lm.embed_tokens(ids).clone()
    x[0, ids[0] == model.config.image_token_id] = images.reshape(-1, x.shape[-1])
    out = lm(inputs_embeds=x, output_hidden_states=True)
    return out.hidden_states


def test_the_language_model_is_read_after_its_final_norm_as_upstream_reads_select_layer(
    model,
) -> None:
    c = model.config
    ex = inputs(c, real_tokens=c.max_token_len)
    with torch.no_grad():
        tokens = model.embed_images(ex["images"])
        got, pad = model.backbone_features(
            tokens, ex["image_mask"], ex["token_ids"], ex["token_mask"]
        )
        ids = torch.cat([model.layout_ids[None], ex["token_ids"]], dim=1)
        hidden = stock_language_model(model, ids, tokens)
        lm = model.language_model
        x = hidden[c.text.depth - 1]
        cos_sin = lm.rotary_emb(x, torch.arange(x.shape[1])[None])
        causal = causal_pad_mask(torch.ones(1, x.shape[1]), x.dtype)
        raw = lm.layers[-1](x, attention_mask=causal, position_embeddings=cos_sin)
    assert len(hidden) == c.text.depth + 1
    assert pad.sum() == c.prefix_len
    torch.testing.assert_close(got, hidden[c.text.depth], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, lm.norm(raw), rtol=1e-5, atol=1e-5)
    assert (got - raw).abs().max() > 0.1  # N1.7 reads ``raw``, N1.5 its norm


def test_pads_and_an_absent_slot_give_the_real_tokens_what_their_removal_gives(model) -> None:
    c = model.config
    ex = inputs(c, real_tokens=3)
    ex["image_mask"] = torch.tensor([1.0, 0.0])
    with torch.no_grad():
        tokens = model.embed_images(ex["images"])
        got, pad = model.backbone_features(
            tokens, ex["image_mask"], ex["token_ids"], ex["token_mask"]
        )
        ids = torch.cat([model.layout_ids[None], ex["token_ids"]], dim=1)
        real = pad[0] != 0
        hidden = stock_language_model(model, ids[:, real], tokens[:1])
    assert int(real.sum()) == c.lead_len + c.slot_len + 3
    torch.testing.assert_close(got[:, real], hidden[-1], rtol=1e-5, atol=1e-5)


def attention(q_in, kv_in, attn, mask=None):
    """Multi-head attention written out (diffusers' ``Attention`` with biases)."""
    heads = attn.heads
    q = attn.to_q(q_in).unflatten(-1, (heads, -1)).transpose(1, 2)
    k = attn.to_k(kv_in).unflatten(-1, (heads, -1)).transpose(1, 2)
    v = attn.to_v(kv_in).unflatten(-1, (heads, -1)).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)
    return attn.to_out[0](out)


def reference_dit(dit, tokens, context, temb, allowed):
    """N1.5's DiT written out: ada-norm blocks, odd ones self-attending (interleaved)."""
    x = tokens
    for i, block in enumerate(dit.transformer_blocks):
        scale, shift = block.norm1.linear(F.silu(temb)).chunk(2, dim=1)
        h = F.layer_norm(x, x.shape[-1:], eps=1e-5) * (1 + scale[:, None]) + shift[:, None]
        if i % 2 == 1:
            x = x + attention(h, h, block.attn1)
        else:
            x = x + attention(h, context, block.attn1, allowed)
        h = F.layer_norm(x, x.shape[-1:], eps=1e-5)
        x = x + block.ff.net[2](F.gelu(block.ff.net[0].proj(h), approximate="tanh"))
    shift, scale = dit.proj_out_1(F.silu(temb)).chunk(2, dim=1)
    x = F.layer_norm(x, x.shape[-1:], eps=1e-6) * (1 + scale[:, None]) + shift[:, None]
    return dit.proj_out_2(x)


def test_the_velocity_is_the_dit_over_state_future_and_action_tokens(model) -> None:
    """State token, the learned future tokens, the action tokens (encoder + positions);
    even blocks cross-attend to every real backbone token, odd blocks to themselves."""
    c = model.config
    e = c.embodiment_id
    gen = torch.Generator().manual_seed(3)
    vl = torch.randn(1, c.prefix_len, c.backbone_width, generator=gen)
    allowed = torch.rand(1, c.prefix_len, generator=gen) > 0.3
    state_tokens = torch.randn(1, 1, c.input_embedding_dim, generator=gen)
    x_t = torch.randn(1, c.action_horizon, c.max_action_dim, generator=gen)
    bucket = torch.tensor([500.0])
    with torch.no_grad():
        got = model.velocity(
            vl,
            allowed.float(),
            state_tokens,
            x_t,
            timestep_features(bucket, c.timestep_channels),
            sinusoid(bucket, c.input_embedding_dim),
            e,
        )
        enc = model.action_encoder
        a = x_t @ enc.W1.W[e] + enc.W1.b[e]
        tau = sinusoid(bucket, c.input_embedding_dim)[:, None].expand(-1, c.action_horizon, -1)
        a = F.silu(torch.cat([a, tau], -1) @ enc.W2.W[e] + enc.W2.b[e]) @ enc.W3.W[e] + enc.W3.b[e]
        a = a + model.position_embedding.weight[: c.action_horizon]
        tokens = torch.cat([state_tokens, model.future_tokens.weight[None], a], dim=1)
        temb = model.dit.timestep_encoder(timestep_features(bucket, c.timestep_channels))
        out = reference_dit(model.dit, tokens, vl, temb, allowed)
        dec = model.action_decoder
        pred = F.relu(out @ dec.layer1.W[e] + dec.layer1.b[e]) @ dec.layer2.W[e] + dec.layer2.b[e]
    assert tokens.shape[1] == c.suffix_len
    torch.testing.assert_close(got, pred[:, -c.action_horizon :], rtol=1e-5, atol=1e-5)


def test_without_interleaving_every_dit_block_cross_attends() -> None:
    config = GrootN15Config.tiny(interleave_self_attention=False)
    dit = GrootN15Model(config).dit
    widths = [b.attn1.to_k.in_features for b in dit.transformer_blocks]
    assert widths == [config.backbone_width] * config.dit.depth
    inter = GrootN15Model(GrootN15Config.tiny()).dit
    assert [b.attn1.to_k.in_features for b in inter.transformer_blocks] == [64, 32, 64, 32]


def test_the_backbone_projection_is_built_only_with_project_to_dim() -> None:
    base = GrootN15Model(GrootN15Config.tiny())
    assert not hasattr(base.backbone, "eagle_linear")
    projected = GrootN15Config.tiny(
        project_to_dim=48, vl_self_attention={"depth": 1, "num_heads": 4, "head_dim": 12}
    )
    model = GrootN15Model(projected).eval()
    keys = model.state_dict()
    assert keys["backbone.eagle_linear.weight"].shape == (48, 64)
    assert keys["action_head.model.transformer_blocks.0.attn1.to_k.weight"].shape == (32, 48)
    ex = inputs(projected)
    out = model.sample_actions(**ex)
    assert out.shape == ex["noise"].shape and torch.isfinite(out).all()


def test_the_three_stages_chained_equal_sample_actions(model) -> None:
    ex = inputs(model.config)
    ex["image_mask"] = torch.tensor([1.0, 0.0])
    stages = build_stages(model)
    want = model.sample_actions(**ex)
    got = run_stages(stages, **ex)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert stages.repeats()["action_head"]["count"] == model.config.flow_steps == 4


def test_an_executed_prefix_is_kept_exactly_and_the_rest_still_moves(model) -> None:
    c = model.config
    ex = inputs(c)
    stages = build_stages(model)
    prefix = torch.randn(1, c.action_horizon, c.max_action_dim)
    keep = torch.zeros(1, c.action_horizon)
    keep[0, :2] = 1.0
    got = run_stages(stages, **ex, prefix_actions=prefix, prefix_mask=keep)
    torch.testing.assert_close(got[:, :2], prefix[:, :2], rtol=0, atol=0)
    assert not torch.allclose(got[:, 2:], model.sample_actions(**ex)[:, 2:], atol=1e-6)


def test_the_full_size_matches_the_published_n15_shapes() -> None:
    """build_engine.sh: 256 SigLIP tokens of 1152 go to the language model whole."""
    c = GrootN15Config.full_n15()
    assert c.vision.num_patches == 256 and c.vision.hidden == 1152
    assert c.vision.num_tokens == 256 and c.vision.shuffled_dim == 1152
    assert c.backbone_width == 2048 and c.text.depth == 12
    assert c.input_embedding_dim == 1536 and c.suffix_len == 49 and c.hidden_size == 1024
    assert (c.max_state_dim, c.action_horizon, c.max_action_dim) == (64, 16, 32)
    with torch.device("meta"):
        model = GrootN15Model(c)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes["backbone.eagle_model.mlp1.0.weight"] == (2048, 1152)
    assert "backbone.eagle_model.mlp1.1.weight" not in shapes
    assert shapes["action_head.model.transformer_blocks.0.attn1.to_k.weight"] == (1536, 2048)
    assert shapes["action_head.model.transformer_blocks.1.attn1.to_k.weight"] == (1536, 1536)
    assert shapes["action_head.future_tokens.weight"] == (32, 1536)


def test_inconsistent_sizes_are_named_config_errors() -> None:
    with pytest.raises(ConfigError, match="embodiment_id=4 must be below max_num_embodiments=4"):
        GrootN15Config.tiny(embodiment_id=4)
    with pytest.raises(ConfigError, match="vl_self_attention width 32.*backbone's width 64"):
        GrootN15Config.tiny(vl_self_attention={"depth": 1, "num_heads": 2, "head_dim": 16})
    with pytest.raises(ConfigError, match="shuffle=2 does not divide the patch grid 3"):
        SiglipSize(
            hidden=8, depth=1, num_heads=2, mlp_dim=8, patch_size=4, image_size=12, shuffle=2
        )


def test_without_the_pixel_shuffle_each_patch_is_a_token_through_one_linear() -> None:
    vision = SiglipSize(hidden=32, depth=1, num_heads=4, mlp_dim=64, patch_size=8, image_size=32)
    config = GrootN15Config.tiny(vision=vision, projector_layers=1)
    model = GrootN15Model(config).eval()
    x = inputs(config)["images"]
    with torch.no_grad():
        patches = model.siglip(pixel_values=x).last_hidden_state
        (linear,) = model.mlp1
        torch.testing.assert_close(model.embed_images(x), linear(patches), rtol=0, atol=0)
    assert config.vision.num_tokens == 16 and config.slot_len == 18


def test_the_vl_tokens_and_the_velocity_with_pads_equal_upstreams_without_them(model) -> None:
    """Upstream runs the VL self-attention and the DiT unmasked on a sequence without pads;
    here the pads are masked as keys, which must give the real tokens the same values."""
    c = model.config
    ex = inputs(c, real_tokens=3)
    ex["image_mask"] = torch.tensor([1.0, 0.0])
    e = c.embodiment_id
    bucket = torch.tensor([250.0])
    times = (
        timestep_features(bucket, c.timestep_channels),
        sinusoid(bucket, c.input_embedding_dim),
    )
    with torch.no_grad():
        tokens = model.embed_images(ex["images"])
        vl, pad, state_tokens = model.fuse(
            tokens, ex["image_mask"], ex["token_ids"], ex["token_mask"], ex["state"], e
        )
        ids = torch.cat([model.layout_ids[None], ex["token_ids"]], dim=1)
        real = pad[0] != 0
        hidden = stock_language_model(model, ids[:, real], tokens[:1])[-1]
        want_vl = model.vl_self_attention(model.vlln(hidden))
        got_v = model.velocity(vl, pad, state_tokens, ex["noise"], *times, e)
        want_v = model.velocity(
            want_vl, torch.ones(1, want_vl.shape[1]), state_tokens, ex["noise"], *times, e
        )
    torch.testing.assert_close(vl[:, real], want_vl, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_v, want_v, rtol=1e-5, atol=1e-5)


# -- any device, any dtype (the CUDA path's precondition) -------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_the_whole_chunk_on_meta_makes_no_host_tensor(dtype) -> None:
    from device_clean import chunk_on_meta

    config = GrootN15Config.tiny()
    chunk = chunk_on_meta(GrootN15Model, config, build_stages, run_stages, dtype)
    split, reference, checked = chunk
    assert checked.ops > 100
    for actions in (split, reference):
        assert actions.device.type == "meta"
        assert tuple(actions.shape) == (1, config.action_horizon, config.max_action_dim)
        assert actions.dtype == torch.float32


def test_bf16_weights_on_the_cpu_stay_close_to_float32(model) -> None:
    from device_clean import relative_rms

    x = inputs(model.config)
    want = model.sample_actions(**x)
    low = GrootN15Model(model.config).eval()
    low.load_state_dict(model.state_dict())
    got = run_stages(build_stages(low.to(torch.bfloat16)), **x)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    assert relative_rms(got, want) < 0.05  # as N1.7's bound (test_arch_groot.py)
