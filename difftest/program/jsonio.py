"""Program <-> JSON, with exact round-trips in the program's dtype (NaN, +-Inf and -0.0
included; float64 data are written with full precision: Python's shortest repr is exact)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from difftest.program.dtypes import DEFAULT_DTYPE, FLOAT_DTYPES, to_f32
from difftest.program.ir import (
    FORMAT_NAME,
    FORMAT_VERSIONS,
    KIND_NAMES,
    Apply,
    Backward,
    ByKind,
    Cut,
    Grad,
    InlineTensor,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Param,
    Program,
    ProgramError,
    Statement,
    Step,
    Transform,
    ZeroGrad,
)
from difftest.program.module_schema import overlay
from difftest.program.modules import ModuleError, module_kind
from difftest.program.schema_messages import cut, schema_message, shown, shown_number

SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def encode_float(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float(x)


def decode_float(x: Any, where: str = "data") -> float:
    if isinstance(x, bool):
        raise ValueError(f"{where}: boolean {x!r} is not a float")
    if isinstance(x, float):
        return x
    if isinstance(x, int):
        try:
            return float(x)
        except OverflowError:
            raise ValueError(f"{where}: {shown_number(x)} is beyond the float64 range") from None
    if isinstance(x, str) and x in SPECIAL_FLOATS:
        return SPECIAL_FLOATS[x]
    raise ValueError(f"{where}: {x!r} is not a float (numbers, 'NaN', 'Infinity', '-Infinity')")


def encode_floats(xs: Any) -> list[float | str]:
    # a finite f is its own encoding (f - f is 0.0 exactly when f is finite): only the others
    # go through encode_float (programs and observations carry hundreds of elements)
    return [f if (f := float(x)) - f == 0.0 else encode_float(f) for x in xs]


def decode_floats(xs: list[Any], where: str = "data") -> tuple[float, ...]:
    # a float is its own decoding; anything else (and an error's message) is decode_float's
    return tuple(x if type(x) is float else decode_float(x, f"{where}[{i}]") for i, x in enumerate(xs))


def statement_to_dict(st: Statement) -> dict[str, Any]:
    return _CODECS.of(st).write(st)


def _tensor_to_dict(t: InlineTensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "data": encode_floats(t.data)}


def _tensor_from_dict(raw: dict[str, Any], where: str, dtype: str) -> InlineTensor:
    return InlineTensor(tuple(int(d) for d in raw["shape"]), _data(raw["data"], dtype, f"{where}.data"))


def _data(raw: list[Any], dtype: str, where: str = "data") -> tuple[float, ...]:
    """Float data of a program in `dtype`: float32 data are rounded to float32 (as format
    versions 1 and 2 always did); other dtypes' are kept as written (ir.check_structure
    rejects a value the dtype cannot hold, naming the statement)."""
    xs = decode_floats(raw, where)
    return tuple(to_f32(x) for x in xs) if dtype == "float32" else xs


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float):
        return encode_float(v)
    return v


def program_to_dict(program: Program, name: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"format": FORMAT_NAME, "version": program.format_version}
    if name:
        d["name"] = name
    if program.dtype != DEFAULT_DTYPE:
        d["dtype"] = program.dtype
    if program.checkpointing != "disabled":
        d["gradient_checkpointing"] = program.checkpointing
    d["statements"] = [statement_to_dict(s) for s in program.statements]
    return d


def _bare_constant(name: str) -> float:
    raise ValueError(f"bare {name} is not JSON: write it as the string \"{name}\" (docs/format.md)")


def _finite_float(text: str) -> float:
    x = float(text)
    if math.isinf(x):
        raise ValueError(f"{text} is beyond the float64 range")
    return x


# Deeper than any document difftest reads or writes (a program nests about 6 levels): a deeper one
# would exhaust the recursion of the parser or of what walks the document after it.
MAX_DEPTH = 100


def loads(text: str) -> Any:
    """A program or case document from JSON text, strictly: bare NaN/Infinity (which Python's json
    accepts, and no other reader does) and numbers that overflow a float64 are errors, not silent
    non-finite values; non-finite data is written as the strings the format defines. A document
    nested deeper than MAX_DEPTH is a ValueError like any other malformed one."""
    return _bounded(text, lambda t: json.loads(t, parse_constant=_bare_constant, parse_float=_finite_float))


def loads_lenient(text: str) -> Any:
    """JSON text as Python's json reads it (bare NaN/Infinity accepted: difftest's summaries and
    reports may hold them), nested at most MAX_DEPTH deep (a ValueError otherwise)."""
    return _bounded(text, json.loads)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _bounded(text: str, parse: Callable[[str], Any]) -> Any:
    """`parse(text)` unless arrays and objects in `text` nest deeper than MAX_DEPTH (counted on
    the text, strings left out, before parsing: fast on the long flat lists programs hold)."""
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    try:
        return parse(text)
    except RecursionError:  # not past MAX_DEPTH, but parsed from deep in the stack
        raise ValueError(f"nested too deeply to parse here ({MAX_DEPTH} levels at most)") from None


def dumps(obj: Any, indent: int | None = None) -> str:
    """JSON text; refuses bare NaN/Infinity (they must have been encoded as strings)."""
    return json.dumps(obj, allow_nan=False, indent=indent)


def program_to_json(program: Program, indent: int | None = None) -> str:
    return dumps(program_to_dict(program), indent=indent)


@cache
def schema(version: int = FORMAT_VERSIONS[-1]) -> dict[str, Any]:
    text = resources.files("difftest.program").joinpath(f"schema/program-v{version}.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return overlay(loaded)  # module kinds and param names from difftest/program/modules/


def _is_integer(checker: Any, instance: Any) -> bool:
    """JSON Schema counts 2.0 as an integer; the program format (and difftest-burn) do not: a
    shape or an integer attribute is written without a fraction."""
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def _validator(version: int) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema(version))
    strict = jsonschema.validators.extend(cls, type_checker=cls.TYPE_CHECKER.redefine("integer", _is_integer))
    return strict(schema(version))


def validate_dict(doc: Any) -> None:
    """Raise ProgramError naming the statement for the first schema violation (against the
    schema of the document's own format version)."""
    version = doc.get("version") if isinstance(doc, dict) else None
    # an int, not a bool or a float that compares equal to one (true == 1 in Python)
    known = type(version) is int and version in FORMAT_VERSIONS
    if isinstance(doc, dict) and doc.get("format") == FORMAT_NAME and not known:
        raise ProgramError(f"unsupported format version {version!r} (this difftest reads "
                           f"{', '.join(map(str, FORMAT_VERSIONS))})")
    errors = sorted(_validator(version if known else FORMAT_VERSIONS[-1]).iter_errors(doc),
                    key=lambda e: list(e.absolute_path))
    if not errors:
        return
    err = errors[0]
    kind_errors = [e for e in errors if e.validator == "enum" and list(e.absolute_path)[-1:] == ["kind"]]
    if kind_errors and list(kind_errors[0].absolute_path)[:2] == list(err.absolute_path)[:2]:
        k = kind_errors[0]
        at = k.absolute_path[1] if len(k.absolute_path) >= 3 else None
        raw = doc["statements"][at] if isinstance(at, int) else None
        raw_id = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
        raise ProgramError(f"unknown statement kind {shown(k.instance)} in format version {version} (known: "
                           f"{', '.join(map(str, k.validator_value))})", at if isinstance(at, int) else None,
                           raw_id)
    path = list(err.absolute_path)
    index: int | None = None
    ident: str | None = None
    if len(path) >= 2 and path[0] == "statements" and isinstance(path[1], int):
        index = path[1]
        st = doc["statements"][index]
        if isinstance(st, dict) and isinstance(st.get("id"), str):
            ident = st["id"]
        err = _best_branch_error(err)
    where = cut("/".join(str(p) for p in err.absolute_path))
    raise ProgramError(f"{schema_message(err)} (at /{where})", index, ident)


def _best_branch_error(err: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For a oneOf over statement kinds, report the branch that matches the statement's kind
    (the branch without a `kind` const error), else the first error that is not about `kind`."""
    if err.validator != "oneOf" or not isinstance(err.instance, dict):
        return err
    subs = list(err.context or [])
    branches: dict[Any, list[jsonschema.ValidationError]] = {}
    for sub in subs:
        path = list(sub.relative_schema_path)
        branches.setdefault(path[0] if path else None, []).append(sub)
    for errors in branches.values():
        if not any(e.validator == "const" and list(e.relative_schema_path)[-3:] == ["properties", "kind", "const"]
                   for e in errors):
            return errors[0]
    for sub in subs:
        if sub.validator not in ("const",):
            return sub
    return err


def program_from_dict(doc: Any, *, validate: bool = True) -> Program:
    if validate:
        validate_dict(doc)
    statements: list[Statement] = []
    dtype = doc.get("dtype", DEFAULT_DTYPE)
    if dtype not in FLOAT_DTYPES:
        raise ProgramError(f"unknown program dtype {dtype!r} (known: {', '.join(FLOAT_DTYPES)})")
    for i, raw in enumerate(doc["statements"]):
        ident = raw.get("id")
        try:
            statements.append(_statement_from_dict(raw, dtype))
        except (KeyError, TypeError, ValueError) as e:
            raise ProgramError(str(e), i, ident) from e
    return Program(tuple(statements), dtype, doc.get("gradient_checkpointing", "disabled"))


def _statement_from_dict(raw: dict[str, Any], dtype: str = DEFAULT_DTYPE) -> Statement:
    kind = KIND_NAMES.get(raw["kind"]) if isinstance(raw["kind"], str) else None
    if kind is None:
        raise ValueError(f"unknown statement kind {raw['kind']!r}")
    return _CODECS.handlers[kind].read(raw, dtype)


def _module_to_dict(st: Module) -> dict[str, Any]:
    """A module statement: its kind's attributes, then its inline tensors (an absent optional
    one written as null), in the kind's declared order (difftest/program/modules/)."""
    spec = module_kind(st.module)
    d: dict[str, Any] = {"id": st.id, "kind": "module", "module": st.module}
    for a in spec.attrs:
        x = st.attr(a.name)
        d[a.name] = encode_float(x) if a.kind is float else (list(x) if a.kind is list and isinstance(x, list) else x)
    for t in spec.tensors:
        x = st.tensor(t.name)
        d[t.name] = _tensor_to_dict(x) if x is not None else None
    return d


def _module_from_dict(raw: dict[str, Any], dtype: str) -> Module:
    try:
        spec = module_kind(raw["module"])
    except ModuleError as e:
        raise ValueError(str(e)) from None
    attrs: dict[str, Any] = {}
    for a in spec.attrs:
        if a.name not in raw:
            raise ValueError(f"a {spec.name} module needs {a.name!r}")
        x = raw[a.name]
        if a.kind is list and isinstance(x, list):
            x = list(x)
        attrs[a.name] = decode_float(x, a.name) if a.kind is float else x
    tensors = {t.name: _tensor_from_dict(raw[t.name], t.name, dtype) for t in spec.tensors
               if raw.get(t.name) is not None}
    buffers = {k: v for k, v in tensors.items() if k not in ("weight", "bias")}
    return Module(id=raw["id"], module=spec.name, weight=tensors.get("weight"), bias=tensors.get("bias"),
                  p=attrs.pop("p", 0.0), attrs=attrs, buffers=buffers)


def _decode_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, str) and v in SPECIAL_FLOATS:
            out[k] = SPECIAL_FLOATS[v]
        else:
            out[k] = v
    return out


