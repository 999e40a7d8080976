"""The float32 precision of a burn backend's elementwise transcendental ops, against PyTorch.

    python benchmarks/backend_precision.py [--backend wgpu] [--ops exp,log,...] [--json FILE]
                                           [--write difftest/divergences/precision-wgpu-f32.json]

For each catalog op of one input whose tolerance class is transcendental (without attributes, or
along a dim: the softmaxes, on rows (x, 0); of two inputs: atan2, hypot, on pairs of a coarser
grid), one program: a leaf
holding a grid of the op's domain (a dense linear part, magnitudes from subnormal to the domain's
edge on a log scale, 0 and -0.0; every value the op's domain accepts, as the generator draws
them), the op, its sum and a backward. It runs on the burn backend and in PyTorch (float32, and
float64 from the same float32 inputs, the reference). For the value and the gradient, per op:
the largest error in float32 ulps of the reference (of elements whose reference is at least
2^-100 in size; below, a ulp is meaningless) and the largest absolute error, each with the input
where it occurs, for burn and for PyTorch's own float32 run.

`--write`: the table a known-precision record reads (difftest/divergences/measured_precision.py):
per op, for the value and the gradient, burn's largest absolute error in each binade of the
reference (|r| in [2^k, 2^(k+1)); a zero reference is binade -1000).

A backend whose errors exceed PyTorch's by far at some ops (Wgpu on lavapipe: the Vulkan driver's
GLSL.std.450 functions) needs its precision declared (docs/backends.md); this script is the
measurement the declaration cites. Measurements only: nothing here asserts a figure.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from difftest.exec.burn_worker import BurnWorker
from difftest.exec.torch_exec import run_torch
from difftest.ops import tolerance as T
from difftest.ops.catalog import OPS
from difftest.ops.domains import MAX_MAGNITUDE
from difftest.ops.spec import OpSpec
from difftest.program.ir import Program
from difftest.program.observation import Observation
from difftest.program.statements import Backward, Grad, Leaf, OpCall

TINY_REFERENCE = 2.0**-100
ZERO_BINADE = -1000


@dataclass
class Worst:
    ulps: float = 0.0  # the largest error in float32 ulps of the reference
    ulps_at: float = math.nan  # the input where it occurs
    abs: float = 0.0  # the largest absolute error
    abs_at: float = math.nan


@dataclass
class OpPrecision:
    op: str
    elements: int
    value: dict[str, Worst]  # "burn", "torch": the errors of each framework's float32 run
    grad: dict[str, Worst]
    # burn's largest absolute error per binade of the reference: [[k, error], ...], for "value"
    # and "grad"
    binades: dict[str, list[list[float]]]


def grid(spec: OpSpec) -> list[float]:
    """The op's domain, as float32 values the domain accepts one by one."""
    lo, hi = spec.domain.leaf_ranges[0]
    lo, hi = max(lo * 4, -MAX_MAGNITUDE), min(hi * 4, MAX_MAGNITUDE)
    mags = np.logspace(-44, math.log10(MAX_MAGNITUDE), 4000)
    xs = np.concatenate([np.linspace(-10.0, 10.0, 20001), np.linspace(lo, hi, 10001), mags, -mags,
                         [0.0, -0.0, 1.0, -1.0, MAX_MAGNITUDE, -MAX_MAGNITUDE]]).astype(np.float32)
    xs = np.unique(xs)
    keep = [float(x) for x in xs if spec.domain.accepts([torch.tensor([float(x)], dtype=torch.float64)], {})]
    return sorted(set(keep) | ({-0.0} if 0.0 in keep else set()))


def pair_grid(spec: OpSpec) -> list[tuple[float, float]]:
    """A binary op's domain: the pairs of a coarser grid (linear over [-10, 10], magnitudes from
    1e-30 to the domain's edge on a log scale, 0) that its domain accepts."""
    mags = np.logspace(-30, math.log10(MAX_MAGNITUDE), 40)
    base = np.unique(np.concatenate([np.linspace(-10.0, 10.0, 161), mags, -mags, [0.0]]).astype(np.float32))
    a, b = np.meshgrid(base.astype(np.float64), base.astype(np.float64), indexing="ij")
    xs, ys = torch.tensor(a.ravel()), torch.tensor(b.ravel())
    keep = [i for i in range(len(xs)) if spec.domain.accepts([xs[i : i + 1], ys[i : i + 1]], {})]
    return [(float(xs[i]), float(ys[i])) for i in keep]


