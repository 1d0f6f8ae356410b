import time

import numpy as np
import pytest
import torch
from policy_synthetic import CAMERAS, INSTRUCTIONS, make_episode, tiny_config, write_dataset

from vla_edge.archs.bundled.config import TrainConfig, TrainFileConfig
from vla_edge.archs.bundled.model import load_checkpoint, read_checkpoint
from vla_edge.archs.bundled.train import learning_rate_at, train
from vla_edge.core.errors import CheckpointError, DatasetError
from vla_edge.core.types import Observation
from vla_edge.runners.torch_runner import TorchRunner

# training runs: the slow tier (make test-fast leaves them out)
pytestmark = pytest.mark.slow

torch.set_num_threads(1)


def _file_cfg(steps: int) -> TrainFileConfig:
    return TrainFileConfig(
        model=tiny_config(),
        train=TrainConfig(
            steps=steps,
            batch_size=16,
            flow_samples_per_obs=2,
            learning_rate=2e-3,
            warmup_steps=20,
            val_episode_fraction=0.25,
            val_every=100,
            val_batches=2,
            checkpoint_every=100,
            shift_pixels=1,
            num_threads=1,
        ),
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    write_dataset(root / "data" / "demos.hdf5", episodes_per_task=4, steps=20)
    t0 = time.perf_counter()
    summary = train(root / "data", root / "policy.pt", _file_cfg(300), progress=False)
    return summary, root, time.perf_counter() - t0


def test_tiny_config_loss_falls_by_at_least_half_within_a_minute(trained) -> None:
    summary, _, wall_s = trained
    losses = [v for _, v in summary["history"]["train_loss"]]
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    assert last <= 0.5 * first, (first, last)
    vals = [v for _, v in summary["history"]["val_loss"]]
    assert len(vals) == 3 and vals[-1] < vals[0]
    assert wall_s < 60.0


def test_checkpoint_holds_stats_config_and_training_metadata(trained) -> None:
    _, root, _ = trained
    policy = load_checkpoint(root / "policy.pt")
    info = policy.checkpoint_info
    assert info["step"] == 300
    assert info["train_config"]["batch_size"] == 16
    assert info["meta"]["instructions"] == sorted(INSTRUCTIONS)
    assert info["meta"]["episodes_val"] == 2
    assert np.all(policy.stats.action_std > 0.0)
    assert policy.config.image_height == 32


def _observation(instruction: str, task_id: int, k: int = 3) -> Observation:
    ep = make_episode(task_id, seed=100 * task_id)
    return Observation(
        stamp_s=1.0,
        images={cam: ep["images"][cam][k] for cam in CAMERAS},
        state=ep["state"][k].astype(np.float64),
        instruction=instruction,
    )


def test_trained_policy_follows_the_demonstrations(trained) -> None:
    _, root, _ = trained
    runner = TorchRunner(root / "policy.pt", seed=0)
    obs = _observation(INSTRUCTIONS[0], 0)
    chunk = runner.infer(obs, noise=np.zeros((10, 7), dtype=np.float32))
    expected = make_episode(0, seed=0)["actions"][3:13]
    error = np.abs(chunk.positions[:, :6] - expected[:, :6]).mean()
    assert error < 0.05, error


def test_changing_only_the_instruction_changes_the_actions(trained) -> None:
    _, root, _ = trained
    runner = TorchRunner(root / "policy.pt", seed=0)
    noise = np.random.default_rng(0).standard_normal((10, 7)).astype(np.float32)
    a = runner.infer(_observation(INSTRUCTIONS[0], 0), noise=noise).positions
    b = runner.infer(_observation(INSTRUCTIONS[1], 0), noise=noise).positions
    # the two instructions were demonstrated moving joint1 in opposite directions
    assert a[-1, 0] - a[0, 0] > 0.1
    assert b[-1, 0] - b[0, 0] < -0.1


def _run_whole_and_resumed(data, tmp_path, ema_decay: float = 0.0) -> tuple[dict, dict]:
    """40 steps in one go (``full.pt``) and 20 + 20 with ``--resume`` (``resumed.pt``)."""
    cfg = _file_cfg(40)
    cfg.train.checkpoint_every = 20
    cfg.train.ema_decay = ema_decay
    full = train(data, tmp_path / "full.pt", cfg, progress=False)
    half = _file_cfg(20)
    half.train.ema_decay = ema_decay
    train(data, tmp_path / "resumed.pt", half, progress=False)
    resumed = train(data, tmp_path / "resumed.pt", cfg, resume=True, progress=False)
    assert resumed["start_step"] == 20
    a = load_checkpoint(tmp_path / "full.pt").checkpoint_info["weights_sha256"]
    b = load_checkpoint(tmp_path / "resumed.pt").checkpoint_info["weights_sha256"]
    assert a == b
    return full, resumed


def test_resume_continues_to_the_same_weights_as_an_uninterrupted_run(tmp_path, trained) -> None:
    _, root, _ = trained
    full, resumed = _run_whole_and_resumed(root / "data", tmp_path)
    assert full["train_loss_last"] == resumed["train_loss_last"]


def test_resume_with_a_different_model_is_refused(tmp_path, trained) -> None:
    _, root, _ = trained
    train(root / "data", tmp_path / "p.pt", _file_cfg(2), progress=False)
    other = _file_cfg(4)
    other.model = tiny_config(d_model=64)
    with pytest.raises(CheckpointError, match="model_config.d_model = 32"):
        train(root / "data", tmp_path / "p.pt", other, resume=True, progress=False)


def test_learning_rate_warms_up_then_decays_to_the_minimum() -> None:
    cfg = TrainConfig(steps=1000, warmup_steps=100, learning_rate=1e-3, min_learning_rate=1e-5)
    assert learning_rate_at(0, cfg) == pytest.approx(1e-5)
    assert learning_rate_at(99, cfg) == pytest.approx(1e-3)
    assert learning_rate_at(550, cfg) < 1e-3
    assert learning_rate_at(1000, cfg) == pytest.approx(1e-5)


def _layout_dataset(tmp_path):
    """Synthetic episodes of two real tasks whose agentview shows each object as a dot.

    Their probe targets are stored as ``vla-edge collect --add-targets`` stores them.
    """
    import h5py

    from vla_edge.sim.dataset import add_targets
    from vla_edge.sim.tasks import OBJECTS, init_state

    colours = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255], [255, 0, 255]])
    colours = np.concatenate([colours, [[255, 255, 0], [0, 255, 255]]]).astype(np.uint8)
    path = write_dataset(tmp_path / "data" / "demos.hdf5", episodes_per_task=6, steps=20)
    with h5py.File(path, "r+") as h5:
        for name, group in h5["data"].items():
            task = "lift_green_block" if group.attrs["task"] == "task_0" else "stack_red_on_green"
            group.attrs["task"] = task
            group.attrs["split"] = "train"
            group.attrs["init_state_id"] = int(name.split("_")[1])
            # draw the layout into the agentview images, so the probe has something to see
            scene = init_state(task, int(name.split("_")[1]), "train").scene
            points = [scene.positions_m[n][:2] for n in OBJECTS] + [scene.target_xy_m]
            images = group["obs/agentview_image"][()]
            for colour, (x, y) in zip(colours[: len(points)], points, strict=True):
                row = int(round(2 + (x - 0.38) / 0.26 * 26))
                col = int(round(2 + (y + 0.22) / 0.44 * 26))
                images[:, row : row + 3, col : col + 3] = colour
            group["obs/agentview_image"][...] = images
    add_targets(path)
    return tmp_path / "data"


