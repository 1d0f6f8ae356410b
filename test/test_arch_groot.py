"""GR00T N1.7: the stage split equals the reference, and each upstream departure from stock
transformers is reproduced against its reference formula (tiny sizes, single thread).

Reference formulas: NVIDIA/Isaac-GR00T ``gr00t/model/gr00t_n1d7/gr00t_n1d7.py`` @2d1e82fe
(the Euler loop), ``gr00t/model/modules/dit.py`` @2ea60d6d (AlternateVLDiT, AdaLayerNorm),
diffusers' ``get_timestep_embedding`` and ``Attention`` (SDPA with a boolean mask), and
stock transformers 5.24 Qwen3-VL (``Qwen3VLModel.forward``, ``get_rope_index``, the image
processor's ``patchify``).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from device_clean import chunk_on_meta, relative_rms
from torch import nn
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from vla_edge.archs.groot import GrootConfig, GrootModel, build_stages, count_parameters, run_stages
from vla_edge.archs.groot.config import TextSize
from vla_edge.archs.groot.layers import (
    AdaLayerNorm,
    deepstack_inject,
    euler_times,
    mrope_positions,
    patchify,
    sinusoid,
    time_buckets,
    timestep_features,
)
from vla_edge.archs.groot.stages import head_actions
from vla_edge.core.errors import ConfigError

# real architectures built and run at tiny sizes: in `make test`, not the fast tier
pytestmark = pytest.mark.slow

BF16_RMS_OVER_RANGE = 0.05
"""bfloat16 weights against float32: each action dim's RMS error over its range in the chunk."""


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def randomised(config: GrootConfig, seed: int = 0) -> GrootModel:
    """A tiny model with every parameter random (unit norms and zero biases would hide bugs)."""
    torch.manual_seed(seed)
    model = GrootModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="module")
def setup():
    model = randomised(GrootConfig.tiny())
    stages = build_stages(model)
    return model, stages, stages.example_inputs()


def host(example):
    (images,) = example["vision_encoder"]
    _, _, image_mask, token_ids, token_mask, state = example["fusion"]
    noise = example["action_head"][4]
    return images, image_mask, token_ids, token_mask, state, noise


# -- the stage split ---------------------------------------------------------------------------


def test_stage_split_equals_sample_actions(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise = host(example)
    reference = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)
    split = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    assert split.shape == (1, model.config.action_horizon, model.config.max_action_dim)
    torch.testing.assert_close(split, reference, rtol=1e-5, atol=1e-5)


def test_each_stage_returns_its_declared_outputs(setup):
    _, stages, example = setup
    values = {}
    for name in ("vision_encoder", "fusion", "action_head"):
        specs = stages.inputs()[name]
        args = [
            values.get(s.name, v) if s.source.startswith("stage:") else v
            for s, v in zip(specs, example[name], strict=True)
        ]
        out = stages.modules()[name](*args)
        out = out if isinstance(out, tuple) else (out,)
        for spec, value in zip(stages.outputs()[name], out, strict=True):
            assert tuple(value.shape) == spec.shape, spec.name
            assert value.dtype == torch.float32, spec.name
            values[spec.name] = value


def test_action_head_is_called_k_4_times_with_one_hot_steps_and_carries_x_t():
    config = GrootConfig.tiny()
    assert config.flow_steps == GrootConfig.full_n17().flow_steps == 4
    stages = build_stages(randomised(config))
    loop = stages.repeats()["action_head"]
    assert loop["count"] == 4
    assert loop["carry"] == {"x_t": "actions"}
    steps = torch.tensor(loop["inputs"]["step"])
    assert steps.shape == (4, 1, 4)
    torch.testing.assert_close(steps[:, 0], torch.eye(4))


def test_flow_runs_from_noise_at_t0_to_actions_at_t1_in_buckets_of_int_t_times_1000(setup):
    model, stages, example = setup
    assert euler_times(4) == [0.0, 0.25, 0.5, 0.75]
    assert time_buckets(4) == [0, 250, 500, 750]
    assert time_buckets(3) == [0, 333, 666]  # int() truncates, as upstream's int(t_cont * 1000)
    seen = []
    hook = model.dit.timestep_encoder.register_forward_hook(
        lambda module, args, out: seen.append(args[0].clone())
    )
    try:
        run_stages(stages, *host(example))
    finally:
        hook.remove()
    expected = timestep_features(torch.tensor([0.0, 250.0, 500.0, 750.0]), 16)
    torch.testing.assert_close(torch.cat(seen), expected)
    head = stages.action_head
    torch.testing.assert_close(head.step_times.flatten(), torch.tensor(euler_times(4)))
    assert head.dt == pytest.approx(0.25)  # x <- x + v / K, towards t = 1