def programs_of(spec: OpSpec, xs: list[float]) -> list[tuple[Program, list[float]]]:
    """The op over the grid, each program with the grid value each of its output elements stands
    for. An op along a dim (the softmaxes) runs on rows (x, 0) along dim 1, where every output
    depends on x, and on rows (x) of one element, where its result is exact (0 or 1). A binary
    op runs on the pairs of `pair_grid` (each element stands for its first input; the gradient's
    elements are both inputs')."""
    if spec.arity == 2:
        pairs = pair_grid(spec)
        first, second = tuple(x for x, _ in pairs), tuple(y for _, y in pairs)
        n = (len(pairs),)
        return [(Program((Leaf("x", n, first, "autodiff", True), Leaf("x2", n, second, "autodiff", True),
                          OpCall("y", spec.name, ("x", "x2")), OpCall("s", "sum", ("y",)), Backward("b", "s"),
                          Grad("g", "b", "x"), Grad("g2", "b", "x2"))), list(first))]
    if not spec.attrs:
        return [(_program(Leaf("x", (len(xs),), tuple(xs), "autodiff", True), OpCall("y", spec.name, ("x",))), xs)]
    rows = Leaf("x", (len(xs), 2), tuple(v for x in xs for v in (x, 0.0)), "autodiff", True)
    single = Leaf("x", (len(xs), 1), tuple(xs), "autodiff", True)
    call = OpCall("y", spec.name, ("x",), {"dim": 1})
    return [(_program(rows, call), [x for x in xs for _ in (0, 1)]), (_program(single, call), xs)]


def _program(leaf: Leaf, call: OpCall) -> Program:
    return Program((leaf, call, OpCall("s", "sum", ("y",)), Backward("b", "s"), Grad("g", "b", "x")))


def _data(obs: Observation, ident: str) -> np.ndarray:
    v = obs.value(ident)
    if v is None:
        raise RuntimeError(f"{obs.framework}: no value {ident} ({obs.error})")
    return np.asarray(v.value.data, dtype=np.float64)


def worst(xs: np.ndarray, ref: np.ndarray, got: np.ndarray) -> Worst:
    err = np.abs(got - ref)
    err[~np.isfinite(err)] = math.inf
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    ulps = np.where(np.abs(ref) >= TINY_REFERENCE, err / ulp, 0.0)
    i, j = int(np.argmax(ulps)), int(np.argmax(err))
    return Worst(float(ulps[i]), float(xs[i]), float(err[j]), float(xs[j]))


def binade_errors(ref: np.ndarray, got: np.ndarray) -> list[list[float]]:
    """[[k, largest |got - ref| over elements with |ref| in [2^k, 2^(k+1))], ...] (k = -1000 for a
    zero reference); an element with a non-finite error is left out of the table, so the record
    never explains one."""
    err = np.abs(got - ref)
    worst_of: dict[int, float] = {}
    for r, e in zip(ref, err, strict=True):
        if not (math.isfinite(e) and math.isfinite(r)):
            continue
        k = ZERO_BINADE if r == 0 else math.floor(math.log2(abs(r)))
        worst_of[k] = max(worst_of.get(k, 0.0), float(e))
    return [[k, worst_of[k]] for k in sorted(worst_of)]


