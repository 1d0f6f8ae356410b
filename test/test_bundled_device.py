"""The bundled policy on any device and in any weight dtype, and ``TorchRunner`` placing it.

Device-clean forwards are checked on ``meta`` (:mod:`device_clean`); bfloat16 weights run
on the CPU, so these tests need no GPU.
"""

import copy

import numpy as np
import pytest
import torch
from device_clean import no_host_tensors
from policy_synthetic import tiny_config

from vla_edge.archs.bundled.config import LANGUAGE_DIM, PolicyConfig
from vla_edge.archs.bundled.model import TRAINED_STAGES, VlaPolicy
from vla_edge.archs.bundled.tokenizer import InstructionTokenizer
from vla_edge.core.errors import DeviceUnavailableError
from vla_edge.core.types import Observation
from vla_edge.runners.preprocess import decode_chunk, prefix_inputs, state_input
from vla_edge.runners.torch_device import place_module
from vla_edge.runners.torch_runner import TorchRunner

torch.set_num_threads(1)

META = torch.device("meta")
PREFIX_LEN = 2

BF16_MAX_ABS = 0.05
"""Bound on |chunk(bfloat16 weights) - chunk(float32 weights)|, normalised units.

Measured on ``tiny_config`` (keypoints 0 and 4, seeds 0-19, K = 4, a 2-row prefix):
at most 0.011, where the head moves the chunk 0.55-1.8 away from its noise.
"""


