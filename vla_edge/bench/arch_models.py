"""Random-weight models of the imported architectures for the benchmarks, at any size.

Timing does not depend on the weight values, so ``vla-edge bench latency --arch`` and
``vla-edge bench parity --arch`` build each architecture from its config with seeded
random weights (the same seed gives the same weights in every process, so programs
exported in one process are compared with eager torch in another):

* :func:`model_config`: the ``full`` or ``small`` size with the first ``cameras`` image
  slots (a checkpoint fine-tuned for one camera has one slot; openpi's three-slot
  checkpoints run a black, masked image through the vision encoder for each missing one);
* :func:`random_model`: built without the default initialisers (a 3.3 B-parameter
  model's kaiming draws take minutes), then every weight ~ N(0, 0.02²), biases 0,
  layer norms 1 / 0, as transformers initialises these blocks. Each module draws from
  its own generator, seeded by the seed and its name, so one stage can be drawn alone:
  an export process draws only its stage, and the rest of the model stays allocated
  but never written, so not resident (a full-size π0 action head no longer carries
  the 13 GB of the whole model);
* :func:`bench_inputs`: each stage's host inputs with every slot present;
* :func:`stage_flops`: each stage's FLOPs, counted on fake tensors (no memory);
* :func:`gemm_peak_gflops`: this CPU's fp32 GEMM throughput, the yardstick of the
  achieved GFLOP/s.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

import torch
from torch import nn

from vla_edge.archs import registry
from vla_edge.archs.common import without_default_init
from vla_edge.core.errors import ConfigError

SIZES = ("full", "small")
INIT_STD = 0.02
"""transformers' ``initializer_range`` for these blocks."""
GEMM_SIZE = 2048
"""Side of the square fp32 matrices whose product measures the GEMM peak."""


def bench_archs() -> tuple[str, ...]:
    """The architectures the benchmarks build at random (those with bench hooks)."""
    return tuple(name for name, arch in registry.ARCHITECTURES.items() if arch.bench)


def _arch(arch: str) -> Any:
    """The registry entry of ``arch``, one the benchmarks build.

    Raises:
        ConfigError: not one of :func:`bench_archs`.
    """
    if arch not in bench_archs():
        raise ConfigError(f"arch = {arch!r}, expected one of {bench_archs()}")
    return registry.get(arch)


def depth_fields(arch: str) -> dict[str, tuple[str, ...]]:
    """Stage -> the config blocks whose ``depth`` shrinks it (empty: ``arch`` has none)."""
    return dict(_arch(arch).bench_hooks().depth_fields)


def model_config(
    arch: str, size: str, cameras: int, stage: str | None = None, depth: int | None = None
) -> Any:
    """The config of ``arch`` at ``size`` with its first ``cameras`` image slots.

    ``depth``: ``stage``'s blocks cut to that many layers (the largest size of a stage
    that fits in memory), for an architecture whose bench hooks name them.

    Raises:
        ConfigError: an unknown architecture or size, more cameras than slots, or a depth
            for a stage without depth fields.
    """
    hooks = _arch(arch).bench_hooks()
    if size not in SIZES:
        raise ConfigError(f"size = {size!r}, expected one of {SIZES}")
    config = hooks.config(size, cameras)
    if depth is None:
        return config
    if stage not in hooks.depth_fields:
        with_depth = [a for a in bench_archs() if depth_fields(a)]
        raise ConfigError(
            f"depth = {depth} for {arch} stage {stage!r}: only {', '.join(with_depth)} stages "
            f"{tuple(depth_fields(with_depth[0])) if with_depth else ()} shrink by depth"
        )
    data = config.model_dump()
    for part in hooks.depth_fields[stage]:
        data[part] = {**data[part], "depth": int(depth)}
    return type(config)(**data)


def model_class(arch: str) -> type[nn.Module]:
    """The torch model class of ``arch``."""
    return _arch(arch).resolve("model")


def build_stages(arch: str, model: nn.Module) -> Any:
    """The architecture's stages (sharing ``model``'s parameters)."""
    return _arch(arch).resolve("stages")(model)


def module_generator(seed: int, name: str) -> torch.Generator:
    """The generator of module ``name``'s draws: the same in every process."""
    # the CPU generator keeps 32 bits of its seed: hash the pair into them
    return torch.Generator().manual_seed(zlib.crc32(f"{int(seed)}:{name}".encode()))


