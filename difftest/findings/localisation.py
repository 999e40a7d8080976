"""What localisation (localise.py) finds: `Localisation`, where a finding's fault is, and its
record in a saved case."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Program
from difftest.program.jsonio import program_to_dict


@dataclass(frozen=True)
class Localisation:
    """Where a finding's fault is. `statement`: the statement in the full program (None for
    `graph`, and for the op a seeded experiment applies its cotangent with, which the program
    need not hold); `where`: its op, `apply:<kind>`, `step`, or `graph`; `input`: the inputs whose
    gradient is wrong (None for a value); `error`: the error class of the one-op finding."""

    statement: str | None
    where: str
    kind: str
    input: tuple[int, ...] | None
    dtype: str
    error: str
    verdict: str  # burn-wrong | torch-wrong | the one-op mismatch's kind
    attrs: dict[str, Any] = field(default_factory=dict, hash=False)
    program: Program | None = field(default=None, hash=False)  # the one-op reproducer
    one_op: Verdict | None = field(default=None, hash=False, compare=False)
    mismatch: Mismatch | None = field(default=None, hash=False, compare=False)
    # "fails": the one-op program fails the oracle; "suspect": it passes, but burn deviates from
    # the float64 result far more than PyTorch's float32 run (deviation.py); "path": a step or
    # the graph, where no one-op program ran; "summed": burn's gradient of a value read twice is
    # not the sum of the gradients it gives the value's copies (unshared.summed_apart)
    confidence: str = "path"
    # a gradient localised to the graph: the op (graph_roots.shown_name) whose result, as the
    # backward's root, first gives the leaf the wrong gradient (graph_roots.py)
    shown_at: str | None = None
    # a module's forward: the parameters whose gradient is wrong (`input` names its input's)
    params: tuple[str, ...] = ()
    # "broadcast": the op's one-op program is right with the inputs it broadcasts implicitly
    # expanded first (`expanded`, their positions), and another op broadcasting the same input
    # the same way is wrong too: the op's own derivative is right, and the fault is in how
    # autodiff reduces a broadcast operand's gradient, which every broadcasting op shares;
    # "own-broadcast": right expanded, while the other op is right: the op's own reduction
    # (broadcast.py), signed `broadcast:<op>`; "accumulate": a `graph` gradient that is right once no value is shared
    # (unshared.py). The signature names the mechanism, not the op that showed it; "recompute":
    # the op's output as burn's gradient checkpointing recomputes it (recompute.py), signed
    # `recompute:<op>`
    mechanism: str | None = None
    expanded: tuple[int, ...] = ()
    # a part of an op burn builds from other ops (ops/compositions.py), named in its stead: the
    # composites it was found in, outermost first (`inside`: ("var", "square") for the mul of a
    # var's square), and the composite's one-op program run as its parts (`composed`), where the
    # part is the statement `part` (known-bug records match the finding there)
    inside: tuple[str, ...] = ()
    composed: Program | None = field(default=None, hash=False, compare=False)
    part: str | None = None
    # a failing composite that keeps its name: whether burn computes it as its declared parts
    # and PyTorch's run of those parts agrees (composed.as_composed), so that the finding is the
    # composition's own difference from the op; None where no composition applies
    as_composed: bool | None = None

    def describe(self) -> str:
        which = f" input {','.join(map(str, self.input))}" if self.input is not None else ""
        if self.params:
            which += f"{' and' if which else ''} {','.join(self.params)}"
        at = (f" (statement {self.statement})" if self.statement else
              f" (first shown rooted at {self.shown_at})" if self.shown_at else "")
        attrs = f" {self.attrs}" if self.attrs else ""
        hedge = ""
        if self.confidence == "suspect":
            hedge = " (suspect: within its one-op budget, far outside PyTorch's error)"
        if self.mechanism == "accumulate" and self.confidence == "summed":
            hedge += ("; burn's gradient of a value read twice is not the sum of the gradients it gives the "
                      "value's copies, each read once: the accumulation of a value's gradient contributions")
        elif self.mechanism == "accumulate":
            hedge += ("; right with every value computed once per path that reads it: the accumulation of "
                      "a value's gradient contributions")
        if self.mechanism in ("broadcast", "own-broadcast"):
            hedge += (f"; right with its broadcast input{'s' if len(self.expanded) > 1 else ''} "
                      f"{','.join(map(str, self.expanded))} expanded first: ")
            hedge += ("the reduction of a broadcast operand's gradient, wrong in another op broadcasting the same "
                      "way too" if self.mechanism == "broadcast" else
                      f"{self.where}'s own reduction of a broadcast operand's gradient (another op broadcasting "
                      "the same way is right)")
        if self.mechanism == "recompute":
            hedge += "; right unless read back as burn's gradient checkpointing recomputes it"
        if self.inside:
            built = "other ops" if self.mechanism in ("accumulate", "broadcast") else "it"
            hedge += f"; inside {' inside '.join(reversed(self.inside))}, which burn builds from {built}"
        return (f"{self.verdict} {self.kind}{which} of {self.where}{attrs}{at}, {self.dtype}, "
                f"error {self.error}{hedge}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "statement": self.statement, "where": self.where, "kind": self.kind, "input": self.input,
            "dtype": self.dtype, "error": self.error, "verdict": self.verdict, "attrs": dict(self.attrs),
            "confidence": self.confidence, "shown_at": self.shown_at, "params": list(self.params),
            "mechanism": self.mechanism, "expanded": list(self.expanded), "inside": list(self.inside),
            "as_composed": self.as_composed,
            "program": program_to_dict(self.program) if self.program is not None else None,
        }
