"""The program layer: IR, JSON format and schema, shapes, validation, observations.

Torch-free: `import difftest.program` and the shape checker (`difftest.ops.validate`)
never import PyTorch (tests/unit/test_layers.py checks it)."""
