"""SmolVLA: the stage split equals the reference and a line-by-line port of LeRobot's
sampling, and each LeRobot departure from stock transformers is reproduced and matters
(tiny sizes, single thread)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.smolvlm.modeling_smolvlm import SmolVLMModel

from vla_edge.archs.pi0.layers import additive_mask, attention, euler_times
from vla_edge.archs.smolvla import SmolVLAConfig, SmolVLAModel, build_stages, run_stages
from vla_edge.archs.smolvla.config import get_intermediate_size
from vla_edge.archs.smolvla.layers import (
    flow_times,
    rebase_positions,
    rope_tables,
    rotate,
    suffix_positions,
    time_embedding,
)
from vla_edge.archs.smolvla.model import smolvlm_config, text_config
from vla_edge.archs.smolvla.stages import head_actions

# real architectures built and run at tiny sizes: in `make test`, not the fast tier
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def randomised(config: SmolVLAConfig, seed: int = 0) -> SmolVLAModel:
    """A tiny model with every parameter random (unit norms would hide bugs)."""
    torch.manual_seed(seed)
    model = SmolVLAModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="module")
def setup():
    model = randomised(SmolVLAConfig.tiny())
    stages = build_stages(model)
    return model, stages, stages.example_inputs()


def host(example):
    (images,) = example["vision_encoder"]
    _, image_mask, token_ids, token_mask, state = example["fusion"]
    _, _, _, noise, prefix_actions, *_ = example["action_head"]
    return images, image_mask, token_ids, token_mask, state, noise, prefix_actions


# -- LeRobot's sampling, transliterated ------------------------------------------------------
# huggingface/lerobot 7427f318, src/lerobot/policies/smolvla/{modeling_smolvla,
# smolvlm_with_expert}.py and policies/common/{flow_matching,vla_utils}.py, on our weights:
# [B, L, H, D] layout, a per-layer cache appended by self-attention layers and cropped after
# each step, torch.where masking with finfo.min, float64 time embedding.


def lr_apply_rope(x, positions, max_wavelength=10_000):
    d_half = x.shape[-1] // 2
    dtype = x.dtype
    x = x.to(torch.float32)
    freq_exponents = (2.0 / x.shape[-1]) * torch.arange(d_half, dtype=torch.float32)
    timescale = max_wavelength**freq_exponents
    radians = positions[..., None].to(torch.float32) / timescale[None, None, :].to(torch.float32)
    radians = radians[..., None, :]
    sin, cos = torch.sin(radians), torch.cos(radians)
    x1, x2 = x.split(d_half, dim=-1)
    res = torch.empty_like(x)
    res[..., :d_half] = x1 * cos - x2 * sin
    res[..., d_half:] = x2 * cos + x1 * sin
    return res.to(dtype)


def lr_attention(mask, q, k, v, heads, kv_heads, head_dim):
    b, s = k.shape[:2]
    groups = heads // kv_heads
    k = k[:, :, :, None, :].expand(b, s, kv_heads, groups, head_dim).reshape(b, s, heads, head_dim)
    v = v[:, :, :, None, :].expand(b, s, kv_heads, groups, head_dim).reshape(b, s, heads, head_dim)
    w = torch.matmul(q.transpose(1, 2), k.transpose(1, 2).transpose(2, 3)) * head_dim**-0.5
    w = torch.where(mask[:, None], w, torch.finfo(torch.float32).min)
    out = torch.matmul(torch.softmax(w, dim=-1), v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)
    return out.reshape(b, -1, heads * head_dim)


def lr_make_att_2d_masks(pad, att):
    cumsum = torch.cumsum(att, dim=1)
    return (cumsum[:, None, :] <= cumsum[:, :, None]) & (pad[:, None, :] * pad[:, :, None])


def lr_sinusoid(time, dim, min_period, max_period):
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64)
    period = min_period * (max_period / min_period) ** fraction
    sin_input = time[..., None] * (1.0 / period * 2 * math.pi)
    return torch.cat([torch.sin(sin_input), torch.cos(sin_input)], dim=-1)


def lr_finish_layer(layer, x, att):
    out = layer.self_attn.o_proj(att) + x
    return layer.mlp(layer.post_attention_layernorm(out)) + out


@torch.no_grad()
def lerobot_sample_actions(model, images, image_mask, token_ids, token_mask, state, noise):
    c = model.config
    heads, kv_heads, hd = c.text.num_heads, c.text.num_kv_heads, c.text.head_dim
    vlm = model.vlm_with_expert.vlm.model
    # embed_prefix
    embs, pads, atts = [], [], []
    for i in range(images.shape[0]):
        img_emb = vlm.connector(vlm.vision_model(pixel_values=images[i : i + 1]).last_hidden_state)
        img_emb = img_emb * torch.tensor(img_emb.shape[-1] ** 0.5, dtype=img_emb.dtype)
        embs.append(img_emb)
        pads.append(torch.tensor([bool(image_mask[i])])[:, None].expand(1, img_emb.shape[1]))
        atts += [0] * img_emb.shape[1]
    lang = vlm.text_model.get_input_embeddings()(token_ids)
    embs.append(lang * math.sqrt(lang.shape[-1]))
    pads.append(token_mask.bool())
    atts += [0] * token_ids.shape[1]
    embs.append(model.state_proj(state)[:, None, :])
    pads.append(torch.ones(1, 1, dtype=torch.bool))
    atts += [1]
    prefix, prefix_pad = torch.cat(embs, dim=1), torch.cat(pads, dim=1)
    att_2d = lr_make_att_2d_masks(prefix_pad, torch.tensor(atts, dtype=torch.bool)[None])
    positions = torch.cumsum(prefix_pad, dim=1) - 1
    # prefix prefill: every VLM layer stores its post-RoPE K/V
    cache = {}
    x = prefix
    for idx, layer in enumerate(vlm.text_model.layers):
        h = layer.input_layernorm(x)
        shape = (*h.shape[:-1], -1, hd)
        q = lr_apply_rope(layer.self_attn.q_proj(h).view(shape), positions)
        k = lr_apply_rope(layer.self_attn.k_proj(h).view(shape), positions)
        v = layer.self_attn.v_proj(h).view(shape)
        cache[idx] = (k, v)
        x = lr_finish_layer(layer, x, lr_attention(att_2d, q, k, v, heads, kv_heads, hd))
    # euler_integrate + denoise_step
    dt = -1.0 / c.flow_steps
    x_t = noise
    prefix_len = prefix_pad.shape[1]
    for step in range(c.flow_steps):
        time = torch.tensor(1.0 + step * dt, dtype=torch.float32).expand(1)
        action_emb = model.action_in_proj(x_t)
        time_emb = lr_sinusoid(time, c.expert_width, c.min_period, c.max_period)
        time_emb = time_emb.type(action_emb.dtype)[:, None, :].expand_as(action_emb)
        suffix = model.action_time_mlp_in(torch.cat([action_emb, time_emb], dim=2))
        suffix = model.action_time_mlp_out(nn.functional.silu(suffix))
        chunk = suffix.shape[1]
        suffix_2d = lr_make_att_2d_masks(
            torch.ones(1, chunk, dtype=torch.bool), torch.ones(1, chunk)
        )
        full_2d = torch.cat([prefix_pad[:, None, :].expand(1, chunk, prefix_len), suffix_2d], 2)
        pos = prefix_pad.sum(dim=-1)[:, None] + torch.cumsum(torch.ones(1, chunk), dim=1) - 1
        y = suffix
        for idx, layer in enumerate(model.expert.layers):
            h = layer.input_layernorm(y)
            shape = (*h.shape[:-1], -1, hd)
            q = layer.self_attn.q_proj(h).view(shape)
            k_cache, v_cache = cache[idx]
            if c.self_attn_every_n_layers > 0 and idx % c.self_attn_every_n_layers == 0:
                q = lr_apply_rope(q, pos)
                k = lr_apply_rope(layer.self_attn.k_proj(h).view(shape), pos)
                v = layer.self_attn.v_proj(h).view(shape)
                keys = torch.cat([k_cache, k], dim=1)  # DynamicCache.update, cropped after
                values = torch.cat([v_cache, v], dim=1)
                att = lr_attention(full_2d, q, keys, values, heads, kv_heads, hd)
            else:
                keys = layer.self_attn.k_proj(k_cache.reshape(*k_cache.shape[:2], -1))
                values = layer.self_attn.v_proj(v_cache.reshape(*v_cache.shape[:2], -1))
                keys = keys.view(*keys.shape[:-1], -1, hd)
                values = values.view(*values.shape[:-1], -1, hd)
                expert_pos = pos - torch.min(pos, dim=1, keepdim=True).values
                mask = full_2d[:, -chunk:, : keys.shape[1]]
                q = lr_apply_rope(q, expert_pos)
                att = lr_attention(mask, q, keys, values, heads, kv_heads, hd)
            y = lr_finish_layer(layer, y, att)
        out = model.expert.norm(y)[:, -c.chunk_size :].to(torch.float32)
        x_t = x_t + dt * model.action_out_proj(out)
    return x_t


# -- the stage split ----------------------------------------------------------------------


def test_stage_split_equals_reference_sampling(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, _ = host(example)
    reference = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)
    split = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    assert split.shape == (1, model.config.chunk_size, model.config.action_dim)
    assert (split - reference).abs().max().item() <= 1e-5
    assert reference.abs().mean() > 0.1


def test_stage_split_equals_lerobots_sampling_transliterated(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, _ = host(example)
    lerobot = lerobot_sample_actions(model, images, image_mask, token_ids, token_mask, state, noise)
    split = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    assert (split - lerobot).abs().max().item() <= 1e-5


def test_stages_share_the_model_parameters_without_copies(setup):
    model, stages, _ = setup
    model_ptrs = {p.data_ptr() for p in model.parameters()}
    per_stage = [p.data_ptr() for s in stages.modules().values() for p in s.parameters()]
    assert len(per_stage) == len(set(per_stage)) and set(per_stage) == model_ptrs
    assert stages.fusion.state_proj is model.state_proj
    assert stages.fusion.text_model.embed_tokens.weight is model.text_model.embed_tokens.weight


def test_stage_declarations_match_what_the_stages_take_and_return(setup):
    _, stages, example = setup
    with torch.no_grad():
        tokens = stages.vision_encoder(*example["vision_encoder"])
        fused = stages.fusion(tokens, *example["fusion"][1:])
        actions = stages.action_head(*fused, *example["action_head"][3:])
    got = {"vision_encoder": (tokens,), "fusion": fused, "action_head": (actions,)}
    for name, specs in stages.outputs().items():
        assert [tuple(t.shape) for t in got[name]] == [s.shape for s in specs]
    for name, specs in stages.inputs().items():
        assert [tuple(t.shape) for t in example[name]] == [s.shape for s in specs]
    sources = [s.source for specs in stages.inputs().values() for s in specs]
    assert {s.removeprefix("host:") for s in sources if s.startswith("host:")} == {
        *("images", "image_mask", "token_ids", "token_mask", "state"),
        *("noise", "prefix_actions", "prefix_mask"),
    }
    assert [s.name for s in stages.inputs()["fusion"]][-1] == "state"  # the state is prefix


# -- masks, slots, state ------------------------------------------------------------------------


def test_masked_image_slot_changes_nothing_when_its_pixels_change(setup):
    _, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, _ = host(example)
    assert image_mask.tolist() == [1.0, 1.0, 0.0]
    base = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    other = images.clone()
    other[2] = torch.rand_like(other[2])
    assert torch.equal(
        run_stages(stages, other, image_mask, token_ids, token_mask, state, noise), base
    )
    other[0] = torch.rand_like(other[0])
    changed = run_stages(stages, other, image_mask, token_ids, token_mask, state, noise)
    assert (changed - base).abs().max() > 1e-4


def test_masked_slot_equals_leaving_the_camera_out_as_lerobot_does(setup):
    # LeRobot skips a camera missing from the batch; a masked slot neither attends nor
    # advances the RoPE positions, so it is the same
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, _ = host(example)
    base = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    two = SmolVLAModel(SmolVLAConfig.tiny(image_slots=("a", "b"))).eval()
    two.load_state_dict(model.state_dict())
    fewer = run_stages(
        build_stages(two), images[:2], torch.ones(2), token_ids, token_mask, state, noise
    )
    torch.testing.assert_close(fewer, base, rtol=1e-5, atol=1e-5)


def test_prompt_padding_length_changes_nothing(setup):
    # LeRobot pads the prompt to the longest in the batch; this package to max_token_len
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, _ = host(example)
    base = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    long = SmolVLAModel(SmolVLAConfig.tiny(max_token_len=24)).eval()
    long.load_state_dict(model.state_dict())
    ids = torch.cat([token_ids, torch.randint(0, 1024, (1, 8))], dim=1)
    mask = torch.cat([token_mask, torch.zeros(1, 8)], dim=1)
    padded = run_stages(build_stages(long), images, image_mask, ids, mask, state, noise)
    torch.testing.assert_close(padded, base, rtol=1e-5, atol=1e-5)


def test_state_is_the_last_prefix_token_and_images_and_language_do_not_see_it(setup):
    model, stages, example = setup
    tokens, image_mask, token_ids, token_mask, state = example["fusion"]
    with torch.no_grad():
        k1, v1, pad = stages.fusion(tokens, image_mask, token_ids, token_mask, state)
        k2, v2, _ = stages.fusion(tokens, image_mask, token_ids, token_mask, state + 1.0)
    assert pad.shape[1] == model.config.prefix_len and pad[0, -1] == 1.0
    # every layer's keys/values of the real image and language tokens ignore the state
    # (padded ones attend to nothing, so their uniform row does; no one reads them) ...
    real = pad[0, :-1] != 0
    assert torch.equal(k1[..., :-1, :][..., real, :], k2[..., :-1, :][..., real, :])
    assert torch.equal(v1[..., :-1, :][..., real, :], v2[..., :-1, :][..., real, :])
    # ... and the state token's own do not (it sees the prefix and itself)
    assert (k1[..., -1, :] - k2[..., -1, :]).abs().max() > 1e-4
    images, image_mask, token_ids, token_mask, state, noise, _ = host(example)
    a = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    b = run_stages(stages, images, image_mask, token_ids, token_mask, state + 1.0, noise)
    assert (a - b).abs().max() > 1e-4


def test_action_tokens_attend_causally(setup):
    model, stages, example = setup
    keys, values, pad, noise, *_ = example["action_head"]
    kv = model.expert_kv(keys, values)
    time_emb = model.time_embedding(torch.tensor([0.6]))
    other = noise.clone()
    other[:, 4] += 1.0
    with torch.no_grad():
        a = model.velocity(kv, pad, noise, time_emb)
        b = model.velocity(kv, pad, other, time_emb)
    assert torch.equal(a[:, :4], b[:, :4])  # earlier actions never see a later one
    assert (a[:, 4:] - b[:, 4:]).abs().amax(dim=-1).min() > 1e-5  # it and later ones do


def test_cross_attention_layers_project_the_backbones_keys_and_values(setup):
    model, _, example = setup
    config = model.config
    t = config.text
    keys, values, pad, noise, *_ = example["action_head"]
    assert config.cross_attention_layers == (1, 3)
    kv = model.expert_kv(keys, values)
    for i, layer in enumerate(model.expert.layers):
        proj = layer.self_attn.k_proj
        if i in config.cross_attention_layers:
            # Linear(vlm_kv_heads * head_dim, expert_kv_heads * head_dim) on the cache
            assert proj.in_features == t.num_kv_heads * t.head_dim
            flat = keys[i].transpose(1, 2).reshape(1, config.prefix_len, -1)
            expected = proj(flat).view(1, config.prefix_len, -1, t.head_dim).transpose(1, 2)
            torch.testing.assert_close(kv[i][0], expected)
        else:
            assert proj.in_features == config.expert_width
            assert torch.equal(kv[i][0], keys[i]) and torch.equal(kv[i][1], values[i])
    # the velocity reads the cache of a cross-attention layer ...
    time_emb = model.time_embedding(torch.tensor([0.6]))
    changed = values.clone()
    changed[3] += 1.0
    with torch.no_grad():
        a = model.velocity(model.expert_kv(keys, values), pad, noise, time_emb)
        b = model.velocity(model.expert_kv(keys, changed), pad, noise, time_emb)
    assert (a - b).abs().max() > 1e-4
    # ... but only its real tokens
    padded = values.clone()
    padded[..., pad[0] == 0, :] += 5.0
    with torch.no_grad():
        c = model.velocity(model.expert_kv(keys, padded), pad, noise, time_emb)
    torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_action_head_never_updates_the_cache(setup):
    _, stages, example = setup
    keys, values, pad, noise, prefix_actions, mask, *_ = example["action_head"]
    before = (keys.clone(), values.clone())
    with torch.no_grad():
        head_actions(stages, keys, values, pad, noise, prefix_actions, mask)
    assert torch.equal(keys, before[0]) and torch.equal(values, before[1])


def test_positions_continue_in_self_attention_and_restart_in_cross_attention():
    pad = torch.tensor([[True, False, True, True]])
    positions = suffix_positions(pad, 3)
    assert positions.tolist() == [[3, 4, 5]]
    assert rebase_positions(positions).tolist() == [[0, 1, 2]]


# -- executed-prefix inpainting and the Euler loop ------------------------------------------


def test_executed_prefix_rows_follow_the_flow_path_and_come_out_exact(setup, monkeypatch):
    model, stages, example = setup
    keys, values, pad, noise, prefix_actions, *_ = example["action_head"]
    mask = torch.zeros(1, model.config.chunk_size)
    mask[:, :3] = 1.0
    seen: list[torch.Tensor] = []
    real = type(stages.action_head).velocity

    def recording(self, kv, p, x_t, time_emb):
        seen.append(x_t.clone())
        return real(self, kv, p, x_t, time_emb)

    monkeypatch.setattr(type(stages.action_head), "velocity", recording)
    out = head_actions(stages, keys, values, pad, noise, prefix_actions, mask)
    assert torch.equal(out[:, :3], prefix_actions[:, :3])
    assert not torch.allclose(out[:, 3:], prefix_actions[:, 3:])
    for t, x_t in zip(flow_times(model.config.flow_steps), seen, strict=True):
        expected = t * noise[:, :3] + (1 - t) * prefix_actions[:, :3]
        torch.testing.assert_close(x_t[:, :3], expected, rtol=0, atol=1e-6)


def test_all_zero_prefix_mask_is_exactly_reference_sampling(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, prefix_actions = host(example)
    reference = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)
    with torch.no_grad():
        cache = stages.fusion(
            stages.vision_encoder(images), image_mask, token_ids, token_mask, state
        )
    no_prefix = torch.zeros(1, model.config.chunk_size)
    out = head_actions(stages, *cache, noise, prefix_actions, no_prefix)
    assert (out - reference).abs().max().item() <= 1e-5


def test_euler_runs_from_noise_at_t1_at_lerobots_times(setup, monkeypatch):
    model, stages, example = setup
    calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def constant(self, kv, p, x_t, time_emb):
        calls.append((time_emb.clone(), x_t.clone()))
        return torch.ones_like(x_t)

    monkeypatch.setattr(type(stages.action_head), "velocity", constant)
    keys, values, pad, noise, prefix_actions, mask, *_ = example["action_head"]
    out = head_actions(stages, keys, values, pad, noise, prefix_actions, mask)
    steps = model.config.flow_steps
    times = flow_times(steps)
    assert len(calls) == steps and torch.equal(calls[0][1], noise)
    for t, (emb, _) in zip(times, calls, strict=True):
        assert torch.equal(emb, model.time_embedding(torch.tensor([t])))
    torch.testing.assert_close(out, noise - 1.0, rtol=0, atol=1e-5)  # K steps of dt * 1
    # LeRobot's t = 1 + step * dt in float64, not openpi's float32 accumulation
    assert flow_times(10) == [float(np.float32(1.0 - 0.1 * s)) for s in range(10)]
    assert flow_times(10) != euler_times(10)


# -- where LeRobot differs from stock transformers --------------------------------------------


def test_rope_is_lerobots_apply_rope_at_wavelength_10000_not_the_published_theta(setup):
    torch.manual_seed(0)
    x = torch.randn(1, 7, 3, 16)  # [B, L, H, D]
    positions = torch.tensor([[0, 1, 2, 5, 6, 9, 40]])
    cos, sin = rope_tables(positions, 16, 10_000.0)
    ours = rotate(x.transpose(1, 2), cos, sin).transpose(1, 2)
    assert torch.equal(ours, lr_apply_rope(x, positions))
    # stock Llama RoPE at the published rope_theta=100000 is a different rotation
    model, _, _ = setup
    hf = text_config(model.config)
    for theta, close in ((10_000.0, True), (100_000.0, False)):
        hf.rope_parameters = {"rope_theta": theta, "rope_type": "default"}
        hf.head_dim = 16
        cos_hf, sin_hf = LlamaRotaryEmbedding(hf)(x, positions)
        half = torch.cat([-x[..., 8:], x[..., :8]], dim=-1)
        stock = x * cos_hf[:, :, None] + half * sin_hf[:, :, None]
        assert torch.allclose(stock, ours, atol=1e-4) == close


def test_image_tokens_are_the_stock_connector_of_the_stock_encoder_times_sqrt_width(setup):
    model, stages, example = setup
    (images,) = example["vision_encoder"]
    stock = SmolVLMModel(smolvlm_config(model.config)).eval()
    stock.load_state_dict(model.vlm_with_expert.vlm.model.state_dict())
    with torch.no_grad():
        hidden = stock.vision_model(pixel_values=images).last_hidden_state
        plain = stock.connector(hidden)
        ours = stages.vision_encoder(images)
    width = model.config.text.width
    assert ours.shape == (3, model.config.vision.num_tokens, width)
    torch.testing.assert_close(ours, plain * math.sqrt(width), rtol=1e-5, atol=1e-5)
    # the pixel shuffle: 64 patches -> 16 tokens here; 1024 -> 64 at full size
    assert hidden.shape[1] == 4 * ours.shape[1]
    assert SmolVLAConfig.full().vision.num_tokens == 64


def test_language_embeddings_are_scaled_by_sqrt_width(setup):
    model, _, example = setup
    _, image_mask, token_ids, token_mask, state = example["fusion"]
    width = model.config.text.width
    tokens = torch.zeros(3, model.config.vision.num_tokens, width)
    with torch.no_grad():
        embs, _ = model.embed_prefix(tokens, image_mask, token_ids, token_mask, state)
        stock = model.text_model.embed_tokens(token_ids)  # stock Llama does not scale
    text = embs[:, tokens.shape[0] * tokens.shape[1] : -1]
    torch.testing.assert_close(text, stock * math.sqrt(width), rtol=0, atol=0)
    torch.testing.assert_close(embs[:, -1], model.state_proj(state))  # the state is not scaled


def test_time_embedding_is_float64_sin_then_cos_over_periods_4e3_to_4():
    t = torch.tensor([1.0, 0.3, 0.0])
    emb = time_embedding(t, 32, 4e-3, 4.0)
    assert emb.dtype == torch.float32
    period = 4e-3 * (4.0 / 4e-3) ** np.linspace(0, 1, 16)
    angle = 2 * np.pi / period[None] * t.numpy()[:, None].astype(np.float64)
    ref = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
    np.testing.assert_allclose(emb.numpy(), ref.astype(np.float32), rtol=0, atol=1e-7)


def test_expert_intermediate_size_is_lerobots_rounding():
    assert get_intermediate_size(720) == 2048  # 4 * int(480) = 1920 -> next multiple of 256
    assert get_intermediate_size(480) == 1280
    full = SmolVLAConfig.full()
    assert (full.expert_width, full.expert_mlp_dim) == (720, 2048)


def test_additive_mask_softmax_equals_lerobots_where_with_finfo_min():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    allowed = torch.rand(1, 4, 5) > 0.4
    allowed[0, 2] = False  # a fully masked row: uniform either way
    ours = attention(q, k, v, additive_mask(allowed), 8**-0.5)
    theirs = lr_attention(allowed, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 2, 2, 8)
    torch.testing.assert_close(ours, theirs)
    assert torch.isfinite(ours).all()


# -- export ------------------------------------------------------------------------------------


def test_each_stage_exports_with_torch_export():
    config = SmolVLAConfig.tiny(num_vlm_layers=2, flow_steps=2, chunk_size=4, max_token_len=8)
    assert config.cross_attention_layers == (1,)
    stages = build_stages(randomised(config))
    example = stages.example_inputs()
    for name, module in stages.modules().items():
        program = torch.export.export(module, example[name], strict=False)
        with torch.no_grad():
            eager = module(*example[name])
            exported = program.module()(*example[name])
        eager = eager if isinstance(eager, tuple) else (eager,)
        exported = exported if isinstance(exported, tuple) else (exported,)
        for a, b in zip(eager, exported, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        dtypes = {
            n.meta["val"].dtype for n in program.graph.nodes if hasattr(n.meta.get("val"), "dtype")
        }
        assert torch.float64 not in dtypes, name
