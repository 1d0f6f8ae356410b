"""This package's own VLA (``vla-edge train``): MiniLM language, ViT vision, fusion, flow head.

The model: :mod:`.config`, :mod:`.layers`, :mod:`.vision`, :mod:`.language` (with its
tokenizer, :mod:`.tokenizer`), :mod:`.fusion`, :mod:`.action_head`, :mod:`.model` (the
checkpoint) and :mod:`.normalize`; its training: :mod:`.data`, :mod:`.train`. The
registration (:mod:`.arch`), its export contract (:mod:`.stages`: its four stages' tensors,
host side and example inputs), its export hooks (:mod:`.programs`: its checkpoint, manifest
and reusable language stage) and its attention rewrite for XNNPACK (:mod:`.xnnpack`).
"""
