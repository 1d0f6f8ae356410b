import numpy as np
import pytest
import torch
from policy_synthetic import tiny_config

from vla_edge.archs.bundled.config import PolicyConfig, TrainFileConfig, load_train_file
from vla_edge.archs.bundled.model import (
    VlaPolicy,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
    source_hash,
)
from vla_edge.archs.bundled.normalize import NormStats
from vla_edge.core.errors import CheckpointError, ConfigError

torch.set_num_threads(1)


def _policy(seed: int = 0) -> VlaPolicy:
    torch.manual_seed(seed)
    return VlaPolicy(tiny_config()).eval()


def _stage_inputs(cfg: PolicyConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, a = cfg.chunk_horizon, cfg.action_dim
    return {
        "images": torch.rand(len(cfg.cameras), 3, cfg.image_height, cfg.image_width, generator=g),
        "lang": torch.nn.functional.normalize(torch.randn(1, 384, generator=g), dim=-1),
        "state": torch.randn(1, a, generator=g),
        "noise": torch.randn(1, h, a, generator=g),
        "prefix": torch.randn(1, h, a, generator=g),
    }


def test_stages_produce_the_export_contract_shapes() -> None:
    policy = _policy()
    cfg = policy.config
    x = _stage_inputs(cfg)
    with torch.no_grad():
        visual = policy.vision_encoder(x["images"])
        context = policy.fusion(visual, x["lang"], x["state"])
        actions = policy.action_head(context, x["noise"], x["prefix"], torch.zeros(1, 10))
    assert visual.shape == (2, cfg.tokens_per_camera, cfg.d_model)
    assert context.shape == (1, cfg.context_tokens, cfg.d_model)
    assert actions.shape == (1, cfg.chunk_horizon, cfg.action_dim)
    assert cfg.context_tokens == 2 * 16 + 2


def test_action_head_is_deterministic_under_fixed_noise_and_varies_with_noise() -> None:
    policy = _policy()
    x = _stage_inputs(policy.config)
    mask = torch.zeros(1, 10)
    with torch.no_grad():
        ctx = policy.context(x["images"], x["lang"], x["state"])
        a1 = policy.action_head(ctx, x["noise"], x["prefix"], mask)
        a2 = policy.action_head(ctx, x["noise"].clone(), x["prefix"], mask)
        a3 = policy.action_head(ctx, x["noise"] + 1.0, x["prefix"], mask)
    assert torch.equal(a1, a2)
    assert not torch.allclose(a1, a3)


def test_prefix_rows_are_returned_exactly_and_change_the_free_rows() -> None:
    policy = _policy()
    x = _stage_inputs(policy.config)
    mask = torch.zeros(1, 10)
    mask[0, :3] = 1.0
    with torch.no_grad():
        ctx = policy.context(x["images"], x["lang"], x["state"])
        free = policy.action_head(ctx, x["noise"], x["prefix"], torch.zeros(1, 10))
        held = policy.action_head(ctx, x["noise"], x["prefix"], mask)
    assert torch.equal(held[0, :3], x["prefix"][0, :3])
    assert not torch.allclose(held[0, 3:], free[0, 3:])


def test_every_trained_stage_exports_with_torch_export() -> None:
    policy = _policy()
    x = _stage_inputs(policy.config)
    mask = torch.zeros(1, 10)
    with torch.no_grad():
        visual = policy.vision_encoder(x["images"])
        ctx = policy.fusion(visual, x["lang"], x["state"])
    cases = [
        (policy.vision_encoder, (x["images"],)),
        (policy.fusion, (visual, x["lang"], x["state"])),
        (policy.action_head, (ctx, x["noise"], x["prefix"], mask)),
    ]
    for module, args in cases:
        program = torch.export.export(module, args)
        with torch.no_grad():
            torch.testing.assert_close(program.module()(*args), module(*args))
        targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
        assert not any("scaled_dot_product" in t or "multi_head" in t for t in targets)


def test_checkpoint_round_trip_restores_identical_outputs(tmp_path) -> None:
    policy = _policy(seed=3)
    stats = NormStats(np.arange(7.0), np.full(7, 2.0), np.full(7, 0.1), np.full(7, 0.5))
    policy.set_stats(stats)
    path = tmp_path / "policy.pt"
    digest = save_checkpoint(path, policy, step=42, meta={"note": "unit"})
    payload = torch.load(path, weights_only=True)
    assert set(payload["stages"]) == {"vision_encoder", "fusion", "action_head"}
    assert not any("bert" in k for s in payload["stages"].values() for k in s)
    assert payload["source_hash"] == source_hash()
    assert payload["weights_sha256"] == digest
    loaded = load_checkpoint(path)
    assert loaded.checkpoint_info["step"] == 42
    assert loaded.checkpoint_info["source_matches"]
    np.testing.assert_array_equal(loaded.stats.state_mean, stats.state_mean)
    x = _stage_inputs(policy.config)
    with torch.no_grad():
        ctx0 = policy.context(x["images"], x["lang"], x["state"])
        ctx1 = loaded.context(x["images"], x["lang"], x["state"])
        a0 = policy.action_head(ctx0, x["noise"], x["prefix"], torch.zeros(1, 10))
        a1 = loaded.action_head(ctx1, x["noise"], x["prefix"], torch.zeros(1, 10))
    assert torch.equal(a0, a1)


def test_missing_checkpoint_raises_checkpoint_error_naming_the_file(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        read_checkpoint(tmp_path / "absent.pt")


def test_checkpoint_of_another_format_is_refused(tmp_path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"format": "something-else", "stages": {}}, path)
    with pytest.raises(CheckpointError, match="format = 'something-else'"):
        read_checkpoint(path)


def test_checkpoint_whose_weights_do_not_fit_the_config_is_refused(tmp_path) -> None:
    path = tmp_path / "policy.pt"
    save_checkpoint(path, _policy())
    payload = torch.load(path, weights_only=True)
    payload["model_config"]["d_model"] = 64
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="stage vision_encoder does not fit"):
        load_checkpoint(path)


def test_config_with_image_size_not_a_multiple_of_the_stride_is_refused(tmp_path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("model:\n  image_height: 40\n  vision_downsample: 16\n")
    with pytest.raises(ConfigError, match="image_height=40 must be a multiple"):
        load_train_file(path)


def test_config_with_a_removed_field_loads_at_its_hard_wired_value_only(tmp_path) -> None:
    from vla_edge.core.errors import RemovedFeatureError

    path = tmp_path / "train.yaml"
    path.write_text("train:\n  steps: 3\n  state_noise: 0.0\n")
    assert load_train_file(path).train.steps == 3
    path.write_text("train:\n  state_noise: 0.2\n")
    with pytest.raises(RemovedFeatureError, match=r"train: state_noise = 0.2: .* was removed"):
        load_train_file(path)


def test_config_with_unknown_field_is_refused(tmp_path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("train:\n  stepz: 3\n")
    with pytest.raises(ConfigError, match="train.stepz"):
        load_train_file(path)


def test_default_model_has_one_to_three_million_trained_parameters() -> None:
    counts = VlaPolicy(TrainFileConfig().model).parameter_counts()
    assert set(counts) == {"vision_encoder", "fusion", "action_head"}
    assert 1_000_000 <= sum(counts.values()) <= 3_000_000
