"""π0 / π0.5: the stage split equals the reference, and each openpi departure from stock
transformers is reproduced and matters (tiny sizes, single thread)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import PaliGemmaConfig
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.paligemma.modeling_paligemma import PaliGemmaModel

from vla_edge.archs.pi0 import Pi0Config, Pi0Model, build_stages, head_actions, run_stages
from vla_edge.archs.pi0.layers import (
    MASKED_VALUE,
    AdaRMSNorm,
    additive_mask,
    attention,
    attention_mask_2d,
    decoder_layer,
    embed_language_tokens,
    euler_times,
    prefix_positions,
    rms_norm,
    rope_cos_sin,
    sinusoidal_time_embedding,
    suffix_positions,
)
from vla_edge.archs.pi0.model import gemma_config
from vla_edge.archs.pi0.prompt import discretize_state, pad_tokens, pi05_prompt

# real architectures built and run at tiny sizes: in `make test`, not the fast tier
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def randomised(config: Pi0Config, seed: int = 0) -> Pi0Model:
    """A tiny model with every parameter random (zero-initialised norms would hide bugs)."""
    torch.manual_seed(seed)
    model = Pi0Model(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="module", params=[False, True], ids=["pi0", "pi05"])
def setup(request):
    model = randomised(Pi0Config.tiny(pi05=request.param))
    stages = build_stages(model)
    return model, stages, stages.example_inputs()


def host(example):
    (images,) = example["vision_encoder"]
    _, image_mask, token_ids, token_mask = example["fusion"]
    _, _, _, state, noise, prefix_actions, _, _, _ = example["action_head"]
    return images, image_mask, token_ids, token_mask, state, noise, prefix_actions


# -- the stage split ----------------------------------------------------------------------


def test_stage_split_equals_reference_sampling(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, _ = host(example)
    reference = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)
    split = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    assert split.shape == (1, model.config.action_horizon, model.config.action_dim)
    assert (split - reference).abs().max().item() <= 1e-5
    assert reference.abs().mean() > 0.1


def test_stages_share_the_model_parameters_without_copies(setup):
    model, stages, _ = setup
    model_ptrs = {p.data_ptr() for p in model.parameters()}
    for stage in stages.modules().values():
        assert {p.data_ptr() for p in stage.parameters()} <= model_ptrs
    embed = model.language_model.embed_tokens.weight
    assert stages.fusion.language_model.embed_tokens.weight is embed
    # every parameter sits in exactly one stage
    per_stage = [p.data_ptr() for s in stages.modules().values() for p in s.parameters()]
    assert len(per_stage) == len(set(per_stage)) and set(per_stage) == model_ptrs


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
        assert all(s.source.startswith(("host:", "stage:", "repeat")) for s in specs)
    sources = [s.source for specs in stages.inputs().values() for s in specs]
    assert {s.removeprefix("host:") for s in sources if s.startswith("host:")} == {
        "images",
        "image_mask",
        "token_ids",
        "token_mask",
        "state",
        "noise",
        "prefix_actions",
        "prefix_mask",
    }


def test_masked_image_slot_changes_nothing_when_its_pixels_change(setup):
    model, stages, example = setup
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


def test_pi0_reads_the_state_and_pi05_does_not(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, _ = host(example)
    a = run_stages(stages, images, image_mask, token_ids, token_mask, state, noise)
    b = run_stages(stages, images, image_mask, token_ids, token_mask, state + 1.0, noise)
    assert torch.equal(a, b) == model.config.pi05


# -- executed-prefix inpainting and the Euler loop ------------------------------------------


def flow_time(stages, time_emb: torch.Tensor) -> float:
    """The flow time whose row of the head's embedding table ``time_emb`` ``[1, W]`` is."""
    table = stages.action_head.time_embeddings
    row = int((table - time_emb[:1]).abs().sum(dim=1).argmin())
    assert torch.equal(table[row], time_emb[0])
    return stages.action_head.times[row]


def emb(model: Pi0Model, t: torch.Tensor) -> torch.Tensor:
    """The time embedding ``velocity`` takes for flow times ``t`` ``[B]``."""
    return sinusoidal_time_embedding(t, model.config.expert.width)


