"""torch -> ONNX / ExecuTorch / torch programs plus ``manifest.json``.

* :mod:`.architecture`: the one exporter of every registered architecture's policy
  directory, through the hooks its folder registers (no architecture named here);
* :mod:`.pipeline`: the stage export and the manifest writing they share, and the bundled
  model's ``.pt`` checkpoint export;
* :mod:`.manifest`: the manifest's schema and validation; :mod:`.quant_recipes`: the
  quantisation recipes; :mod:`.stages`: a stage as a program to export;
* :mod:`.onnx_export`, :mod:`.executorch_export`, :mod:`.torch_export`: one per backend;
  :mod:`.stage_process`: one stage exported in a process of its own (``--low-memory``).
"""