def test_euler_loop_matches_upstream_get_action_transliterated(setup):
    """``get_action_with_features``: actions = noise; for t in range(K): t_cont = t / K,
    bucket = int(t_cont * 1000), action encoder + position table, cat(state, actions), DiT,
    decoder, actions += dt * pred[:, -H:]; the DiT re-derived from diffusers' formulas."""
    model, _, example = setup
    images, image_mask, token_ids, token_mask, state, noise = host(example)
    c = model.config
    e = c.embodiment_id
    with torch.no_grad():
        tokens, deep = model.embed_images(images)
        vl, text_mask, image_mask_seq, state_tokens = model.fuse(
            tokens, deep, image_mask, token_ids, token_mask, state
        )
        actions = noise.clone()
        k = c.flow_steps
        for t in range(k):
            bucket = int(t / float(k) * c.num_timestep_buckets)
            ts = torch.full((1,), bucket)
            a = upstream_action_encoder(model.action_encoder, actions, ts, e)
            a = a + model.position_embedding(torch.arange(a.shape[1]))[None]
            sa = torch.cat([state_tokens, a], dim=1)
            out = upstream_alternate_dit(
                model.dit, sa, vl, ts, image_mask_seq.bool(), (text_mask + image_mask_seq).bool(), c
            )
            pred = model.action_decoder(out, e)
            actions = actions + (1.0 / k) * pred[:, -c.action_horizon :]
    ours = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)
    torch.testing.assert_close(ours, actions, rtol=1e-4, atol=1e-5)