def _probe_cfg(steps: int) -> TrainFileConfig:
    cfg = _file_cfg(steps)
    cfg.train.layout_loss_weight = 1.0
    cfg.train.goal_loss_weight = 1.0
    cfg.train.layout_loss_steps = 20
    return cfg


def test_layout_probe_learns_is_saved_and_resumes(tmp_path) -> None:
    _layout_dataset(tmp_path)
    cfg = _probe_cfg(120)
    cfg.train.val_every = 60
    cfg.train.checkpoint_every = 60
    summary = train(tmp_path / "data", tmp_path / "p.pt", cfg, progress=False)
    layout = [v for _, v in summary["history"]["layout_loss"]]
    assert len(layout) == 120
    assert np.mean(layout[-20:]) < 0.8 * np.mean(layout[:20])
    payload = torch.load(tmp_path / "p.pt", weights_only=True)
    assert "per_token.weight" in payload["train_modules"]["layout_probe"]
    goal = [v for _, v in summary["history"]["goal_loss"]]
    assert len(goal) == 120 and np.isfinite(goal).all()
    cfg.train.steps = 140
    resumed = train(tmp_path / "data", tmp_path / "p.pt", cfg, resume=True, progress=False)
    assert resumed["start_step"] == 120
    assert len(resumed["history"]["layout_loss"]) == 140
    assert load_checkpoint(tmp_path / "p.pt").checkpoint_info["step"] == 140
    # --init-from carries the probes over too (not fresh ones): one step at a
    # negligible learning rate leaves them as they were
    cfg.train.steps, cfg.train.warmup_steps = 1, 0
    cfg.train.learning_rate, cfg.train.min_learning_rate = 1e-12, 0.0
    train(tmp_path / "data", tmp_path / "ft.pt", cfg, progress=False, init_from=tmp_path / "p.pt")
    source = torch.load(tmp_path / "p.pt", weights_only=True)["train_modules"]
    tuned = torch.load(tmp_path / "ft.pt", weights_only=True)["train_modules"]
    for probe in ("layout_probe", "goal_probe"):
        for key, value in source[probe].items():
            torch.testing.assert_close(tuned[probe][key], value, atol=1e-6, rtol=0)


