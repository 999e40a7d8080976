"""The dtype of every value of a program (docs/format.md, "Dtypes"): leaves, module parameters
and module outputs are in the program's dtype; `cast` makes its `dtype` attribute's; every
other op and cut keeps its input's; a gradient is in the dtype of the value it is the gradient
of (PyTorch's rule, and burn's: its cast backward casts the gradient back to the input's dtype,
burn-autodiff-0.22.1/src/ops/tensor.rs float_cast).

Inputs of different dtypes are refused (`check_value_dtypes`): PyTorch promotes them, burn-flex
panics (dtype_support.MIXED, measured), so they are not comparable. So is a finite float
attribute beyond the largest value of the dtype the op runs in: PyTorch refuses to convert it for
some ops (clamp, leaky_relu, softplus, mask_fill; powf_scalar in half precision) and computes with
it for others, burn converts it to infinity.

Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from difftest.ops.catalog import CATALOG
from difftest.ops.dtype_support import MIXED, why_unsupported
from difftest.program.dtypes import EPS, MAX
from difftest.program.ir import (
    Apply,
    ByKind,
    OpCall,
    Program,
    ProgramError,
    value_inputs,
)
from difftest.program.recent import remembered
from difftest.program.schema_messages import shown_number

CAST_ATTR_TYPE = "dtype"  # attributes of this type name a dtype: the op's result is in it


def _cast_target(st: OpCall) -> str | None:
    spec = CATALOG.get(st.op)
    if spec is None:
        return None
    for a in spec.attrs:
        if a.type == CAST_ATTR_TYPE and a.name in st.attrs:
            return str(st.attrs[a.name])
    return None


def cast_to_own_dtype(program: Program, st: OpCall) -> str | None:
    """The input of `st` when `st` casts it to the dtype it already has (both frameworks then
    return that very tensor: rules cast-same-dtype-returns-input and to-same-dtype-returns-input),
    else None."""
    target = _cast_target(st)
    if target is None or not st.inputs:
        return None
    return st.inputs[0] if dtype_of(program, st.inputs[0]) == target else None


def value_dtypes(program: Program) -> dict[str, str]:
    """Every value's dtype by id (an op with inputs of mixed dtypes: its first input's)."""
    return dict(_value_dtypes(program))


def dtype_of(program: Program, ident: str) -> str:
    """The dtype of value `ident` (value_dtypes), or the program's for an id that is no value
    (a gradient is in its value's dtype: callers pass the value's id)."""
    return _value_dtypes(program).get(ident, program.dtype)


@remembered
def _value_dtypes(program: Program) -> dict[str, str]:
    out: dict[str, str] = {}
    for st in program.statements:
        dtype = _DTYPE.of(st)(st, out, program.dtype)
        if dtype is not None:
            out[st.id] = dtype
    return out


def _op_dtype(st: OpCall, out: dict[str, str], native: str) -> str:
    target = _cast_target(st)
    return target if target is not None else out.get(st.inputs[0], native)


# a value's dtype from the dtypes of the values before it and the program's; None: not a value
_DTYPE: ByKind[Callable[[Any, dict[str, str], str], str | None]] = ByKind(
    "value dtypes",
    leaf=lambda st, out, native: native,
    op=_op_dtype,
    cut=lambda st, out, native: out.get(st.input, native),
    backward=lambda st, out, native: None,
    module=lambda st, out, native: None,
    transform=lambda st, out, native: None,
    apply=lambda st, out, native: native,
    param=lambda st, out, native: native,
    grad=lambda st, out, native: out.get(st.of, native),
    zero_grad=lambda st, out, native: None,
    optimizer=lambda st, out, native: None,
    step=lambda st, out, native: None,
)


def coarsest(*dtypes: str) -> str:
    """The least precise of `dtypes` (the one whose rounding dominates)."""
    return max(dtypes, key=lambda d: EPS[d])


def _check_float_attrs(st: OpCall, dtype: str, index: int) -> None:
    """Refuse a finite float attribute of `st` beyond the largest finite value of `dtype`."""
    spec = CATALOG.get(st.op)
    for a in spec.attrs if spec is not None else ():
        v = st.attrs.get(a.name)
        if a.type != "float" or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if (isinstance(v, int) or math.isfinite(v)) and abs(v) > MAX[dtype]:
            raise ProgramError(f"op {st.op!r}: attribute {a.name!r} ({shown_number(v)}) is beyond the {dtype} "
                               f"range (|x| <= {MAX[dtype]:.6g}) of its input", index, st.id)


def check_value_dtypes(program: Program) -> dict[str, str]:
    """`value_dtypes`, refusing (ProgramError naming the statement) an op or module whose inputs
    are in different dtypes, and an op that does not run in its inputs' dtype."""
    dtypes = value_dtypes(program)
    for i, st in enumerate(program.statements):
        if isinstance(st, (OpCall, Apply)):
            ins = [dtypes.get(x, program.dtype) for x in value_inputs(st)]
            if isinstance(st, Apply):
                ins.append(program.dtype)  # the module's parameters
            if len(set(ins)) > 1:
                what = f"op {st.op!r}" if isinstance(st, OpCall) else f"module apply of {st.module!r}"
                raise ProgramError(f"{what} mixes dtypes {', '.join(ins)}: {MIXED}", i, st.id)
            if isinstance(st, OpCall) and ins:
                why = why_unsupported(st.op, ins[0])
                if why is not None:
                    raise ProgramError(f"op {st.op!r} does not run in {ins[0]} (its inputs' dtype): {why}", i, st.id)
                _check_float_attrs(st, ins[0], i)
    return dtypes