def test_executed_prefix_rows_follow_the_flow_path_and_come_out_exact(setup, monkeypatch):
    model, stages, example = setup
    keys, values, pad, state, noise, prefix_actions = example["action_head"][:6]
    mask = torch.zeros(1, model.config.action_horizon)
    mask[:, :3] = 1.0
    seen: list[tuple[float, torch.Tensor]] = []
    real = type(stages.action_head).velocity

    def recording(self, k, v, p, s, x_t, time_emb):
        seen.append((flow_time(stages, time_emb), x_t.clone()))
        return real(self, k, v, p, s, x_t, time_emb)

    monkeypatch.setattr(type(stages.action_head), "velocity", recording)
    with torch.no_grad():
        out = head_actions(stages, keys, values, pad, state, noise, prefix_actions, mask)
    assert torch.equal(out[:, :3], prefix_actions[:, :3])
    assert not torch.allclose(out[:, 3:], prefix_actions[:, 3:])
    assert [t for t, _ in seen] == euler_times(model.config.flow_steps)
    for t, x_t in seen:
        expected = t * noise[:, :3] + (1 - t) * prefix_actions[:, :3]
        torch.testing.assert_close(x_t[:, :3], expected, rtol=0, atol=1e-6)


def test_all_zero_prefix_mask_is_exactly_reference_sampling(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, prefix_actions = host(example)
    reference = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)
    with torch.no_grad():
        cache = stages.fusion(stages.vision_encoder(images), image_mask, token_ids, token_mask)
        out = head_actions(
            stages,
            *cache,
            state,
            noise,
            prefix_actions,
            torch.zeros(1, model.config.action_horizon),
        )
    assert (out - reference).abs().max().item() <= 1e-5


def test_euler_starts_from_noise_at_t1_with_dt_minus_one_over_k(setup, monkeypatch):
    model, stages, example = setup
    calls: list[tuple[float, torch.Tensor]] = []

    def constant(self, k, v, p, s, x_t, time_emb):
        calls.append((flow_time(stages, time_emb), x_t.clone()))
        return torch.ones_like(x_t)

    monkeypatch.setattr(type(stages.action_head), "velocity", constant)
    keys, values, pad, state, noise, prefix_actions, mask = example["action_head"][:7]
    out = head_actions(stages, keys, values, pad, state, noise, prefix_actions, mask)
    steps = model.config.flow_steps
    assert len(calls) == steps
    assert calls[0][0] == 1.0 and torch.equal(calls[0][1], noise)
    times = [t for t, _ in calls]
    assert np.allclose(np.diff(times), -1.0 / steps, atol=1e-6)
    torch.testing.assert_close(out, noise - 1.0, rtol=0, atol=1e-5)  # K steps of dt * 1
    assert euler_times(10)[:3] == [
        1.0,
        float(np.float32(0.9)),
        float(np.float32(np.float32(0.9) - np.float32(0.1))),
    ]


# -- where openpi's patched transformers differs from stock --------------------------------


def test_language_embeddings_are_scaled_by_sqrt_width_once(setup):
    model, _, example = setup
    _, _, token_ids, token_mask = example["fusion"]
    table = model.language_model.embed_tokens.weight
    width = table.shape[1]
    ours = embed_language_tokens(table, token_ids)
    torch.testing.assert_close(ours, table[token_ids] * math.sqrt(width), rtol=0, atol=0)
    # stock transformers 5.x scales inside the embedding module: openpi's `embed_tokens(ids)
    # * sqrt(W)` on stock 5.x would scale twice
    with torch.no_grad():
        stock = model.language_model.embed_tokens(token_ids)
    torch.testing.assert_close(stock, ours)
    # and it matters: the prefix cache from twice-scaled embeddings differs
    tokens = torch.zeros(model.config.n_slots, model.config.vision.num_tokens, width)
    image_mask = torch.ones(model.config.n_slots)
    with torch.no_grad():
        embs, pad = model.embed_prefix(tokens, image_mask, token_ids, token_mask)
        keys, _ = model.prefix_cache(embs, pad)
        twice = embs.clone()
        twice[:, -token_ids.shape[1] :] *= math.sqrt(width)
        keys_twice, _ = model.prefix_cache(twice, pad)
    assert (keys[1] - keys_twice[1]).abs().max() > 1e-3


