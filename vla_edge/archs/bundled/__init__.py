"""This package's own VLA (``vla-edge train``): MiniLM language, ViT vision, fusion, flow head.

The model and its training live in :mod:`vla_edge.policy` (a layer below the archs); this
folder registers it (:mod:`.arch`) and holds its export contract (:mod:`.stages`: its four
stages' tensors, host side and example inputs), its export hooks (:mod:`.programs`: its
checkpoint, manifest and reusable language stage) and its attention rewrite for XNNPACK
(:mod:`.xnnpack`).
"""