@torch.no_grad()
def randomise(
    model: nn.Module, seed: int, std: float = INIT_STD, only: nn.Module | None = None
) -> nn.Module:
    """Every weight of ``model`` ~ N(0, std²), biases 0, layer norms 1 / 0 (in place).

    Weights are those of ``Linear``, ``Embedding`` and ``Conv2d`` / ``Conv3d`` modules and
    every parameter of two or more dimensions that another module holds itself (a
    per-embodiment weight bank, for one): under
    :func:`~vla_edge.archs.common.without_default_init` nothing else writes them.

    ``only``: draw just the modules whose parameters ``only`` holds (a stage of
    ``model``); each gets the values it gets when the whole model is drawn.
    """
    wanted = None if only is None else {id(p) for p in only.parameters()}
    for name, module in model.named_modules():
        own = list(module.named_parameters(recurse=False))
        if wanted is not None and not any(id(p) in wanted for _, p in own):
            continue
        if isinstance(module, nn.LayerNorm):
            if module.weight is not None:
                module.weight.fill_(1.0)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Linear | nn.Embedding | nn.Conv2d | nn.Conv3d):
            module.weight.normal_(0.0, std, generator=module_generator(seed, name))
            bias = getattr(module, "bias", None)
            if bias is not None:
                bias.zero_()
        else:
            for param_name, param in own:
                if param.dim() >= 2:
                    generator = module_generator(seed, f"{name}.{param_name}")
                    param.normal_(0.0, std, generator=generator)
    return model


def random_model(
    arch: str,
    size: str,
    cameras: int,
    seed: int = 0,
    stage: str | None = None,
    depth: int | None = None,
) -> nn.Module:
    """``arch`` at ``size`` with seeded random weights, in eval mode (see :func:`model_config`).

    ``stage``: draw only that stage's weights (the others stay unwritten).
    """
    config = model_config(arch, size, cameras, stage, depth)
    with without_default_init():
        model = model_class(arch)(config)
    only = None if stage is None else build_stages(arch, model).modules()[stage]
    return randomise(model, seed, only=only).eval()


def meta_stages(arch: str, size: str, cameras: int) -> Any:
    """``arch``'s stages on the meta device: their declarations and example inputs, no weights."""
    config = model_config(arch, size, cameras)
    with torch.device("meta"), without_default_init():
        model = model_class(arch)(config).eval()
    return build_stages(arch, model)


def bench_inputs(stages: Any, seed: int) -> dict[str, tuple[torch.Tensor, ...]]:
    """Each stage's example inputs (seeded) with every image slot present."""
    examples = stages.example_inputs(seed)
    names = {stage: [t.name for t in specs] for stage, specs in stages.inputs().items()}
    out: dict[str, tuple[torch.Tensor, ...]] = {}
    for stage, values in examples.items():
        fixed = list(values)
        if "image_mask" in names[stage]:
            fixed[names[stage].index("image_mask")] = torch.ones_like(
                values[names[stage].index("image_mask")]
            )
        out[stage] = tuple(fixed)
    return out


def host_sources(stages: Any) -> dict[str, dict[str, str]]:
    """Each stage's inputs: name -> source (``host:...`` or ``stage:<stage>.<output>``)."""
    return {stage: {t.name: t.source for t in specs} for stage, specs in stages.inputs().items()}


def stage_flops(arch: str, size: str, cameras: int) -> dict[str, int]:
    """Floating-point operations of each stage per inference (a multiply-add counts 2).

    Counted with ``torch.utils.flop_counter`` on fake tensors (shapes only, no memory):
    matrix products, convolutions and attention; element-wise operations are not counted.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    flops: dict[str, int] = {}
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        config = model_config(arch, size, cameras)
        with without_default_init():
            model = model_class(arch)(config).eval()
        stages = build_stages(arch, model)
        inputs = bench_inputs(stages, 0)
        repeats = stages.repeats()
        for name, module in stages.modules().items():
            counter = FlopCounterMode(display=False)
            with counter:
                module(*inputs[name])
            calls = int(repeats[name]["count"]) if name in repeats else 1  # a looped stage
            flops[name] = calls * int(counter.get_total_flops())
    return flops


def gemm_peak_gflops(threads: int, size: int = GEMM_SIZE, repeats: int = 5) -> float:
    """Best fp32 ``torch.mm`` throughput of ``size``² matrices on ``threads`` threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        a = torch.randn(size, size)
        b = torch.randn(size, size)
        torch.mm(a, b)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return 2.0 * size**3 / best / 1e9