def test_image_tokens_are_not_divided_by_sqrt_width(setup):
    model, stages, example = setup
    (images,) = example["vision_encoder"]
    config = model.config
    # stock 5.x PaliGemmaModel.get_image_features, with our weights, gives our image tokens
    ours_vision = model.paligemma_with_expert.paligemma.model.vision_tower.vision_model
    stock = PaliGemmaModel(
        PaliGemmaConfig(
            vision_config=ours_vision.config,
            text_config=gemma_config(config.paligemma, config),
            projection_dim=config.projection_dim,
        )
    ).eval()
    stock.vision_tower.load_state_dict(ours_vision.state_dict())
    stock.multi_modal_projector.load_state_dict(model.multi_modal_projector.state_dict())
    with torch.no_grad():
        ours = stages.vision_encoder(images)
        stock_tokens = stock.get_image_features(images).pooler_output
    torch.testing.assert_close(ours, stock_tokens, rtol=1e-5, atol=1e-5)
    # stock 4.x divided by sqrt(W); that prefix would differ
    _, image_mask, token_ids, token_mask = example["fusion"]
    with torch.no_grad():
        keys, _, _ = stages.fusion(ours, image_mask, token_ids, token_mask)
        divided, _, _ = stages.fusion(
            ours / math.sqrt(config.paligemma.width), image_mask, token_ids, token_mask
        )
    assert (keys - divided).abs().max() > 1e-3


def joint_velocity(model: Pi0Model, embs, pad, state, x_t, t) -> torch.Tensor:
    """openpi's training forward: prefix and suffix in one pass per layer, each stream with
    its own weights, one attention over both under the full block mask (no cache)."""
    config = model.config
    suffix, cond = model.embed_suffix(state, x_t, t)
    s = suffix.shape[1]
    full_pad = torch.cat([pad, torch.ones(1, s, dtype=torch.bool)], dim=1)
    starts = torch.cat([torch.zeros(pad.shape[1], dtype=torch.int64), model.suffix_block_starts()])
    mask = additive_mask(attention_mask_2d(full_pad, starts))
    cos, sin = rope_cos_sin(
        prefix_positions(full_pad), config.paligemma.head_dim, config.rope_theta
    )
    n = pad.shape[1]
    hd, eps = config.paligemma.head_dim, config.rms_norm_eps
    x_p, x_s = embs, suffix
    for lm_layer, ex_layer in zip(model.language_model.layers, model.expert.layers, strict=True):
        qkv = []
        gates = []
        for layer, x, c, sl in (
            (lm_layer, x_p, None, slice(0, n)),
            (ex_layer, x_s, cond, slice(n, None)),
        ):
            norm = layer.input_layernorm
            h, g = norm(x, c) if c is not None else (rms_norm(x, norm.weight, eps), None)
            gates.append(g)
            b, L, _ = h.shape
            q = layer.self_attn.q_proj(h).view(b, L, -1, hd).transpose(1, 2)
            k = layer.self_attn.k_proj(h).view(b, L, -1, hd).transpose(1, 2)
            v = layer.self_attn.v_proj(h).view(b, L, -1, hd).transpose(1, 2)
            qkv.append((q, k, v, sl))
        half = hd // 2

        def rot(z, sl, half=half):
            c, si = cos[:, None, sl], sin[:, None, sl]
            return z * c + torch.cat([-z[..., half:], z[..., :half]], -1) * si

        # one attention over both streams' keys/values (the expert's query heads may differ
        # in number from the language model's, so each stream's queries go separately)
        k = torch.cat([rot(qkv[0][1], qkv[0][3]), rot(qkv[1][1], qkv[1][3])], dim=2)
        v = torch.cat([qkv[0][2], qkv[1][2]], dim=2)
        att = [attention(rot(q, sl), k, v, mask[:, :, sl], hd**-0.5) for q, _, _, sl in qkv]
        outs = []
        for (layer, x, c), g, a in zip(
            ((lm_layer, x_p, None), (ex_layer, x_s, cond)), gates, att, strict=True
        ):
            y = layer.self_attn.o_proj(a)
            x = x + y if g is None else x + y * g
            norm = layer.post_attention_layernorm
            h, g2 = norm(x, c) if c is not None else (rms_norm(x, norm.weight, eps), None)
            y = layer.mlp(h)
            outs.append(x + y if g2 is None else x + y * g2)
        x_p, x_s = outs
    norm = model.expert.norm
    out = norm(x_s, cond)[0] if cond is not None else rms_norm(x_s, norm.weight, eps)
    return model.action_out_proj(out[:, -config.action_horizon :])


