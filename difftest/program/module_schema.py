"""The JSON schema of `module` statements and of `param` names, generated from the module kinds
(difftest/program/modules/) and laid over the schema files' `$defs` when they are loaded (jsonio.schema),
so a new kind needs no schema edit."""

from __future__ import annotations

from typing import Any

from difftest.program.modules import MODULE_KINDS, ModuleKind

_TENSOR = {"$ref": "#/$defs/tensor"}


def _attr_schema(kind: type) -> dict[str, Any]:
    if kind is list:  # one non-negative integer per spatial dim (conv2d)
        return {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2}
    return {"type": "integer", "minimum": 1} if kind is int else {"$ref": "#/$defs/float"}


def module_def() -> dict[str, Any]:
    props: dict[str, Any] = {"id": {"$ref": "#/$defs/id"}, "kind": {"const": "module"},
                             "module": {"enum": list(MODULE_KINDS)}}
    for k in MODULE_KINDS.values():
        for a in k.attrs:
            props.setdefault(a.name, {"type": "number", "minimum": 0, "maximum": 1} if a.name == "p"
                             else _attr_schema(a.kind))
        for t in k.tensors:
            props.setdefault(t.name, {"oneOf": [_TENSOR, {"type": "null"}]})
    return {"type": "object", "required": ["id", "kind", "module"], "additionalProperties": False,
            "properties": props, "allOf": [_kind_clause(k, props) for k in MODULE_KINDS.values()]}


def _kind_clause(k: ModuleKind, props: dict[str, Any]) -> dict[str, Any]:
    own = [a.name for a in k.attrs] + [t.name for t in k.tensors]
    then: dict[str, Any] = {"required": own,
                            "properties": {name: False for name in props if name not in own
                                           and name not in ("id", "kind", "module")}}
    for t in k.tensors:
        if not t.optional:
            then["properties"][t.name] = _TENSOR
    return {"if": {"properties": {"module": {"const": k.name}}}, "then": then}


def param_names() -> list[str]:
    return list(dict.fromkeys(t.name for k in MODULE_KINDS.values() for t in k.tensors))


def overlay(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its module statement and param names generated from the kinds."""
    defs = schema["$defs"]
    defs["module"] = module_def()
    defs["param"]["properties"]["param"] = {"enum": param_names()}
    return schema