def measure(spec: OpSpec, worker: BurnWorker) -> OpPrecision:
    x: list[float] = []
    data: dict[str, dict[str, list[float]]] = {i: {"burn": [], "torch": [], "ref": []} for i in ("y", "g")}
    programs = programs_of(spec, grid(spec) if spec.arity == 1 else [])
    for program, at in programs:
        burn = worker.run(program)
        if burn.error is not None:
            raise RuntimeError(f"{spec.name} on burn: {burn.error.kind}: {burn.error.message}")
        runs = {"burn": burn, "torch": run_torch(program, burn_inference=frozenset()),
                "ref": run_torch(program, "float64", burn_inference=frozenset())}
        x.extend(at)
        for ident, parts in data.items():
            for who, obs in runs.items():
                parts[who].extend(_data(obs, ident))
                if ident == "g" and spec.arity == 2:  # the second input's gradient
                    parts[who].extend(_data(obs, "g2"))
    xa = np.asarray(x, dtype=np.float64)
    out: dict[str, dict[str, Worst]] = {}
    binades: dict[str, list[list[float]]] = {}
    for ident, part in (("y", "value"), ("g", "grad")):
        ref, got = np.asarray(data[ident]["ref"]), np.asarray(data[ident]["burn"])
        if len(ref) != len(xa):  # a gradient has the leaf's shape (of each input): one element per grid value
            xs_g = np.asarray([v for program, at in programs for st in program.statements
                               if isinstance(st, Leaf) for v in st.data], dtype=np.float64)
        else:
            xs_g = xa
        out[ident] = {"burn": worst(xs_g, ref, got), "torch": worst(xs_g, ref, np.asarray(data[ident]["torch"]))}
        binades[part] = binade_errors(ref, got)
    return OpPrecision(spec.name, len(xa), out["y"], out["g"], binades)


def write_table(path: str, backend: str, version: dict[str, object], results: list[OpPrecision]) -> None:
    """The per-binade table as JSON, one line per op and part (binade: error, 3 digits rounded up)."""
    head = {"measured_by": "benchmarks/backend_precision.py", "backend": backend,
            "burn": version.get("burn"), "dtype": "float32"}
    lines = [json.dumps(head)[:-1] + ', "ops": {']
    rows = []
    for r in results:
        parts = []
        for part, table in r.binades.items():
            cells = ", ".join(f'"{int(k)}": {_up(e)}' for k, e in table)
            parts.append(f'  "{part}": {{{cells}}}')
        rows.append(f' "{r.op}": {{\n' + ",\n".join(parts) + "}")
    lines.append(",\n".join(rows))
    lines.append("}}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # well-formed
    with open(path, "w") as fh:
        fh.write(text)


def _up(e: float) -> str:
    """`e` with 3 significant digits, rounded up (a bound must not shrink in the writing)."""
    if e == 0:
        return "0"
    text = f"{e:.2e}"
    return text if float(text) >= e else f"{float(text) + 10 ** (math.floor(math.log10(e)) - 2):.2e}"


def transcendental_ops() -> list[OpSpec]:
    """The catalog's transcendental ops of one input without attributes, those along a dim, and
    those of two inputs without attributes (atan2, hypot)."""
    return [s for s in OPS if s.tolerance is T.TRANSCENDENTAL
            and ((s.arity == 1 and (not s.attrs or tuple(a.name for a in s.attrs) == ("dim",)))
                 or (s.arity == 2 and not s.attrs))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="wgpu")
    ap.add_argument("--ops", default=None, help="comma-separated (default: every transcendental unary op)")
    ap.add_argument("--json", default=None, help="also write the figures as JSON")
    ap.add_argument("--write", default=None, help="write the per-binade error table a precision record reads")
    args = ap.parse_args()
    specs = transcendental_ops()
    if args.ops:
        wanted = set(args.ops.split(","))
        specs = [s for s in specs if s.name in wanted]
    worker = BurnWorker(timeout=300, backend=args.backend)
    try:
        results = [measure(s, worker) for s in specs]
        version = worker.version()
    finally:
        worker.close()
    table = Table(title=f"float32 errors against float64, {args.backend} (burn) and PyTorch")
    for col in ("op", "elements", "value ulps burn / torch (at x)", "value abs burn / torch (at x)",
                "grad ulps burn / torch (at x)", "grad abs burn / torch (at x)"):
        table.add_column(col)
    for r in results:
        cells = []
        for part in (r.value, r.grad):
            b, t = part["burn"], part["torch"]
            cells.append(f"{b.ulps:.3g} / {t.ulps:.3g} ({b.ulps_at:.3g})")
            cells.append(f"{b.abs:.3g} / {t.abs:.3g} ({b.abs_at:.3g})")
        table.add_row(r.op, str(r.elements), *cells)
    Console(width=200).print(table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in results], fh, indent=1)
    if args.write:
        write_table(args.write, args.backend, version, results)


if __name__ == "__main__":
    main()
