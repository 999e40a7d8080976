"""burn's Wgpu reductions as cubek-reduce 0.3.1 runs them, two defects of that crate and one of
cubecl-core's vectorisation, as a
model the known-bug records of backend_bugs.py read (burn-cubecl 0.22.1 built with `wgpu` alone:
no autotune, no fusion, so every reduction along a dim is cubek's Unit routine; a whole-tensor
`sum` is burn-cubecl's `shared_sum` instead, and the other whole-tensor reductions reduce one dim
at a time, smallest first).

1. The vector size of a reduction along a dim whose stride is not 1 ("perpendicular" mode,
   cubek-reduce `launch/utils.rs::generate_vector_size`): the input and the output list their
   axes innermost first, and the vector may span the axes both lists start with, up to their
   first difference. The code multiplies the output's size over *every* position where the two
   lists agree, so a vector of 4 or 2 can span axes the output orders differently; the reader
   (`readers/perpendicular.rs`) then loads v consecutive elements from `offset / v`, truncated,
   and the writer stores lane j at `r * v + j`: elements are read twice or not at all, and
   results land on the wrong outputs. `reads_wrong` replays the addresses the kernel reads.
2. topk with k >= 2 (`topk_verdict`): the output's k slots are laid out in vector units where the
   output is written element by element (`components/global/base.rs::reduction_output_base`,
   `writers/layout.rs`), and `idle_check` compares a slot offset with the output's length, so the
   last cube's spare units write too (the result then depends on which write lands last).

3. A read along a dim of stride 1 (`parallel_vector_size`, cubecl-core 0.11.3 lib.rs
   `try_tensor_vector_size_parallel`, which cubecl-std's copies and linear views use too): the
   vector size must divide every other dim's stride, as the function's own comment says, but only
   the smallest is checked. A view whose smallest other stride belongs to a dim of one element
   (unfold to one window: [2, 3] -> [2, 1, 2], strides [3, 2, 1]) is read in vectors of 2 that the
   outer stride 3 does not fit (`copy_misvectorised`): [0, 1, 3, 4] is read as [0, 1, 2, 3].

Vector sizes: Wgpu loads 16 bytes at most (cubecl-wgpu's load width, 128 bits), so 4, 2 or 1
float32 elements, 2 or 1 float64 ones; measured on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from difftest.ops.strides import Strides, contiguous_strides
from difftest.program.ir import Shape

LOAD_BYTES = 16  # the widest load of cubecl-wgpu (load_width 128 bits)
PLANE = 32  # lavapipe's plane (subgroup) size, which sizes a cube


def _by_key(keys: Sequence[int]) -> list[int]:
    """The axes sorted by `keys`, ties in axis order (Rust's stable sort_by_key)."""
    return sorted(range(len(keys)), key=lambda a: keys[a])


def vector_sizes(item: int) -> tuple[int, ...]:
    """The vector sizes Wgpu offers an element of `item` bytes, widest first."""
    widest = max(1, LOAD_BYTES // item)
    return tuple(v for v in (16, 8, 4, 2, 1) if v <= widest)


def vector_size(shape: Shape, strides: Strides, dim: int, slots: int = 1, item: int = 4) -> tuple[str, int]:
    """The mode and vector size cubek-reduce picks to reduce `dim` (`slots`: the output's extent
    along it, k for topk; `item`: the element's bytes), with the defect of item 1 of the module's
    docstring."""
    sizes = vector_sizes(item)
    rank = len(shape)
    if strides[dim] == 1:
        return "parallel", parallel_vector_size(shape, strides, dim, item)
    stride = strides[dim]
    if stride != prod(shape[a] for a in range(rank) if strides[a] < stride):
        return "perpendicular", 1  # the axes under `dim` do not fill its stride
    out_shape = list(shape)
    out_shape[dim] = slots
    inner = _by_key(strides)
    inner = inner[: inner.index(dim)]
    outer = [a for a in _by_key(contiguous_strides(tuple(out_shape))) if a != dim]
    shared = prod(out_shape[i] for i, o in zip(inner, outer, strict=False) if i == o)  # the defect
    return "perpendicular", max(v for v in sizes if shared % v == 0 and stride % v == 0)


def parallel_vector_size(shape: Shape, strides: Strides, axis: int, item: int = 4) -> int:
    """The vector size cubecl-core 0.11.3 `try_tensor_vector_size_parallel` picks to read along
    `axis` (stride 1): the widest that divides the axis' size and the *smallest* other non-zero
    stride. A stride that is no multiple of it (3 beside 2) is not checked: defect 3."""
    others = [s for a, s in enumerate(strides) if a != axis and s != 0]
    nearest = min(others) if others else 0
    return max(v for v in vector_sizes(item) if shape[axis] % v == 0 and nearest % v == 0)


def copy_misvectorised(shape: Shape, strides: Strides, item: int = 4) -> bool:
    """Defect 3: a view read along its last dim (stride 1) in vectors that some dim of more than
    one element does not step by whole vectors, so the reader's `offset / v` truncates and loads
    the wrong elements (cubecl-std's linear views: into_contiguous, what elementwise kernels read)."""
    if len(shape) < 2 or strides[-1] != 1:
        return False
    v = parallel_vector_size(shape, strides, len(shape) - 1, item)
    return v > 1 and any(n > 1 and s % v != 0 for n, s in zip(shape[:-1], strides[:-1], strict=True))


def _coords(index: int, shape: Sequence[int], strides: Sequence[int]) -> list[int]:
    return [(index // strides[a]) % shape[a] for a in range(len(shape))]


def _rows_read(shape: Shape, strides: Strides, dim: int, slots: int = 1, item: int = 4) -> list[tuple[int, ...]]:
    """The input addresses the kernel reduces into each output element (output order; for
    top-k, into each output row of k slots)."""
    mode, v = vector_size(shape, strides, dim, slots, item)
    if mode == "perpendicular" and slots * v > 32:
        v = 1
    out_shape = list(shape)
    out_shape[dim] = 1
    out_strides = contiguous_strides(tuple(out_shape))
    rows: list[tuple[int, ...]] = [()] * prod(out_shape)
    length = shape[dim]
    for r in range(len(rows) // (v if mode == "perpendicular" else 1)):
        if mode == "parallel":
            c = _coords(r, out_shape, out_strides)
            base = sum(c[a] * strides[a] for a in range(len(shape)))
            rows[r] = tuple(base + i * strides[dim] for i in range(length))
            continue
        first = r * v
        c = _coords(first, out_shape, out_strides)
        base = sum(c[a] * strides[a] for a in range(len(shape))) // v  # truncated: the defect shows here
        for j in range(v):
            rows[first + j] = tuple((base + i * (strides[dim] // v)) * v + j for i in range(length))
    return rows


def _rows_meant(shape: Shape, strides: Strides, dim: int) -> list[tuple[int, ...]]:
    out_shape = list(shape)
    out_shape[dim] = 1
    out_strides = contiguous_strides(tuple(out_shape))
    rows = []
    for o in range(prod(out_shape)):
        c = _coords(o, out_shape, out_strides)
        base = sum(c[a] * strides[a] for a in range(len(shape)))
        rows.append(tuple(base + i * strides[dim] for i in range(shape[dim])))
    return rows


def reads_wrong(shape: Shape, strides: Strides, dim: int, slots: int = 1, item: int = 4) -> bool:
    """Whether reducing `dim` of a tensor of this shape and these strides (burn's view of it on
    Wgpu) reduces another set of elements than the output element's own into some output
    (`slots`: top-k's k, which changes the vector size, not what a row reads)."""
    if not shape or prod(shape) == 0:
        return False
    read, meant = _rows_read(shape, strides, dim, slots, item), _rows_meant(shape, strides, dim)
    return any(sorted(a) != sorted(b) for a, b in zip(read, meant, strict=True))


def first_axis(shape: Shape) -> int:
    """The dim burn-cubecl's whole-tensor reduce() reduces first (the smallest, first of equals);
    the later passes read that pass's contiguous output."""
    return _by_key(shape)[0]


def full_reduce_wrong(shape: Shape, strides: Strides, item: int = 4) -> bool:
    """Whether a whole-tensor mean, max, min or prod of this layout reads some element twice or
    not at all (its first pass: elements only moved between rows leave the result right)."""
    if not shape or prod(shape) == 0:
        return False
    dim = first_axis(shape)
    read = sorted(a for row in _rows_read(shape, strides, dim, item=item) for a in row)
    return read != sorted(a for row in _rows_meant(shape, strides, dim) for a in row)


def topk_verdict(shape: Shape, strides: Strides, dim: int, k: int, item: int = 4) -> str:
    """What cubek-reduce's top-k along `dim` writes: "right", "wrong" (some output holds another
    element's result, or none), or "race" (written by a right and a wrong unit: either may land
    last). Both defects of the module's docstring."""
    mode, v = vector_size(shape, strides, dim, slots=k, item=item)
    if k * v > 32 or k * k > 1024:
        v = 1
    rank = len(shape)
    out_shape = list(shape)
    out_shape[dim] = k
    out_strides = contiguous_strides(tuple(out_shape))
    out_vector = 1
    if mode == "perpendicular" and v > 1:
        following = out_shape[dim + 1] if dim + 1 < rank else 1
        out_vector = v if following % v == 0 else 1
    rows, length, n_out = prod(shape) // max(shape[dim], 1), shape[dim], prod(out_shape)
    truth: dict[int, tuple[int, tuple[int, ...]]] = {}
    for p in range(n_out):
        c = _coords(p, out_shape, out_strides)
        slot, c[dim] = c[dim], 0
        base = sum(c[a] * strides[a] for a in range(rank))
        truth[p] = (slot, tuple(sorted(base + i * strides[dim] for i in range(length))))
    units = rows // out_vector if mode == "parallel" else rows // v
    cubes = 1
    while cubes * 2 <= 8 and cubes * 2 <= max(1, units // PLANE):
        cubes *= 2
    launched = -(-units // (PLANE * cubes)) * PLANE * cubes
    idle_bound = n_out if mode == "parallel" else n_out // v
    writes: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
    step = out_strides[dim] if mode == "parallel" else out_strides[dim] // out_vector
    for r in range(launched):
        w = (r // step) * step * k + r % step if k > 1 else r
        if w >= idle_bound:
            continue
        if mode == "parallel":
            c = _coords(w, out_shape, out_strides)
            base = sum(c[a] * strides[a] for a in range(rank))
            read = tuple(sorted(base + i for i in range(length)))
            for s in range(k):
                writes.setdefault(s * out_strides[dim] + w if k > 1 else w, []).append((s, read))
            continue
        c = _coords(w * v, out_shape, out_strides)
        base = sum(c[a] * strides[a] for a in range(rank)) // v
        for j in range(v):
            read = tuple(sorted((base + i * (strides[dim] // v)) * v + j for i in range(length)))
            for s in range(k):
                if k == 1:
                    pos = w * v + j
                elif out_vector == v:
                    pos = (s * step + w) * v + j
                else:
                    pos = s * step + (w * v + j)
                if pos < n_out:
                    writes.setdefault(pos, []).append((s, read))
    verdict = "right"
    for p, meant in truth.items():
        written = writes.get(p, [])
        good = [w == meant for w in written]
        if not any(good):
            return "wrong"
        if not all(good):
            verdict = "race"
    return verdict