def _inputs(cfg: PolicyConfig, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    """Stage inputs as the runner feeds them (float32), with a ``PREFIX_LEN``-row prefix."""
    g = torch.Generator().manual_seed(seed)
    n, h, a = len(cfg.cameras), cfg.chunk_horizon, cfg.action_dim
    mask = torch.zeros(1, h)
    mask[0, :PREFIX_LEN] = 1.0
    values = {
        "images": torch.rand(n, 3, cfg.image_height, cfg.image_width, generator=g),
        "lang": torch.nn.functional.normalize(torch.randn(1, LANGUAGE_DIM, generator=g), dim=-1),
        "state": torch.randn(1, a, generator=g),
        "noise": torch.randn(1, h, a, generator=g),
        "prefix": torch.randn(1, h, a, generator=g),
        "mask": mask,
    }
    return {k: v.to(device) for k, v in values.items()}


def _chunk(policy: VlaPolicy, x: dict[str, torch.Tensor]) -> torch.Tensor:
    """Vision -> fusion -> action head (the whole chunk, K Euler steps)."""
    visual = policy.vision_encoder(x["images"])
    context = policy.fusion(visual, x["lang"], x["state"])
    return policy.action_head(context, x["noise"], x["prefix"], x["mask"])


def _place_stages(policy: VlaPolicy, device: torch.device, dtype: torch.dtype) -> VlaPolicy:
    for name in TRAINED_STAGES:
        place_module(getattr(policy, name), device, dtype)
    return policy


# ---------------------------------------------------------------- device-clean forwards
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("keypoints", [0, 4])
def test_stage_forwards_make_no_host_tensor(dtype: torch.dtype, keypoints: int) -> None:
    cfg = tiny_config(vision_keypoints=keypoints)
    with META:
        policy = VlaPolicy(cfg)
    _place_stages(policy, META, dtype)
    x = _inputs(cfg, META)
    with torch.inference_mode(), no_host_tensors() as checked:
        visual = policy.vision_encoder(x["images"])
        context = policy.fusion(visual, x["lang"], x["state"])
        actions = policy.action_head(context, x["noise"], x["prefix"], x["mask"])
    assert checked.ops > 0
    assert visual.shape == (len(cfg.cameras), cfg.tokens_per_camera, cfg.d_model)
    assert context.shape == (1, cfg.context_tokens, cfg.d_model)
    assert actions.shape == (1, cfg.chunk_horizon, cfg.action_dim)
    assert visual.dtype == context.dtype == actions.dtype == torch.float32


def test_language_encoder_forward_makes_no_host_tensor(language_encoder) -> None:
    encoder = copy.deepcopy(language_encoder).to(META)
    ids = torch.empty(1, 16, dtype=torch.int64, device=META)
    mask = torch.empty(1, 16, dtype=torch.int64, device=META)
    with torch.inference_mode(), no_host_tensors():
        lang = encoder(ids, mask)
    assert lang.shape == (1, LANGUAGE_DIM) and lang.dtype == torch.float32


# ---------------------------------------------------------------- bfloat16 weights
@pytest.mark.parametrize("keypoints", [0, 4])
def test_bfloat16_weights_give_a_float32_chunk_close_to_float32_weights(keypoints: int) -> None:
    torch.manual_seed(0)
    fp32 = VlaPolicy(tiny_config(vision_keypoints=keypoints)).eval()
    bf16 = _place_stages(copy.deepcopy(fp32), torch.device("cpu"), torch.bfloat16)
    assert bf16.action_head.action_in.weight.dtype == torch.bfloat16
    x = _inputs(fp32.config, torch.device("cpu"))
    with torch.inference_mode():
        want = _chunk(fp32, x)
        got = _chunk(bf16, x)
    assert got.dtype == torch.float32 and bool(torch.isfinite(got).all())
    assert float((got - want).abs().max()) < BF16_MAX_ABS
    # the executed prefix is held in float32: returned exactly
    assert torch.equal(got[0, :PREFIX_LEN], x["prefix"][0, :PREFIX_LEN])


# ---------------------------------------------------------------- TorchRunner placement
@pytest.fixture(scope="module")
def policy() -> VlaPolicy:
    torch.manual_seed(0)
    policy = VlaPolicy(tiny_config(flow_steps=3)).eval()
    policy.ensure_language_encoder()
    return policy


@pytest.fixture(scope="module")
def language_encoder(policy):
    return policy.language_encoder


def _observation(cfg: PolicyConfig, seed: int = 0) -> Observation:
    rng = np.random.default_rng(seed)
    shape = (cfg.image_height, cfg.image_width, 3)
    return Observation(
        stamp_s=2.0,
        images={cam: rng.integers(0, 256, shape, dtype=np.uint8) for cam in cfg.cameras},
        state=(0.1 * rng.standard_normal(cfg.action_dim)).astype(np.float32),
        instruction="put the red block in the bowl",
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_runner_on_a_machine_without_one_is_refused_at_construction(policy) -> None:
    with pytest.raises(DeviceUnavailableError, match=r"device = 'cuda'.*device 'cpu'"):
        TorchRunner(policy, device="cuda")


def test_cpu_runner_gives_the_default_runners_chunk_and_the_eager_stages(policy) -> None:
    cfg = policy.config
    obs = _observation(cfg)
    noise = np.random.default_rng(1).standard_normal((cfg.chunk_horizon, cfg.action_dim))
    noise = noise.astype(np.float32)
    prefix = np.tile(obs.state, (PREFIX_LEN, 1)) + 0.01
    default = TorchRunner(policy).infer(obs, noise, prefix, PREFIX_LEN)
    on_cpu = TorchRunner(policy, device="cpu", dtype="float32").infer(
        obs, noise, prefix, PREFIX_LEN
    )
    np.testing.assert_array_equal(on_cpu.positions, default.positions)
    assert list(on_cpu.timings_ms) == [
        "language_encoder",
        "vision_encoder",
        "fusion",
        "action_head",
    ]
    # the stages called one after the other as the eager runner always did
    state = obs.state.astype(np.float64)
    prefix_t, mask_t = prefix_inputs(policy.codec, prefix, PREFIX_LEN, state, cfg.chunk_horizon)
    images = np.stack([obs.images[cam] for cam in cfg.cameras])
    ids, ids_mask = InstructionTokenizer(cfg.max_instruction_tokens).encode(obs.instruction)
    with torch.inference_mode():
        lang = policy.language_encoder(torch.from_numpy(ids), torch.from_numpy(ids_mask))
        context = policy.context(
            torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0),
            lang,
            torch.from_numpy(state_input(policy.codec, state)),
        )
        actions = policy.action_head(
            context,
            torch.from_numpy(noise[None]),
            torch.from_numpy(prefix_t),
            torch.from_numpy(mask_t),
        )
    want = decode_chunk(policy.codec, actions[0].numpy(), state, prefix, PREFIX_LEN)
    np.testing.assert_array_equal(on_cpu.positions, want)


def test_bfloat16_runner_on_the_cpu_runs_a_chunk_and_leaves_the_callers_policy_alone(
    policy,
) -> None:
    cfg = policy.config
    obs = _observation(cfg)
    runner = TorchRunner(policy, device="cpu", dtype="bfloat16", seed=3)
    assert runner.dtype == torch.bfloat16
    assert runner.policy.fusion.lang_proj[0].weight.dtype == torch.bfloat16
    assert runner.policy.language_encoder is not policy.language_encoder
    chunk = runner.infer(obs)
    reference = TorchRunner(policy, seed=3).infer(obs)
    assert chunk.positions.shape == (cfg.chunk_horizon, cfg.action_dim)
    assert np.isfinite(chunk.positions).all()
    assert list(chunk.timings_ms) == list(reference.timings_ms)
    # identity statistics: the positions differ as the normalised chunks do
    assert np.abs(chunk.positions - reference.positions).max() < BF16_MAX_ABS
    for name in TRAINED_STAGES:
        assert {p.dtype for p in getattr(policy, name).parameters()} == {torch.float32}
