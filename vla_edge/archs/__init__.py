"""The architectures this package runs: one folder each, and what they share.

Each architecture is a folder ``vla_edge/archs/<name>/`` (``bundled``, ``pi0`` for π0 and
π0.5, ``smolvla``): its config that builds every size, model, stages with their declared
tensors, checkpoint layouts it reads, processor (the numpy host side: image fit,
normalisation with its epsilon, prompt and tokenizer), export rewrites (XNNPACK) and
the hooks export and bench read, and an ``arch`` module that registers it
(:mod:`vla_edge.archs.registry` finds the folders; :mod:`vla_edge.archs.architecture` says
what a registration holds).

Shared by the folders: :mod:`.host` (the host tensors, prompt formats, the one
:class:`~vla_edge.archs.host.TensorSpec`, the VLM-prefix flow contract),
:mod:`.stage_io` (stage sets, example inputs, the prefix cache and flow loop helpers),
:mod:`.common` (key checks, safetensors I/O, import options), :mod:`.normalisation` (the
host codec), and the policy directory (:mod:`.policy_dir`, :mod:`.policy_write`,
:mod:`.policy_tokenizer`, :mod:`.policy_stats`) that ``vla-edge import`` writes.
"""
