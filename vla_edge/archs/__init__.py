"""Third-party VLA architectures (π0, π0.5, ...) built as torch stages from one config each.

Each architecture is a subpackage that builds its torch model at any size from one
config, declares its ``vision_encoder`` / ``fusion`` / ``action_head`` stages with
their tensors, and maps a published checkpoint's key names onto its module tree.
"""
