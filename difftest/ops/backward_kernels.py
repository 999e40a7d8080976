"""How burn computes an op's input gradient with the forward of another catalog op.

burn-autodiff's backward of some ops hands the cotangent to a backend kernel that is also
another op's forward: `select`'s gradient is `select_assign` (index add) of the cotangent into
zeros, `gather`'s is `scatter` (add), the `embedding` table's is the backend's
`embedding_backward`, which burn-flex computes as that same index add. A fault in such a kernel
shows in the forward op and in every backward built on it, one bug; the localiser runs the
declared forward on the cotangent and names that op where it is wrong (findings/backward_as.py).

Each is a Composition (program/parts.py) of the call, input 0 standing for the cotangent (of the
op's result's shape), computing the gradient of the op's input 0, and is an op's catalog entry's
`backward_kernel`. Cited to burn 0.22.1's sources; tests/differential/test_backward_kernels.py
checks each against burn. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from difftest.program.parts import Call, Part


def _zeros(shape: list[int]) -> Part:
    return Part("const", (), {"shape": shape, "data": [0.0] * math.prod(shape)})


def select(call: Call) -> tuple[Part, ...] | None:
    # burn-autodiff ops/tensor.rs float_select, Select::backward: float_select_assign(zeros of the
    # input's shape, dim, indices, grad, IndexingUpdateOp::Add)
    shape = list(call.shapes[0])
    return (_zeros(shape), Part("select_assign", ("p0", 0),
                                {"dim": call.attrs["dim"], "indices": list(call.attrs["indices"])}))


def gather(call: Call) -> tuple[Part, ...] | None:
    # burn-autodiff ops/tensor.rs float_gather, Gather::backward: float_scatter(dim, zeros of the
    # input's shape, indices, grad, IndexingUpdateOp::Add)
    shape = list(call.shapes[0])
    return (_zeros(shape), Part("scatter", ("p0", 0), {"dim": call.attrs["dim"], "indices": call.attrs["indices"]}))


def _sources(x: tuple[float, ...], shape: list[int], dim: int, better: str) -> list[int]:
    """burn's source index of each position of a running extreme along `dim`: where the running
    max (min) equals the input, that position, else 0, then a running max of those (the last
    position holding the extreme so far, ties to the later one)."""
    size, inner = shape[dim], math.prod(shape[dim + 1:])
    src = [0] * len(x)
    for o in range(math.prod(shape[:dim])):
        for i in range(inner):
            run, last = math.nan, 0
            for k in range(size):
                at = (o * size + k) * inner + i
                v = x[at]
                # burn-flex cummax_f32 / cummin_f32: `if val.is_nan() || val > acc { val } else { acc }`
                if k == 0 or math.isnan(v) or (v > run if better == "max" else v < run):
                    run = v
                last = k if run == v else last
                src[at] = last
    return src


def _cumulative(better: str) -> Callable[[Call], tuple[Part, ...] | None]:
    def kernel(call: Call) -> tuple[Part, ...] | None:
        # burn-autodiff ops/tensor.rs float_cummax / float_cummin, CumMax / CumMin::backward:
        # float_scatter(dim, zeros of the input's shape, source indices, grad, IndexingUpdateOp::Add),
        # the source indices computed from the input (`_sources`)
        if call.data is None or call.data[0] is None:
            return None
        shape, dim = list(call.shapes[0]), int(call.attrs["dim"])
        indices = {"shape": shape, "data": _sources(tuple(call.data[0]), shape, dim, better)}
        return (_zeros(shape), Part("scatter", ("p0", 0), {"dim": dim, "indices": indices}))

    return kernel


cummax = _cumulative("max")
cummin = _cumulative("min")


def embedding(call: Call) -> tuple[Part, ...] | None:
    # burn-autodiff ops/module.rs embedding -> B::embedding_backward; burn-flex ops/module.rs
    # embedding_backward: the indices [B, L] and the cotangent flattened to [B * L] and
    # [B * L, d_model], float_select_assign(zeros [n_embeddings, d_model], 0, indices, grad, Add)
    rows, d_model = call.shapes[0]
    indices = call.attrs["indices"]
    n = math.prod(indices["shape"])
    return (_zeros([rows, d_model]), Part("reshape", (0,), {"shape": [n, d_model]}),
            Part("select_assign", ("p0", "p1"), {"dim": 0, "indices": [int(v) for v in indices["data"]]}))