def test_expert_reads_the_prefix_cache_and_never_updates_it(setup):
    model, stages, example = setup
    images, image_mask, token_ids, token_mask, state, noise, _ = host(example)
    t = emb(model, torch.tensor([0.7]))
    with torch.no_grad():
        embs, pad = model.embed_prefix(
            model.embed_images(images), image_mask, token_ids, token_mask
        )
        keys, values = model.prefix_cache(embs, pad)
        cached = model.velocity(keys, values, pad, state, noise, t)
        # the same velocity as one joint pass over prefix and suffix (no cache at all)
        joint = joint_velocity(model, embs, pad, state, noise, t)
        torch.testing.assert_close(cached, joint, rtol=1e-4, atol=1e-4)
        # the action head leaves the cache as it found it
        k_all, v_all, p_all = stages.fusion(
            model.embed_images(images), image_mask, token_ids, token_mask
        )
        before = (k_all.clone(), v_all.clone())
        head_actions(
            stages,
            k_all,
            v_all,
            p_all,
            state,
            noise,
            torch.zeros_like(noise),
            torch.zeros(1, noise.shape[1]),
        )
        assert torch.equal(k_all, before[0]) and torch.equal(v_all, before[1])
        # a cache that grows with each step's suffix (stock DynamicCache.update) changes step 2
        size = model.config.expert
        suffix, cond = model.embed_suffix(state, noise, t)
        pos = suffix_positions(pad, suffix.shape[1])
        cos, sin = rope_cos_sin(pos, size.head_dim, model.config.rope_theta)
        grown_k, grown_v, x = [], [], suffix
        mask = additive_mask(
            torch.ones(1, suffix.shape[1], pad.shape[1] + suffix.shape[1], dtype=torch.bool)
        )
        for i, layer in enumerate(model.expert.layers):
            x, k, v = decoder_layer(
                layer,
                x,
                cos,
                sin,
                mask,
                head_dim=size.head_dim,
                eps=model.config.rms_norm_eps,
                cond=cond,
                prefix_kv=(keys[i], values[i]),
            )
            grown_k.append(torch.cat([keys[i], k], dim=2))
            grown_v.append(torch.cat([values[i], v], dim=2))
        grown_pad = torch.cat([pad, torch.ones(1, suffix.shape[1], dtype=torch.bool)], dim=1)
        t2 = emb(model, torch.tensor([0.6]))
        step2 = model.velocity(keys, values, pad, state, noise, t2)
        step2_grown = model.velocity(grown_k, grown_v, grown_pad, state, noise, t2)
    assert (step2 - step2_grown).abs().max() > 1e-4


def test_adarms_scales_shifts_and_gates_the_residual():
    torch.manual_seed(0)
    norm = AdaRMSNorm(8, 4)
    torch.nn.init.normal_(norm.dense.weight)
    x, cond = torch.randn(2, 3, 8), torch.randn(2, 4)
    out, gate = norm(x, cond)
    scale, shift, gate_ref = (cond @ norm.dense.weight.T + norm.dense.bias)[:, None].chunk(3, -1)
    normed = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(out, normed * (1 + scale) + shift)
    torch.testing.assert_close(gate, gate_ref)
    assert norm.dense.weight.shape == (24, 4) and norm.dense.bias.shape == (24,)


def test_pi05_expert_layer_with_zero_gate_is_the_identity():
    # the gated residual matters: a zero gate passes the input through unchanged, where a
    # stock (ungated) residual would add the attention and MLP outputs
    config = Pi0Config.tiny(pi05=True)
    model = randomised(config)
    layer = model.expert.layers[0]
    with torch.no_grad():
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.dense.weight.zero_()
            norm.dense.bias.zero_()
        size = config.expert
        x = torch.randn(1, 4, size.width)
        cos, sin = rope_cos_sin(torch.arange(4)[None], size.head_dim, config.rope_theta)
        prefix = (torch.randn(1, 1, 5, size.head_dim), torch.randn(1, 1, 5, size.head_dim))
        mask = torch.zeros(1, 1, 4, 9)
        out, _, _ = decoder_layer(
            layer,
            x,
            cos,
            sin,
            mask,
            head_dim=size.head_dim,
            eps=1e-6,
            cond=torch.randn(1, size.width),
            prefix_kv=prefix,
        )
    assert torch.equal(out, x)


def test_pi0_rms_norm_is_one_plus_weight_with_float32_variance_and_eps_1e6():
    torch.manual_seed(0)
    x, w = torch.randn(2, 5, 16), torch.randn(16)
    ref = (
        x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + w.double())
    )
    torch.testing.assert_close(rms_norm(x, w, 1e-6).double(), ref, rtol=1e-5, atol=1e-6)
    stock = GemmaRMSNorm(16, eps=1e-6)
    stock.weight.data.copy_(w)
    torch.testing.assert_close(stock(x), rms_norm(x, w, 1e-6))
    assert (rms_norm(x, w, 1e-6) - x / x.pow(2).mean(-1, keepdim=True).sqrt() * w).abs().max() > 0.1
    small = torch.full((1, 16), 1e-4)  # variance 1e-8: eps decides the scale
    assert (
        abs(rms_norm(small, torch.zeros(16), 1e-6)[0, 0].item() - 1e-4 / math.sqrt(1e-8 + 1e-6))
        < 1e-6
    )
    assert Pi0Config.tiny().rms_norm_eps == 1e-6
    assert gemma_config(Pi0Config.tiny().paligemma, Pi0Config.tiny()).rms_norm_eps == 1e-6


