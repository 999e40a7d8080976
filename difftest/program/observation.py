"""What an executor reports for one program (docs/format.md, "Observations")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from difftest.program.jsonio import decode_floats, encode_floats

Outcome = Literal["ok", "error", "crash", "timeout", "invalid"]
Flags = dict[str, bool]


@dataclass(frozen=True)
class TensorObs:
    shape: tuple[int, ...]
    data: tuple[float, ...]  # at the tensor's own precision (float64 values are not squeezed)
    dtype: str = "float32"  # the dtype the framework reports (written when not float32)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"shape": list(self.shape), "data": encode_floats(self.data)}
        if self.dtype != "float32":
            d["dtype"] = self.dtype
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TensorObs:
        return TensorObs(tuple(d["shape"]), decode_floats(d["data"]), str(d.get("dtype", "float32")))


@dataclass(frozen=True)
class ValueObs:
    id: str
    value: TensorObs
    flags: Flags

    def to_dict(self) -> dict[str, Any]:
        d = self.value.to_dict()
        return {"id": self.id, **d, "flags": dict(self.flags)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ValueObs:
        return ValueObs(d["id"], TensorObs.from_dict(d), {k: bool(v) for k, v in d["flags"].items()})


@dataclass(frozen=True)
class BackwardObs:
    id: str
    grads: dict[str, TensorObs | None]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "grads": {k: (v.to_dict() if v else None) for k, v in self.grads.items()}}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> BackwardObs:
        return BackwardObs(
            d["id"], {k: (TensorObs.from_dict(v) if v is not None else None) for k, v in d["grads"].items()}
        )


@dataclass(frozen=True)
class ErrorObs:
    kind: str  # panic | exception | crash | timeout | invalid-program | ...
    message: str
    index: int | None = None
    statement: str | None = None
    # a hang: the burn function the worker was stopped in and its thread's frames, innermost
    # first (exec/stacks.py); None and () when no stack was read or no thread was in burn
    site: str | None = None
    stack: tuple[str, ...] = ()
    # a panic: where in the source it was raised (`burn-flex-0.22.1/src/ops/reduce.rs:210:27`,
    # `shown_location`); None when the worker did not say
    location: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "statement": self.statement, "kind": self.kind,
                             "message": self.message}
        if self.site is not None:
            d |= {"site": self.site, "stack": list(self.stack)}
        if self.location is not None:
            d["location"] = self.location
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ErrorObs:
        site, location = d.get("site"), d.get("location")
        return ErrorObs(d["kind"], d["message"], d.get("index"), d.get("statement"),
                        site if isinstance(site, str) else None, tuple(map(str, d.get("stack") or ())),
                        shown_location(location) if isinstance(location, str) else None)


# a crate's directory in cargo's registry (`.../index.crates.io-<hash>/burn-flex-0.22.1/`), a
# patched copy's (`.../burn-autodiff/`), or the toolchain's sources (`/rustc/<hash>/library/`)
_CRATE_DIR = re.compile(r"^.*/(?=[A-Za-z][\w-]*-\d+\.\d+\.\d+[^/]*/src/)|^/rustc/[0-9a-f]+/(?=library/)"
                        r"|^.*/(?=burn-[\w-]+/src/)")


def shown_location(location: str) -> str:
    """A panic's `file:line:column` from the crate's directory on (`burn-flex-0.22.1/src/...`),
    whatever machine built the worker: the same line reads the same in every report."""
    return _CRATE_DIR.sub("", location, count=1)


@dataclass(frozen=True)
class Observation:
    framework: str  # "burn" | "torch" | "torch64"
    values: tuple[ValueObs, ...] = ()
    backwards: tuple[BackwardObs, ...] = ()
    error: ErrorObs | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def outcome(self) -> Outcome:
        if self.error is None:
            return "ok"
        if self.error.kind in ("crash", "timeout"):
            return self.error.kind  # type: ignore[return-value]
        if self.error.kind.startswith("invalid"):
            return "invalid"
        return "error"

    def value(self, ident: str) -> ValueObs | None:
        for v in self.values:
            if v.id == ident:
                return v
        return None

    def grad(self, backward: str | None, ident: str) -> TensorObs | None:
        """The gradient of `ident` that the backward `backward` produced, if it has one."""
        for bw in self.backwards:
            if bw.id == backward:
                return bw.grads.get(ident)
        return None

    def grad_element(self, backward: str, ident: str, element: int) -> float | None:
        """One element of that gradient (flat index), if it has one."""
        g = self.grad(backward, ident)
        return g.data[element] if g is not None and 0 <= element < len(g.data) else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "values": [v.to_dict() for v in self.values],
            "backwards": [b.to_dict() for b in self.backwards],
            "error": self.error.to_dict() if self.error else None,
        }

    @staticmethod
    def from_dict(d: dict[str, Any], framework: str | None = None) -> Observation:
        err = d.get("error")
        return Observation(
            framework or d.get("framework", "?"),
            tuple(ValueObs.from_dict(v) for v in d.get("values", [])),
            tuple(BackwardObs.from_dict(b) for b in d.get("backwards", [])),
            ErrorObs.from_dict(err) if err else None,
        )