def test_malformed_training_modules_are_a_named_checkpoint_error(tmp_path, trained):
    _, root, _ = trained
    payload = torch.load(root / "policy.pt", weights_only=True)
    payload["train_modules"] = {"layout_probe": [1.0, 2.0]}
    torch.save(payload, tmp_path / "bad.pt")
    _layout_dataset(tmp_path)
    with pytest.raises(CheckpointError, match="train_modules is not a dict of state dicts"):
        train(
            tmp_path / "data",
            tmp_path / "ft.pt",
            _probe_cfg(1),
            progress=False,
            init_from=tmp_path / "bad.pt",
        )
    assert not (tmp_path / "ft.pt").exists()
    # a stored probe of the wrong shape: named, not a torch traceback
    payload["train_modules"] = {"layout_probe": {"per_token.weight": torch.zeros(1)}}
    torch.save(payload, tmp_path / "misfit.pt")
    with pytest.raises(CheckpointError, match="layout probe does not fit"):
        train(
            tmp_path / "data",
            tmp_path / "ft.pt",
            _probe_cfg(1),
            progress=False,
            init_from=tmp_path / "misfit.pt",
        )


def test_init_from_starts_from_the_weights_with_a_fresh_schedule(tmp_path, trained) -> None:
    _, root, _ = trained
    write_dataset(tmp_path / "data" / "demos.hdf5", episodes_per_task=4, steps=20)
    cfg = _file_cfg(20)
    summary = train(
        tmp_path / "data", tmp_path / "ft.pt", cfg, progress=False, init_from=root / "policy.pt"
    )
    assert summary["start_step"] == 0
    losses = [v for _, v in summary["history"]["train_loss"]]
    trained_losses = [v for _, v in trained[0]["history"]["train_loss"]]
    assert np.mean(losses[:5]) < 0.5 * np.mean(trained_losses[:5])
    other = TrainFileConfig(model=tiny_config(d_model=16), train=cfg.train)
    with pytest.raises(CheckpointError, match="d_model"):
        train(
            tmp_path / "data",
            tmp_path / "x.pt",
            other,
            progress=False,
            init_from=root / "policy.pt",
        )