def diffusers_timestep_embedding(timesteps, dim, flip_sin_to_cos, downscale_freq_shift):
    half = dim // 2
    exponent = -math.log(10000) * torch.arange(0, half, dtype=torch.float32)
    exponent = exponent / (half - downscale_freq_shift)
    emb = timesteps[:, None].float() * torch.exp(exponent)[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    return emb


def upstream_action_encoder(encoder, actions, timesteps, e):
    b, t, _ = actions.shape
    ts = timesteps.unsqueeze(1).expand(-1, t)
    a_emb = torch.bmm(actions, encoder.W1.W[[e] * b]) + encoder.W1.b[[e] * b].unsqueeze(1)
    half = encoder.hidden_size // 2
    exponent = -torch.arange(half, dtype=torch.float) * (math.log(10000.0) / half)
    freqs = ts.float().unsqueeze(-1) * exponent.exp()
    tau = torch.cat([torch.sin(freqs), torch.cos(freqs)], dim=-1)
    x = torch.cat([a_emb, tau], dim=-1)
    x = torch.bmm(x, encoder.W2.W[[e] * b]) + encoder.W2.b[[e] * b].unsqueeze(1)
    x = x * torch.sigmoid(x)
    return torch.bmm(x, encoder.W3.W[[e] * b]) + encoder.W3.b[[e] * b].unsqueeze(1)


def diffusers_attention(attn, x, context, bool_mask):
    b = x.shape[0]
    src = x if context is None else context
    q = attn.to_q(x).view(b, -1, attn.heads, attn.head_dim).transpose(1, 2)
    k = attn.to_k(src).view(b, -1, attn.heads, attn.head_dim).transpose(1, 2)
    v = attn.to_v(src).view(b, -1, attn.heads, attn.head_dim).transpose(1, 2)
    mask = None if bool_mask is None else bool_mask[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return attn.to_out[0](out.transpose(1, 2).reshape(b, -1, attn.heads * attn.head_dim))


def upstream_alternate_dit(dit, hidden, context, timestep, image_mask, attention_mask, config):
    temb = dit.timestep_encoder.timestep_embedder(
        diffusers_timestep_embedding(timestep, config.timestep_channels, True, 1)
    )
    image_attention = image_mask & attention_mask
    text_attention = (~image_mask) & attention_mask
    for idx, block in enumerate(dit.transformer_blocks):
        scale, shift = block.norm1.linear(F.silu(temb)).chunk(2, dim=1)
        norm = (
            F.layer_norm(hidden, hidden.shape[-1:], eps=1e-5) * (1 + scale[:, None])
            + shift[:, None]
        )
        if idx % 2 == 1:
            attn = diffusers_attention(block.attn1, norm, None, None)
        else:
            every = 2 * config.attend_text_every_n_blocks
            mask = text_attention if idx % every == 0 else image_attention
            attn = diffusers_attention(block.attn1, norm, context, mask)
        hidden = hidden + attn
        ff = block.ff.net[0].proj(F.layer_norm(hidden, hidden.shape[-1:], eps=1e-5))
        hidden = hidden + block.ff.net[2](F.gelu(ff, approximate="tanh"))
    shift, scale = dit.proj_out_1(F.silu(temb)).chunk(2, dim=1)
    hidden = (
        F.layer_norm(hidden, hidden.shape[-1:], eps=1e-6) * (1 + scale[:, None]) + shift[:, None]
    )
    return dit.proj_out_2(hidden)


def test_dit_alternates_text_image_cross_attention_with_self_attention():
    config = GrootConfig.tiny(dit={"depth": 8, "num_heads": 4, "head_dim": 8})
    dit = randomised(config).dit
    kinds = [
        "self" if i % 2 else ("text" if dit.attends_text(i) else "image")
        for i in range(len(dit.transformer_blocks))
    ]
    assert kinds == ["text", "self", "image", "self", "text", "self", "image", "self"]
    for i, block in enumerate(dit.transformer_blocks):
        width = config.dit.width if i % 2 else config.text.width
        assert block.attn1.to_k.in_features == width


def test_time_features_equal_diffusers_and_upstream_sinusoid():
    buckets = torch.tensor([0.0, 250.0, 500.0, 750.0])
    torch.testing.assert_close(
        timestep_features(buckets, 256), diffusers_timestep_embedding(buckets, 256, True, 1)
    )
    half = 24
    exponent = -torch.arange(half, dtype=torch.float) * (math.log(10000.0) / half)
    freqs = buckets[:, None] * exponent.exp()
    torch.testing.assert_close(sinusoid(buckets, 48), torch.cat([freqs.sin(), freqs.cos()], -1))


def test_ada_layer_norm_takes_scale_before_shift():
    torch.manual_seed(0)
    norm = AdaLayerNorm(8)
    x, temb = torch.randn(2, 3, 8), torch.randn(2, 8)
    scale, shift = norm.linear(F.silu(temb)).chunk(2, dim=1)
    want = F.layer_norm(x, (8,), eps=1e-5) * (1 + scale[:, None]) + shift[:, None]
    torch.testing.assert_close(norm(x, temb), want)


# -- the backbone against stock Qwen3-VL -------------------------------------------------------


def stock_sequence(model, image_mask, token_ids, token_mask):
    """The prompt as upstream's processor gives it at batch 1: absent slots and pads removed."""
    ids = torch.cat([model.layout_ids[None], token_ids], dim=1)[0]
    keep = model.sequence_pad(image_mask, token_mask)[0] != 0
    return ids[keep][None], keep


def test_patchify_equals_stock_image_processor():
    v = GrootConfig.tiny().vision
    images = torch.rand(2, 3, v.image_size, v.image_size)
    processor = Qwen2VLImageProcessorPil()
    for image, ours in zip(images, patchify(images, v), strict=True):
        stock, gh, gw = processor.patchify(
            image.numpy(), v.patch_size, v.spatial_merge_size, v.temporal_patch_size
        )
        assert (gh, gw) == (v.grid, v.grid)
        torch.testing.assert_close(ours, torch.from_numpy(stock), rtol=0, atol=0)


@pytest.mark.parametrize("present", [(1.0, 1.0), (1.0, 0.0), (0.0, 1.0)])
def test_mrope_positions_equal_stock_get_rope_index(present):
    model = randomised(GrootConfig.tiny())
    c = model.config
    image_mask = torch.tensor(present)
    token_ids = torch.randint(0, 400, (1, c.max_token_len))
    token_mask = (torch.arange(c.max_token_len) < 5)[None].float()
    ids, keep = stock_sequence(model, image_mask, token_ids, token_mask)
    n_present = int(image_mask.sum())
    grid = torch.tensor([[1, c.vision.grid, c.vision.grid]] * n_present)
    stock, _ = model.backbone.model.model.get_rope_index(
        ids, mm_token_type_ids=(ids == c.image_token_id).int(), image_grid_thw=grid
    )
    ours = mrope_positions(c, image_mask, token_mask)[:, :, keep]
    torch.testing.assert_close(ours, stock.to(torch.float32))


@pytest.mark.parametrize("present", [(1.0, 1.0), (0.0, 1.0)])
def test_backbone_equals_stock_qwen3_vl_cut_without_final_norm(present):
    """Stock ``Qwen3VLModel.forward`` (vision tower, masked_scatter, get_rope_index, deepstack)
    with its final norm removed equals our fixed-shape pass at every real token."""
    model = randomised(GrootConfig.tiny()).double()
    c = model.config
    torch.manual_seed(1)
    images = torch.rand(c.n_slots, 3, c.vision.image_size, c.vision.image_size, dtype=torch.float64)
    images = images * 2 - 1
    image_mask = torch.tensor(present)
    token_ids = torch.randint(0, 400, (1, c.max_token_len))
    token_mask = (torch.arange(c.max_token_len) < 6)[None].float()
    with torch.no_grad():
        tokens, deep = model.embed_images(images)
        ours, pad = model.language_features(tokens, deep, image_mask, token_ids, token_mask)
        ids, keep = stock_sequence(model, image_mask, token_ids, token_mask)
        shown = images[image_mask != 0]
        pixels = patchify(shown, c.vision).reshape(-1, c.vision.patch_dim)
        grid = torch.tensor([[1, c.vision.grid, c.vision.grid]] * shown.shape[0])
        qwen = model.backbone.model.model
        norm = qwen.language_model.norm
        qwen.language_model.norm = nn.Identity()
        try:
            stock = qwen(
                input_ids=ids,
                pixel_values=pixels,
                image_grid_thw=grid,
                mm_token_type_ids=(ids == c.image_token_id).int(),
            ).last_hidden_state
        finally:
            qwen.language_model.norm = norm
    # float64 weights, but stock eager attention takes its softmax in float32: with a slot
    # removed the rows are shorter and round differently (~1e-7), so not bit-equal then
    tol = 1e-9 if all(present) else 1e-6
    torch.testing.assert_close(ours[:, keep], stock, rtol=tol, atol=tol)
    torch.testing.assert_close(pad[0] != 0, keep)


def test_language_model_is_cut_to_select_layer_and_its_final_norm_is_unread(setup):
    model, stages, example = setup
    assert len(model.language_model.layers) == model.config.text.depth
    before = stages.fusion(*example["fusion"])
    with torch.no_grad():
        saved = model.language_model.norm.weight.clone()
        model.language_model.norm.weight.mul_(3.0)
    try:
        after = stages.fusion(*example["fusion"])
    finally:
        with torch.no_grad():
            model.language_model.norm.weight.copy_(saved)
    for a, b in zip(before, after, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_deepstack_tap_j_is_added_after_language_layer_j_only(setup):
    model, stages, example = setup
    image_tokens, deepstack, image_mask, token_ids, token_mask, _ = example["fusion"]
    inputs = {}
    hooks = [
        layer.register_forward_pre_hook(
            lambda module, args, i=i: inputs.__setitem__(i, args[0].clone())
        )
        for i, layer in enumerate(model.language_model.layers)
    ]
    try:
        zero = torch.zeros_like(deepstack)
        model.language_features(image_tokens, zero, image_mask, token_ids, token_mask)
        base = dict(inputs)
        one = zero.clone()
        one[1] = deepstack[1]
        model.language_features(image_tokens, one, image_mask, token_ids, token_mask)
    finally:
        for hook in hooks:
            hook.remove()
    rows = model.image_rows
    for i in (0, 1):
        torch.testing.assert_close(inputs[i], base[i], rtol=0, atol=0)
    diff = inputs[2] - base[2]
    width = diff.shape[-1]
    torch.testing.assert_close(diff[0, rows], deepstack[1].reshape(-1, width), rtol=1e-5, atol=1e-5)
    others = torch.ones(diff.shape[1], dtype=torch.bool)
    others[rows] = False
    assert diff[0, others].abs().max() == 0


def test_deepstack_inject_adds_at_the_image_rows_only():
    hidden = torch.zeros(1, 6, 2)
    out = deepstack_inject(hidden, torch.ones(2, 2), torch.tensor([2, 4]))
    assert out[0, :, 0].tolist() == [0, 0, 1, 0, 1, 0]


def test_absent_slot_content_does_not_change_the_actions(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise = host(example)
    assert image_mask[-1] == 0
    other = images.clone()
    other[-1] = torch.rand_like(other[-1])
    a = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    b = run_stages(stages, other, image_mask, token_ids, token_mask, state, noise)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


# -- the per-embodiment slices -----------------------------------------------------------------


def per_embodiment_weights(model):
    return [
        p
        for name, p in model.named_parameters()
        if name.rsplit(".", 1)[-1] in ("W", "b")
        and name.split(".")[1] in ("state_encoder", "action_encoder", "action_decoder")
    ]


def test_embodiment_slice_changes_the_actions_only_through_its_own_slice():
    model = randomised(GrootConfig.tiny())
    stages = build_stages(model)
    x = host(stages.example_inputs())
    e = model.config.embodiment_id
    base = run_stages(stages, *x)
    weights = per_embodiment_weights(model)
    assert len(weights) == 14  # 2 layers x (W, b) x 2 MLPs + 3 layers x (W, b)
    with torch.no_grad():
        for p in weights:
            for other in range(model.config.max_num_embodiments):
                if other != e:
                    p[other].normal_(0.0, 1.0)
    torch.testing.assert_close(run_stages(stages, *x), base, rtol=0, atol=0)
    with torch.no_grad():
        model.action_head.state_encoder.layer1.b[e].add_(0.5)
    assert (run_stages(stages, *x) - base).abs().max() > 1e-3


def test_sample_actions_embodiment_override_selects_another_slice(setup):
    model, _, example = setup
    x = host(example)
    a = model.sample_actions(*x, embodiment=0)
    b = model.sample_actions(*x, embodiment=model.config.embodiment_id)
    assert (a - b).abs().max() > 1e-3


# -- sizes, devices, dtypes --------------------------------------------------------------------


def test_full_size_builds_on_meta_with_upstream_sizes():
    config = GrootConfig.full_n17()
    with torch.device("meta"):
        model = GrootModel(config)
    c = model.config
    assert len(model.visual.blocks) == 24
    assert model.visual.deepstack_visual_indexes == [5, 11, 17]
    assert len(model.language_model.layers) == 16
    assert len(model.dit.transformer_blocks) == 32
    assert len(model.vl_self_attention.transformer_blocks) == 4
    assert model.action_head.state_encoder.layer1.W.shape == (32, 132, 1024)
    assert model.action_head.action_encoder.W2.W.shape == (32, 2 * 1536, 1536)
    assert c.vision.num_tokens == 64 and c.flow_steps == 4
    # upstream names it GR00T-N1.7-3B: vision 407 M, language model 16 of 28 layers with its
    # token table 1117 M, VL self-attention 201 M, DiT 1092 M, per-embodiment encoders 326 M
    assert count_parameters(model) == 3_144_016_000


def test_invalid_sizes_are_config_errors_naming_the_field():
    with pytest.raises(ConfigError, match="embodiment_id=40 must be below max_num_embodiments=32"):
        GrootConfig.full_n17(embodiment_id=40)
    with pytest.raises(ConfigError, match="mrope_section"):
        TextSize(width=64, depth=1, mlp_dim=8, num_heads=4, num_kv_heads=2, head_dim=16)
    with pytest.raises(ConfigError, match="vl_self_attention width"):
        GrootConfig.tiny(vl_self_attention={"depth": 1, "num_heads": 2, "head_dim": 8})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_whole_chunk_on_meta_makes_no_host_tensor(dtype):
    config = GrootConfig.tiny()
    split, reference, checked = chunk_on_meta(GrootModel, config, build_stages, run_stages, dtype)
    assert checked.ops > 100
    for actions in (split, reference):
        assert actions.device.type == "meta"
        assert tuple(actions.shape) == (1, config.action_horizon, config.max_action_dim)
        assert actions.dtype == torch.float32


def test_bf16_weights_on_cpu_stay_close_to_float32(setup):
    model, _, example = setup
    x = host(example)
    want = model.sample_actions(*x)
    low = randomised(GrootConfig.tiny()).to(torch.bfloat16)
    stages = build_stages(low)
    got = run_stages(stages, *x)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    assert relative_rms(got, want) < BF16_RMS_OVER_RANGE


def test_head_actions_with_all_zero_prefix_mask_equals_no_prefix(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise = host(example)
    tokens, deep = stages.vision_encoder(images)
    fused = stages.fusion(tokens, deep, image_mask, token_ids, token_mask, state)
    prefix = torch.randn_like(noise)
    free = head_actions(stages, *fused, noise, prefix, torch.zeros(1, noise.shape[1]))
    torch.testing.assert_close(free, model.sample_actions(*host(example)), rtol=1e-5, atol=1e-5)
    mask = torch.zeros(1, noise.shape[1])
    mask[0, :2] = 1.0
    held = head_actions(stages, *fused, noise, prefix, mask)
    torch.testing.assert_close(held[0, :2], prefix[0, :2])


def test_each_stage_exports_and_its_program_equals_the_module(setup):
    _, stages, example = setup
    values = {}
    for name, module in stages.modules().items():
        specs = stages.inputs()[name]
        args = tuple(
            values.get(s.name, v) if s.source.startswith("stage:") else v
            for s, v in zip(specs, example[name], strict=True)
        )
        program = torch.export.export(module, args, strict=False)
        with torch.no_grad():
            got, want = program.module()(*args), module(*args)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for spec, a, b in zip(stages.outputs()[name], got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
            values[spec.name] = b