@dataclass(frozen=True)
class _Codec:
    """A statement kind's JSON form: written from the statement, read in the program's dtype."""

    write: Callable[[Any], dict[str, Any]]
    read: Callable[[dict[str, Any], str], Statement]


def _with_region(d: dict[str, Any], st: OpCall | Cut) -> dict[str, Any]:
    if st.region != "grad":
        d["region"] = st.region
    return d


def _op_to_dict(st: OpCall) -> dict[str, Any]:
    d: dict[str, Any] = {"id": st.id, "kind": "op", "op": st.op, "inputs": list(st.inputs)}
    if st.attrs:
        d["attrs"] = _jsonable(st.attrs)
    return _with_region(d, st)


def _backward_to_dict(st: Backward) -> dict[str, Any]:
    d: dict[str, Any] = {"id": st.id, "kind": "backward", "input": st.input}
    if st.retain_graph:
        d["retain_graph"] = True
    return d


def _plain(kind: type[Statement], *fields: str) -> _Codec:
    """A kind whose fields (after `id`) are names of other statements or words, written as is."""
    name: str = kind.kind
    return _Codec(lambda st: {"id": st.id, "kind": name, **{f: getattr(st, f) for f in fields}},
                  lambda raw, dtype: kind(id=raw["id"], **{f: raw[f] for f in fields}))