def test_time_embedding_is_sin_then_cos_over_periods_4e3_to_4():
    t = torch.tensor([1.0, 0.3, 0.0])
    out = sinusoidal_time_embedding(t, 32)
    period = 4e-3 * (4.0 / 4e-3) ** np.linspace(0, 1, 16)
    angle = 2 * np.pi / period[None] * t.numpy()[:, None].astype(np.float64)
    ref = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
    # float64 angles as openpi's (float32 ones are 1.3e-4 off at 1.6e3 rad), float32 result
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-7)
    assert out.dtype == torch.float32
    assert not np.allclose(
        out.numpy(), np.concatenate([np.cos(angle), np.sin(angle)], axis=1), atol=1e-2
    )


def test_masks_prefix_bidirectional_and_suffix_blocks():
    pad = torch.tensor([[True, True, False, True]])
    prefix = attention_mask_2d(pad, torch.zeros(4, dtype=torch.int64))[0]
    assert prefix[0, 3] and prefix[3, 0]  # an image token sees a later text token
    assert not prefix[:, 2].any() and not prefix[2].any()  # padding is seen by no one
    model = Pi0Model(Pi0Config.tiny(action_horizon=3))
    assert model.suffix_block_starts().tolist() == [1, 1, 0, 0]
    suffix = attention_mask_2d(torch.ones(1, 4, dtype=torch.bool), model.suffix_block_starts())[0]
    assert suffix[0].tolist() == [True, False, False, False]  # the state sees no action
    assert suffix[1:].all()  # actions see the state and every action
    model05 = Pi0Model(Pi0Config.tiny(pi05=True, action_horizon=3))
    assert model05.suffix_block_starts().tolist() == [1, 0, 0]


def test_positions_skip_padding_in_prefix_and_continue_in_suffix(setup):
    pad = torch.tensor([[True, False, False, True, True, False]])
    assert prefix_positions(pad).tolist() == [[0, 0, 0, 1, 2, 2]]
    assert suffix_positions(pad, 3).tolist() == [[3, 4, 5]]
    # so a masked slot's place in the prefix does not matter
    model, stages, example = setup
    images, _, token_ids, token_mask, state, noise, _ = host(example)
    a = run_stages(
        stages, images, torch.tensor([1.0, 0.0, 1.0]), token_ids, token_mask, state, noise
    )
    swapped = images[[0, 2, 1]]
    b = run_stages(
        stages, swapped, torch.tensor([1.0, 1.0, 0.0]), token_ids, token_mask, state, noise
    )
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_masked_value_is_finite_so_fully_masked_rows_stay_finite():
    assert MASKED_VALUE == -2.3819763e38
    q = k = v = torch.randn(1, 1, 3, 4)
    allowed = torch.tensor([[[True, True, False], [True, True, False], [False, False, False]]])
    assert torch.isfinite(attention(q, k, v, additive_mask(allowed), 0.5)).all()
    with_inf = torch.where(allowed[:, None], 0.0, float("-inf"))
    assert torch.isnan(attention(q, k, v, with_inf, 0.5)).any()


# -- export and the host prompt ----------------------------------------------------------------


@pytest.mark.parametrize("pi05", [False, True], ids=["pi0", "pi05"])
def test_each_stage_exports_with_torch_export(pi05):
    config = Pi0Config.tiny(
        pi05=pi05,
        flow_steps=2,
        action_horizon=4,
        max_token_len=8,
        paligemma=Pi0Config.tiny().paligemma.model_copy(update={"depth": 1}),
        expert=Pi0Config.tiny().expert.model_copy(update={"depth": 1}),
    )
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


def test_pi05_prompt_writes_the_state_as_256_bins():
    state = np.array([-1.0, 0.0, 0.999, -0.5])
    assert discretize_state(state).tolist() == [0, 128, 255, 64]
    assert pi05_prompt(" pick_up the\ncube ", state) == (
        "Task: pick up the cube, State: 0 128 255 64;\nAction: "
    )
    ids, mask = pad_tokens([2, 5, 7], 5)
    assert ids.tolist() == [[2, 5, 7, 0, 0]] and mask.tolist() == [[True, True, True, False, False]]
