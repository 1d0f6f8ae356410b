"""Evaluation episodes as independent units: their keys, the results store, where they run.

An evaluation (or a sweep of many) is a list of episodes, each one
``(job, task, init state)``: the :class:`EvalJob` holds everything the episodes of one
configuration share (policy, scheme, merge, delay, instructions, seed, ...). An episode
draws its noise from its own generator (:func:`vla_edge.sim.evaluator.episode_rng`), so
its result is the same in this process, in a worker process or in a Ray task on another
machine, whatever ran before it.

* :class:`ResultsStore`: JSON lines, one record per finished episode with its full key,
  appended (and flushed to disk) as each finishes; a resumed run skips what it holds, and
  a key is never written twice.
* :func:`run_episodes`: runs the episodes the store lacks on one of three pools — this
  process, ``--workers`` spawned processes, or a Ray cluster (:class:`RayPool`) — with a
  progress bar (episodes done, successes so far, time left).

A worker keeps its simulator and runner between episodes of the same policy (a Ray task
or a pool process runs many), so an episode costs its own simulation only.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.sim.evaluator import EvalSettings

MAX_RUNNERS_PER_WORKER = 2
"""Policies a worker keeps loaded (a sweep's episodes of other policies evict the oldest)."""
RAY_RETRIES = 3
"""Times Ray runs an episode again after its worker process died."""


class EpisodeFailedError(VlaEdgeError):
    """An episode raised, or its worker died more often than Ray retries."""


class ResultsStoreError(VlaEdgeError):
    """The results store cannot be read or would be overwritten."""


@dataclass(frozen=True)
class EvalJob:
    """What the episodes of one evaluation configuration share."""

    policy: str
    settings: EvalSettings = field(default_factory=EvalSettings)
    """How the episodes run (scheme, merge, delay, instructions, noise; validated)."""
    suite: str = "tabletop"
    seed: int = 0
    image_size: int | None = None
    flow_steps: int | None = None
    threads: int = 2
    device: str = "cpu"
    """Where a torch checkpoint or torch export runs (``cpu``, ``cuda``, ``cuda:N``)."""
    controller_config: str | None = None
    safety_config: str | None = None

    def configs(self) -> tuple[Any, Any]:
        """The controller and safety configurations (the package's unless named)."""
        from vla_edge.config.loader import load_node_params
        from vla_edge.config.models import ControllerConfig, SafetyConfig
        from vla_edge.config.paths import config_path

        controller = load_node_params(
            self.controller_config or config_path("controller.yaml"),
            "controller_node",
            ControllerConfig,
        )
        safety = load_node_params(
            self.safety_config or config_path("safety.yaml"), "safety_node", SafetyConfig
        )
        return controller, safety

    def fields(self) -> dict[str, Any]:
        """The job as one flat dict, the settings' fields among the job's (a sweep's table)."""
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del flat["settings"]
        return {**flat, **dataclasses.asdict(self.settings)}


@dataclass(frozen=True)
class Episode:
    """One unit of work: an init state of a task under a job."""

    job: EvalJob
    task: str
    init_state_id: int


@functools.lru_cache(maxsize=16)
def _file_sha(path: str | None, default: str) -> str:
    from vla_edge.config.paths import config_path

    data = Path(path or config_path(default)).read_bytes()
    return hashlib.sha256(data).hexdigest()[:16]


def episode_key(episode: Episode) -> dict[str, Any]:
    """Everything an episode's result depends on (the config files by content)."""
    job = episode.job
    fields = job.fields()
    fields["controller_config"] = _file_sha(job.controller_config, "controller.yaml")
    fields["safety_config"] = _file_sha(job.safety_config, "safety.yaml")
    del fields["threads"]  # virtual time: the result does not depend on it
    del fields["video_fps"]
    if not fields["sequencer"]:  # added later: stores written before it keep their keys
        del fields["sequencer"]
    if fields["max_chunk_age_s"] is None:  # as configured (the config file's content is keyed)
        del fields["max_chunk_age_s"]
    return {**fields, "task": episode.task, "init_state_id": episode.init_state_id}


def key_id(key: dict[str, Any]) -> str:
    """A short, stable name of a key."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


class ResultsStore:
    """Finished episodes, one JSON line each, appended as they finish.

    ``path`` ``None`` keeps them in memory only. A line cut short by an interrupted
    write (the file's last) is ignored; any other line that is not a record is an
    error, as is appending a key already stored.
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        self._keep: int | None = None
        """Bytes to keep before the next append (a torn last line is cut off)."""
        if self.path is not None and self.path.is_file():
            self._read()

    def _read(self) -> None:
        assert self.path is not None
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        offset = 0
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    record = json.loads(line)
                    self.records[record["key_id"]] = record
                except (ValueError, KeyError, TypeError) as exc:
                    if number < len(lines):
                        raise ResultsStoreError(
                            f"{self.path}:{number}: not a record ({exc})"
                        ) from exc
                    self._keep = offset  # cut short by an interrupted write
            offset += len(line) + 1
        if self._keep is None and data and not data.endswith(b"\n"):
            self._keep = len(data)  # a whole record without its newline

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` (with its ``key_id``) and flush it to disk."""
        if record["key_id"] in self.records:
            raise ResultsStoreError(f"{self.path}: episode {record['key_id']} is already stored")
        self.records[record["key_id"]] = record
        if self.path is None:  # kept in memory only
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._keep is not None:
            with self.path.open("r+b") as f:
                f.truncate(self._keep)
                if self._keep and f.seek(self._keep - 1) >= 0 and f.read(1) != b"\n":
                    f.write(b"\n")
            self._keep = None
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())


def open_store(path: str | Path, resume: bool) -> ResultsStore:
    """The store at ``path``; one that exists must be resumed (nothing counted twice).

    Raises:
        ResultsStoreError: ``path`` holds episodes and ``resume`` is false.
    """
    store = ResultsStore(path)
    if len(store) and not resume:
        raise ResultsStoreError(
            f"{path} already holds {len(store)} episodes: pass --resume to continue that "
            "run, or name another store"
        )
    return store


# ---------------------------------------------------------------- in a worker
_LOADED: dict[tuple[Any, ...], tuple[Any, Any, tuple[int, int]]] = {}


def env_and_runner(
    policy: str,
    image_size: int | None,
    threads: int,
    flow_steps: int | None,
    device: str = "cpu",
) -> tuple[Any, Any, tuple[int, int]]:
    """The tabletop at the policy's image size (or ``image_size``) and the policy's runner."""
    from vla_edge.runners.factory import make_runner
    from vla_edge.sim.env import TabletopEnv

    if image_size is None and policy != "expert":
        runner = make_runner(policy, threads=threads, flow_steps=flow_steps, device=device)
        size = (runner.spec.image_height, runner.spec.image_width)
        env = TabletopEnv(image_height=size[0], image_width=size[1], cameras=runner.spec.cameras)
        return env, runner, size
    side = image_size or 64
    env = TabletopEnv(image_height=side, image_width=side, cameras=["agentview", "wrist"])
    runner = make_runner(policy, env=env, threads=threads, flow_steps=flow_steps, device=device)
    return env, runner, (side, side)


def _runtime_key(job: EvalJob) -> tuple[Any, ...]:
    """What a loaded simulator and runner depend on."""
    return (job.policy, job.image_size, job.threads, job.flow_steps, job.device)


def _release(loaded: tuple[Any, Any, tuple[int, int]]) -> None:
    env, runner, _ = loaded
    runner.close()
    env.close()


def _loaded(job: EvalJob) -> tuple[Any, Any, tuple[int, int]]:
    key = _runtime_key(job)
    if key not in _LOADED:
        while len(_LOADED) >= MAX_RUNNERS_PER_WORKER:
            _release(_LOADED.pop(next(iter(_LOADED))))
        _LOADED[key] = env_and_runner(
            job.policy, job.image_size, job.threads, job.flow_steps, job.device
        )
    return _LOADED[key]


def check_policies(jobs: Iterable[EvalJob], keep: bool) -> None:
    """Load each policy of ``jobs`` here once, so that a bad one raises before any episode.

    ``keep``: leave them loaded for the episodes this process runs itself.

    Raises:
        ConfigError: and the other named errors of loading a policy.
    """
    for key, job in {_runtime_key(job): job for job in jobs}.items():
        _loaded(job)
        if not keep:
            _release(_LOADED.pop(key))


def run_one(episode: Episode, video_dir: str | None = None) -> dict[str, Any]:
    """Run ``episode`` here; its store record (``key``, ``key_id``, ``result``, where, how long)."""
    from vla_edge.sim.evaluator import episode_rng, run_episode
    from vla_edge.sim.tasks import get_task

    started = time.perf_counter()
    job = episode.job
    controller, safety = job.configs()
    env, runner, size = _loaded(job)
    task = get_task(episode.task)
    frames: list[Any] | None = [] if video_dir else None
    result = run_episode(
        env,
        runner,
        task,
        episode.init_state_id,
        job.settings,
        controller,
        safety,
        episode_rng(job.seed, task.name, episode.init_state_id),
        video_frames=frames,
    )
    if video_dir and frames:
        from vla_edge.sim.video import write_mp4

        tag = "success" if result.success else "failure"
        write_mp4(
            Path(video_dir) / f"{task.name}_{episode.init_state_id:03d}_{tag}.mp4",
            frames,
            fps=job.settings.video_fps,
        )
    key = episode_key(episode)
    return {
        "key_id": key_id(key),
        "key": key,
        "result": dataclasses.asdict(result),
        "image_size": list(size),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "wall_s": round(time.perf_counter() - started, 3),
    }


# ---------------------------------------------------------------- pools
class InlinePool:
    """Episodes one after another in this process."""

    name = "inline"

    def run(self, episodes: list[Episode], video_dir: str | None) -> Iterator[dict[str, Any]]:
        """Each episode's record, in order."""
        for episode in episodes:
            yield run_one(episode, video_dir)

    def close(self) -> None:
        """Release the runners this process loaded."""
        while _LOADED:
            _release(_LOADED.popitem()[1])


class ProcessPool:
    """Episodes spread over ``workers`` spawned processes, records as they finish."""

    name = "processes"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def run(self, episodes: list[Episode], video_dir: str | None) -> Iterator[dict[str, Any]]:
        """Each episode's record as it finishes."""
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=context) as pool:
            pending = {pool.submit(run_one, e, video_dir): e for e in episodes}
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        episode = pending.pop(future)
                        try:
                            yield future.result()
                        except VlaEdgeError:
                            raise
                        except Exception as exc:
                            raise EpisodeFailedError(f"{_name(episode)}: {exc!r}") from exc
            finally:
                for future in pending:
                    future.cancel()

    def close(self) -> None:
        """Nothing outlives :meth:`run`."""


class RayPool:
    """Episodes as Ray tasks: on a cluster (``auto`` or an address) or a local instance.

    Each task is one episode; a task whose worker process dies is run again (up to
    :data:`RAY_RETRIES` times) and its result still arrives once. An episode that raises
    is not retried: the run stops with its error, keeping what finished.
    """

    name = "ray"

    def __init__(self, address: str | None, num_cpus: int) -> None:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - ray is pinned in requirements
            raise ConfigError("--ray needs the ray package (pip install ray)") from exc
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": "ERROR",
            }
            if address:
                ray.init(address=address, **options)
            else:
                ray.init(num_cpus=num_cpus, **options)

    def run(self, episodes: list[Episode], video_dir: str | None) -> Iterator[dict[str, Any]]:
        """Each episode's record as its task finishes."""
        ray = self._ray
        if video_dir:
            raise ConfigError("--video writes where each episode runs: not with --ray")
        task = ray.remote(num_cpus=1, max_retries=RAY_RETRIES, retry_exceptions=False)(run_one)
        pending = {task.remote(e): e for e in episodes}
        try:
            while pending:
                # whatever finished within a second (one wait per episode is slow at 10⁴)
                done, _ = ray.wait(list(pending), num_returns=min(len(pending), 64), timeout=1.0)
                for ref in done:
                    episode = pending.pop(ref)
                    try:
                        yield ray.get(ref)
                    except ray.exceptions.RayTaskError as exc:
                        cause = exc.as_instanceof_cause()
                        if isinstance(cause, VlaEdgeError):
                            raise type(cause)(f"{_name(episode)}: {cause}") from None
                        raise EpisodeFailedError(f"{_name(episode)}: {cause!r}") from None
                    except ray.exceptions.RayError as exc:
                        raise EpisodeFailedError(
                            f"{_name(episode)}: its worker died {RAY_RETRIES + 1} times "
                            f"({type(exc).__name__})"
                        ) from None
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        """Stop the local instance this pool started (a cluster stays up)."""
        if self._started:
            self._ray.shutdown()


def _name(episode: Episode) -> str:
    return f"episode {episode.task} #{episode.init_state_id}"


def add_pool_arguments(parser: Any, workers_help: str, ray_help: str) -> None:
    """``--workers N`` and ``--ray [ADDRESS]``: where the episodes run."""
    parser.add_argument("--workers", type=int, default=1, help=workers_help)
    parser.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS", help=ray_help
    )


def pool_from_args(args: Any) -> Any:
    """The pool ``--ray [ADDRESS]`` / ``--workers N`` ask for."""
    if args.ray is not None:
        return RayPool(args.ray or None, max(args.workers, 1))
    return ProcessPool(args.workers) if args.workers > 1 else InlinePool()


class Progress:
    """A progress bar on stderr: episodes done, successes so far, time left."""

    def __init__(self, total: int, already: int, successes: int, quiet: bool) -> None:
        from tqdm import tqdm

        self.successes = successes
        self.bar = tqdm(
            total=total,
            initial=already,
            unit="ep",
            file=sys.stderr,
            disable=quiet,
            dynamic_ncols=True,
            smoothing=0.1,
        )
        self.bar.set_postfix(successes=successes)

    def update(self, record: dict[str, Any]) -> None:
        """One more episode done."""
        self.successes += bool(record["result"]["success"])
        self.bar.set_postfix(successes=self.successes, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        """Finish the bar."""
        self.bar.close()


def run_episodes(
    episodes: Iterable[Episode],
    store: ResultsStore,
    pool: Any,
    *,
    video_dir: str | None = None,
    quiet: bool = False,
) -> dict[str, dict[str, Any]]:
    """Run every episode ``store`` lacks on ``pool``; each record is stored as it arrives.

    Returns:
        ``key_id -> record`` of every episode asked for (stored before or now).
    """
    wanted = {key_id(episode_key(e)): e for e in episodes}
    todo = [e for k, e in wanted.items() if k not in store]
    done_before = [store.records[k] for k in wanted if k in store]
    progress = Progress(
        len(wanted),
        len(done_before),
        sum(bool(r["result"]["success"]) for r in done_before),
        quiet,
    )
    try:
        if todo:
            for record in pool.run(todo, video_dir):
                store.append(record)
                progress.update(record)
    finally:
        progress.close()
    return {k: store.records[k] for k in wanted}


def summarize_records(
    job: EvalJob, names: list[str], episodes: int, records: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The eval JSON dict of one job's episodes (tasks and init states in order)."""
    from vla_edge.sim.evaluator import EpisodeResult, scheme_merge, summarize

    by_id = {(r["key"]["task"], r["key"]["init_state_id"]): r for r in records.values()}
    by_task = {
        name: [EpisodeResult(**by_id[name, i]["result"]) for i in range(episodes)] for name in names
    }
    settings = job.settings
    controller, safety = job.configs()
    result = summarize(
        by_task,
        settings,
        controller,
        scheme_merge(settings),
        job.policy,
        job.suite,
        job.seed,
        episodes,
        safety_config=safety,
    )
    first = next(iter(records.values()), None)
    result["settings"]["image_size"] = first["image_size"] if first else None
    result["settings"]["flow_steps"] = job.flow_steps
    return result
