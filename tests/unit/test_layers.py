"""The layers of difftest/: what may be imported without PyTorch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHECK_SHAPES = textwrap.dedent(
    """
    import sys

    import difftest.program
    from difftest.program.jsonio import program_from_dict
    from difftest.program.validate import check_program, infer_shapes

    doc = {
        "format": "difftest-program",
        "version": 1,
        "statements": [
            {"id": "a", "kind": "leaf", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6], "device": "autodiff",
             "require_grad": True},
            {"id": "b", "kind": "leaf", "shape": [3, 1], "data": [1, 2, 3], "device": "plain",
             "require_grad": False},
            {"id": "m", "kind": "op", "op": "matmul", "inputs": ["a", "b"]},
            {"id": "r", "kind": "op", "op": "repeat_dim", "inputs": ["m"], "attrs": {"dim": 1, "times": 3}},
            {"id": "g", "kind": "op", "op": "gather", "inputs": ["r"],
             "attrs": {"dim": 1, "indices": {"shape": [2, 1], "data": [2, 0]}}},
            {"id": "s", "kind": "op", "op": "sum", "inputs": ["g"]},
            {"id": "bw", "kind": "backward", "input": "s"},
        ],
    }
    program = program_from_dict(doc)
    shapes = check_program(program)
    assert shapes == infer_shapes(program) == {"a": (2, 3), "b": (3, 1), "m": (2, 1), "r": (2, 3), "g": (2, 1),
                                               "s": (1,)}, shapes
    {extra}
    loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    assert "torch" not in sys.modules, loaded[:10]
    print("ok")
    """
)


def _run(extra: str = "") -> None:
    code = CHECK_SHAPES.replace("{extra}", extra)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_program_layer_and_shape_checks_do_not_import_torch() -> None:
    _run()


def test_catalog_and_reproducers_do_not_import_torch() -> None:
    """The catalog's entries (templates, rules, domains) and the reproducers that spell them."""
    _run(
        "import difftest.ops.catalog\n"
        "from difftest.findings.reproducers import rust_test, torch_script\n"
        "assert 'torch.matmul(a, b)' in torch_script(program)\n"
        "assert 'a.clone().matmul(b.clone())' in rust_test(program, 't')"
    )
