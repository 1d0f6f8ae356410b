"""torch -> ONNX / ExecuTorch programs plus manifest.json."""
