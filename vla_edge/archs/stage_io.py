"""What every architecture's three-stage split shares: names, example inputs, plumbing.

An architecture's ``stages`` module splits one model into ``vision_encoder``, ``fusion``
and ``action_head`` (:data:`STAGE_NAMES`), fed by the host's tensors (:data:`HOST_INPUTS`).
The pieces here are the same for every architecture:

* :class:`StageSet`: the stage modules in run order (a mixin for the stages dataclass);
  :func:`build_stage_set`: one built from a model.
* :func:`example_inputs`: random inputs of the declared shapes, with the masks set so that
  tracing exercises them (last image slot absent, half the prompt real, no executed prefix).
* :func:`image_prefix`: the slots' image tokens laid end to end, with their pad mask.
* :func:`collect_prefix_cache`: the per-layer key/value cache of one pass over the prefix.
* :func:`executed_prefix_masks`, :func:`on_flow_path`, :func:`default_executed_prefix`:
  executed-prefix inpainting in the action head's Euler loop.
* :func:`flow_step_repeat`, :func:`flow_calls`, :func:`declared_calls`: an action head
  exported as one Euler step, its declared loop, and its K calls in torch with the
  per-call inputs its stage set declares.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from vla_edge.archs.host import HOST_INPUTS as HOST_INPUTS
from vla_edge.archs.host import STAGE_NAMES as STAGE_NAMES
from vla_edge.archs.host import TensorSpec


class StageSet:
    """The stage modules of one model, as attributes named after :data:`STAGE_NAMES` (mixin)."""

    def modules(self) -> dict[str, nn.Module]:
        """Stage name → module, in run order."""
        return {name: getattr(self, name) for name in STAGE_NAMES}

    def repeats(self) -> dict[str, dict[str, Any]]:
        """Stage name → its loop (the manifest's ``repeat``) for a stage run as K calls; none."""
        return {}


StagesT = TypeVar("StagesT", bound=StageSet)


def build_stage_set(
    stage_set: Callable[..., StagesT], model: nn.Module, *stages: Callable[[Any], nn.Module]
) -> StagesT:
    """``stage_set(model, *stages)`` with each stage built from ``model``, in run order.

    ``model`` is put in eval mode; each stage holds its modules (not copies), so the stages
    share its parameters.
    """
    model.eval()
    return stage_set(model, *(stage(model) for stage in stages))


def example_tensor(spec: TensorSpec, vocab_size: int, gen: torch.Generator) -> torch.Tensor:
    """A random tensor for ``spec``: token ids below ``vocab_size``, images in [-1, 1]."""
    if spec.dtype == "int64":
        return torch.randint(0, vocab_size, spec.shape, generator=gen)
    if spec.name == "images":
        return torch.rand(spec.shape, generator=gen) * 2.0 - 1.0
    if spec.name == "time":  # a flow time
        return torch.rand(spec.shape, generator=gen)
    if spec.name == "step":  # a flow step, one-hot [1, K]: the middle one (t away from 1)
        steps = spec.shape[-1]
        return torch.eye(steps)[steps // 2].reshape(spec.shape)
    return torch.randn(spec.shape, generator=gen)


def example_inputs(
    specs: Mapping[str, Sequence[TensorSpec]],
    *,
    vocab_size: int,
    n_slots: int,
    tokens_per_slot: int,
    max_token_len: int,
    horizon: int,
    trailing_prefix_tokens: int = 0,
    seed: int = 0,
) -> dict[str, tuple[torch.Tensor, ...]]:
    """Example inputs for every stage (random, of the declared shapes and dtypes).

    The image mask marks the last slot absent and the prompt fills half the token slots,
    so masks are exercised when tracing; ``prefix_pad`` agrees with both (plus
    ``trailing_prefix_tokens`` always-real tokens after the prompt, e.g. a state token)
    and ``prefix_mask`` is all zero.

    Args:
        specs: each stage's input declarations, in ``forward`` order.
    """
    gen = torch.Generator().manual_seed(seed)
    values: dict[str, torch.Tensor] = {}
    for stage in STAGE_NAMES:
        for spec in specs[stage]:
            values[spec.name] = example_tensor(spec, vocab_size, gen)
    values["image_mask"] = torch.ones(n_slots)
    values["image_mask"][-1] = 0.0
    values["token_mask"] = (torch.arange(max_token_len) < max(1, max_token_len // 2))[None].float()
    pad_parts = [
        values["image_mask"].repeat_interleave(tokens_per_slot)[None],
        values["token_mask"],
    ]
    if trailing_prefix_tokens:
        pad_parts.append(torch.ones(1, trailing_prefix_tokens))
    values["prefix_pad"] = torch.cat(pad_parts, dim=1)
    values["prefix_mask"] = torch.zeros(1, horizon)
    return {stage: tuple(values[s.name] for s in specs[stage]) for stage in STAGE_NAMES}


def image_prefix(
    image_tokens: torch.Tensor, image_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every slot's image tokens end to end ``[1, n_slots * T, W]``, and their pad mask.

    Args:
        image_tokens: ``[n_slots, T, W]``.
        image_mask: ``[n_slots]``, nonzero for a present slot (a masked slot pads out all
            its tokens).
    """
    n_slots, n_tok, width = image_tokens.shape
    tokens = image_tokens.reshape(1, n_slots * n_tok, width)
    slot_pad = (image_mask != 0)[:, None].expand(n_slots, n_tok).reshape(1, n_slots * n_tok)
    return tokens, slot_pad


LayerStep = Callable[..., tuple[Any, torch.Tensor, torch.Tensor]]
"""``(layer, x, keys_only=...) -> (x or None, keys, values)``: one decoder layer."""


def collect_prefix_cache(
    layers: Iterable[nn.Module], embs: torch.Tensor, step: LayerStep
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Run ``step`` through ``layers`` from ``embs``, collecting each layer's keys and values.

    The last layer is asked for its keys and values only (``keys_only=True``).
    """
    layers = list(layers)
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    x: torch.Tensor | None = embs
    for i, layer in enumerate(layers):
        assert x is not None
        x, k, v = step(layer, x, keys_only=i == len(layers) - 1)
        keys.append(k)
        values.append(v)
    return keys, values


def stacked_cache(
    keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], pad: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fusion's outputs ``(prefix_keys, prefix_values, prefix_pad)`` (``prefix_pad`` float 0/1)."""
    return torch.stack(list(keys)), torch.stack(list(values)), pad.to(torch.float32)


def executed_prefix_masks(prefix_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(keep, free)`` ``[B, H, 1]``: the rows under ``prefix_mask`` and the rest."""
    keep = prefix_mask[:, :, None]
    return keep, 1.0 - keep


def on_flow_path(
    x_t: torch.Tensor,
    t: float | torch.Tensor,
    noise: torch.Tensor,
    prefix_actions: torch.Tensor,
    keep: torch.Tensor,
    free: torch.Tensor,
) -> torch.Tensor:
    """``x_t`` with the kept rows set to the flow path ``t * noise + (1 - t) * prefix_actions``."""
    return free * x_t + keep * (t * noise + (1.0 - t) * prefix_actions)


def default_executed_prefix(
    noise: torch.Tensor,
    prefix_actions: torch.Tensor | None,
    prefix_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prefix_actions, prefix_mask)``, zeros (no executed prefix) where not given."""
    if prefix_actions is None:
        prefix_actions = torch.zeros_like(noise)
    if prefix_mask is None:
        prefix_mask = torch.zeros(noise.shape[:2], device=noise.device)
    return prefix_actions, prefix_mask


def one_hot_steps(count: int) -> list[list[list[float]]]:
    """The rows ``[1, K]`` of the K-by-K identity, as the manifest's per-call ``step`` values.

    Plain lists, not ``torch.eye``: ``stage_flops`` builds the stages under a fake mode.
    """
    return [[[float(i == j) for j in range(count)]] for i in range(count)]


def flow_step_repeat(count: int) -> dict[str, dict[str, Any]]:
    """:meth:`StageSet.repeats` for an action head exported as one Euler step of ``count``.

    ``count`` calls, ``step`` row ``k`` of the identity at call ``k``, ``x_t`` the previous
    call's ``actions`` (the manifest's ``stages.action_head.repeat``).
    """
    return {
        "action_head": {
            "count": count,
            "inputs": {"step": one_hot_steps(count)},
            "carry": {"x_t": "actions"},
        }
    }


def declared_calls(
    stages: StageSet, name: str = "action_head", device: torch.device | None = None
) -> list[torch.Tensor]:
    """The per-call input of stage ``name``'s declared repeat, one float32 tensor per call.

    Filled on ``device`` (the host by default) from the declared numbers, so no host tensor
    is copied there: a CUDA graph can capture a whole chunk.
    """
    (values,) = stages.repeats()[name]["inputs"].values()
    calls = []
    for value in values:
        shape, flat = _shape_and_numbers(value)
        call = torch.zeros(len(flat), dtype=torch.float32, device=device)
        for i, number in enumerate(flat):
            if number:
                call[i].fill_(float(number))
        calls.append(call.reshape(shape))
    return calls


def _shape_and_numbers(value: Any) -> tuple[tuple[int, ...], list[float]]:
    """A nested list's shape and its numbers in row-major order (no tensor made)."""
    if not isinstance(value, list | tuple):
        return (), [float(value)]
    parts = [_shape_and_numbers(item) for item in value]
    inner = parts[0][0] if parts else ()
    return (len(value), *inner), [n for _, numbers in parts for n in numbers]


def flow_calls(
    step: Callable[..., torch.Tensor],
    fixed: Sequence[torch.Tensor],
    noise: torch.Tensor,
    per_call: Iterable[torch.Tensor],
) -> torch.Tensor:
    """An action head of one Euler step called once per value of ``per_call``, as a runner does.

    Each call is ``step(*fixed, x_t, value)``: ``x_t`` is ``noise`` first, then the
    previous call's actions (the manifest's ``carry``); the last call's actions are returned.
    """
    x_t = noise
    for value in per_call:
        x_t = step(*fixed, x_t, value)
    return x_t