_CODECS: ByKind[_Codec] = ByKind(
    "JSON",
    leaf=_Codec(
        lambda st: {"id": st.id, "kind": "leaf", "shape": list(st.shape), "data": encode_floats(st.data),
                    "device": st.device, "require_grad": st.require_grad},
        lambda raw, dtype: Leaf(id=raw["id"], shape=tuple(int(d) for d in raw["shape"]),
                                data=_data(raw["data"], dtype), device=raw["device"],
                                require_grad=bool(raw["require_grad"]))),
    op=_Codec(
        _op_to_dict,
        lambda raw, dtype: OpCall(id=raw["id"], op=raw["op"], inputs=tuple(raw["inputs"]),
                                  attrs=_decode_attrs(raw.get("attrs", {})), region=raw.get("region", "grad"))),
    cut=_Codec(
        lambda st: _with_region({"id": st.id, "kind": "cut", "cut": st.cut, "input": st.input}, st),
        lambda raw, dtype: Cut(id=raw["id"], cut=raw["cut"], input=raw["input"], region=raw.get("region", "grad"))),
    backward=_Codec(
        _backward_to_dict,
        lambda raw, dtype: Backward(id=raw["id"], input=raw["input"],
                                    retain_graph=bool(raw.get("retain_graph", False)))),
    module=_Codec(lambda st: _module_to_dict(st), lambda raw, dtype: _module_from_dict(raw, dtype)),
    transform=_plain(Transform, "transform", "input"),
    apply=_plain(Apply, "module", "input"),
    param=_plain(Param, "module", "param"),
    grad=_plain(Grad, "grads", "of"),
    zero_grad=_plain(ZeroGrad),
    optimizer=_Codec(
        lambda st: {"id": st.id, "kind": "optimizer", "optimizer": st.optimizer, "momentum": st.momentum,
                    "dampening": st.dampening, "nesterov": st.nesterov, "weight_decay": st.weight_decay},
        lambda raw, dtype: Optimizer(id=raw["id"], optimizer=raw["optimizer"],
                                     momentum=decode_float(raw.get("momentum", 0.0), "momentum"),
                                     dampening=decode_float(raw.get("dampening", 0.0), "dampening"),
                                     nesterov=bool(raw.get("nesterov", False)),
                                     weight_decay=decode_float(raw.get("weight_decay", 0.0), "weight_decay"))),
    step=_Codec(
        lambda st: {"id": st.id, "kind": "step", "optimizer": st.optimizer, "module": st.module,
                    "grads": st.grads, "lr": st.lr},
        lambda raw, dtype: Step(id=raw["id"], optimizer=raw["optimizer"], module=raw["module"],
                                grads=raw["grads"], lr=decode_float(raw["lr"], "lr"))),
)


def program_from_json(text: str) -> Program:
    try:
        doc = loads(text)
    except ValueError as e:  # malformed JSON, a bare NaN, a number beyond float64
        raise ProgramError(f"malformed JSON: {e}") from e
    return program_from_dict(doc)