def test_update_ema_moves_the_average_towards_the_weights_and_copies_buffers() -> None:
    from vla_edge.archs.bundled.train import ema_decay_at, update_ema

    model = torch.nn.BatchNorm1d(3)
    average = torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        model.weight.fill_(2.0)
        average.weight.fill_(1.0)
        model.running_mean.fill_(5.0)
    update_ema(average, model, 0.9)
    assert torch.allclose(average.weight, torch.full((3,), 1.1))
    assert torch.equal(average.running_mean, model.running_mean)
    assert ema_decay_at(0, 0.999) == pytest.approx(0.1)
    assert ema_decay_at(100_000, 0.999) == 0.999


def test_ema_checkpoint_holds_the_average_and_resumes_exactly(tmp_path, trained) -> None:
    from vla_edge.archs.bundled.model import read_checkpoint
    from vla_edge.archs.bundled.train import RAW_WEIGHTS_KEY

    _, root, _ = trained
    full, _ = _run_whole_and_resumed(root / "data", tmp_path, ema_decay=0.9)
    payload = read_checkpoint(tmp_path / "full.pt")
    raw = payload["train_modules"][RAW_WEIGHTS_KEY]
    name, stage = next(iter(payload["stages"].items()))
    key = next(k for k, v in stage.items() if v.is_floating_point() and v.numel() > 1)
    assert not torch.equal(stage[key], raw[f"{name}.{key}"])  # the average, not the raw weights
    plain = _file_cfg(40)
    plain.train.checkpoint_every = 20
    train(root / "data", tmp_path / "plain.pt", plain, progress=False)
    plain_payload = read_checkpoint(tmp_path / "plain.pt")
    assert torch.equal(plain_payload["stages"][name][key], raw[f"{name}.{key}"])  # same raw run
    plain_val = plain_payload["meta"]["history"]["val_loss"][-1][1]
    assert full["history"]["val_loss"][-1][1] != pytest.approx(plain_val)


def test_init_from_keeps_the_source_normalisation_and_resume_keeps_the_stored_one(
    tmp_path, trained
) -> None:
    """The weights were trained on the source's scale; other data must not shift it."""
    _, root, _ = trained
    source = read_checkpoint(root / "policy.pt")["norm_stats"]
    write_dataset(tmp_path / "data" / "demos.hdf5", episodes_per_task=3, steps=30)
    scratch = _file_cfg(1)
    train(tmp_path / "data", tmp_path / "scratch.pt", scratch, progress=False)
    from_data = read_checkpoint(tmp_path / "scratch.pt")["norm_stats"]
    assert from_data["state_std"] != source["state_std"]

    cfg = _file_cfg(4)
    cfg.train.checkpoint_every = 2
    half = _file_cfg(2)
    train(tmp_path / "data", tmp_path / "ft.pt", half, progress=False, init_from=root / "policy.pt")
    kept = read_checkpoint(tmp_path / "ft.pt")
    assert kept["norm_stats"] == source
    assert kept["meta"]["norm_stats_from"] == "init_from"
    # --resume goes on with the statistics the run started with, not the data's
    train(tmp_path / "data", tmp_path / "ft.pt", cfg, resume=True, progress=False)
    assert read_checkpoint(tmp_path / "ft.pt")["norm_stats"] == source

    cfg.train.init_norm_stats = "data"
    train(tmp_path / "data", tmp_path / "ftd.pt", cfg, progress=False, init_from=root / "policy.pt")
    recomputed = read_checkpoint(tmp_path / "ftd.pt")
    assert recomputed["norm_stats"] == from_data
    assert recomputed["meta"]["norm_stats_from"] == "data"


