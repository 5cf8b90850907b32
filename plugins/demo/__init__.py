"""The ``demo`` plugin: ``trm demo`` (a local page that solves a puzzle step by step) and
``trm demo --static`` (the same page running the ONNX solver in the browser)."""