def test_init_from_a_source_with_bad_statistics_is_a_named_checkpoint_error(
    tmp_path, trained
) -> None:
    _, root, _ = trained
    payload = read_checkpoint(root / "policy.pt")
    payload["norm_stats"]["action_std"] = [0.0] * len(payload["norm_stats"]["action_std"])
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=r"bad\.pt.*action_std"):
        train(
            root / "data",
            tmp_path / "x.pt",
            _file_cfg(2),
            progress=False,
            init_from=tmp_path / "bad.pt",
        )


def test_probe_warmup_fits_new_probes_while_the_policy_is_held(tmp_path) -> None:
    data = _layout_dataset(tmp_path)
    train(data, tmp_path / "src.pt", _file_cfg(40), progress=False)  # a source with no probes
    source = read_checkpoint(tmp_path / "src.pt")
    assert not source["train_modules"]
    # 40 probe-only steps, then one policy step at a negligible learning rate
    cfg = _probe_cfg(41)
    cfg.train.probe_warmup_steps = 40
    cfg.train.probe_warmup_learning_rate = 1e-2
    cfg.train.learning_rate, cfg.train.min_learning_rate, cfg.train.warmup_steps = 1e-12, 0.0, 0
    summary = train(data, tmp_path / "ft.pt", cfg, progress=False, init_from=tmp_path / "src.pt")
    layout = [v for _, v in summary["history"]["layout_loss"]]
    assert np.mean(layout[-10:]) < 0.8 * np.mean(layout[:10])
    tuned = read_checkpoint(tmp_path / "ft.pt")
    for stage, state in source["stages"].items():
        for key, value in state.items():
            torch.testing.assert_close(tuned["stages"][stage][key], value, atol=1e-6, rtol=0)
    assert set(tuned["train_modules"]) == {"layout_probe", "goal_probe"}
    # after the warm-up the policy trains on the usual schedule
    cfg = _probe_cfg(60)
    cfg.train.probe_warmup_steps = 40
    train(data, tmp_path / "ft2.pt", cfg, progress=False, init_from=tmp_path / "src.pt")
    moved = read_checkpoint(tmp_path / "ft2.pt")["stages"]["action_head"]
    assert any(not torch.equal(moved[k], v) for k, v in source["stages"]["action_head"].items())


def test_learning_rate_schedule_starts_after_the_probe_warmup() -> None:
    cfg = TrainConfig(
        steps=140,
        warmup_steps=10,
        learning_rate=1e-4,
        min_learning_rate=1e-6,
        probe_warmup_steps=40,
        probe_warmup_learning_rate=3e-3,
        layout_loss_weight=0.5,
    )
    assert [learning_rate_at(s, cfg) for s in (0, 39)] == [3e-3, 3e-3]
    assert learning_rate_at(40, cfg) == pytest.approx(1e-4 / 10)
    assert learning_rate_at(49, cfg) == pytest.approx(1e-4)
    assert learning_rate_at(139, cfg) == pytest.approx(1e-6, abs=1e-7)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"steps": 40, "probe_warmup_steps": 40, "layout_loss_weight": 1.0}, "leaves no step"),
        ({"steps": 100, "probe_warmup_steps": 40}, "needs a probe"),
    ],
)
def test_a_probe_warmup_without_steps_after_it_or_without_a_probe_is_refused(
    fields, message
) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)


def test_a_probe_on_data_without_stored_targets_is_a_named_dataset_error(tmp_path, trained):
    _, root, _ = trained  # synthetic tasks: no probe targets stored
    cfg = _probe_cfg(20)
    cfg.train.goal_loss_weight = 0.0  # a probe that is off needs no targets
    with pytest.raises(DatasetError, match=r"demos\.hdf5:data/demo_0: .*missing: layout_xy \("):
        train(root / "data", tmp_path / "x.pt", cfg, progress=False)
    assert not (tmp_path / "x.pt").exists()
