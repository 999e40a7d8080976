"""The burn reproducer: a self-contained `#[test]` (plain `burn::tensor` API, concrete ranks)
that makes the burn calls of the difftest-burn interpreter and prints values, flags and
gradients; given what a correct burn gives (expect.py), it also asserts them, in the manner of
burn's own autodiff tests, so that it fails on the buggy burn and passes on a fixed one."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from difftest.findings.reproducers.expect import Check, Expected
from difftest.findings.reproducers.names import RUST_KEYWORDS, count, variable_names
from difftest.ops.catalog import CATALOG
from difftest.ops.spelling import burn_imports
from difftest.ops.validate import infer_shapes
from difftest.ops.value_dtypes import value_dtypes
from difftest.program.ir import (
    Apply,
    Backward,
    ByKind,
    Cut,
    Grad,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Param,
    Program,
    Shape,
    Statement,
    Step,
    root_module,
)
from difftest.program.literals import burn_options, list_literal, rust_f32, rust_f64, rust_items, wrap
from difftest.program.modules import module_kind

__all__ = ["rust_test", "rust_test_file"]

S = TypeVar("S", bound=Statement)


_RUST_TRANSFORM = {"valid": "valid()", "train": "clone().train()", "no_grad": "clone().no_grad()",
                   "freeze": "clone().freeze()", "unfreeze": "clone().unfreeze()"}


def _show_helpers(uses_grads: bool, *, param: bool, elem: str = "f32") -> list[str]:
    """`show` / `show_grad` for a value of any rank, or (`param`) `show_param` /
    `show_grad_param` for a Linear weight: burn stores it [in, out]; flags are the parameter's,
    values (and the gradient) are printed in PyTorch's [out, in] layout, as difftest-burn
    reports them."""
    if param:
        suffix, generics, arg, ty = "_param", "", "raw", "Tensor<2>"
    else:
        suffix, generics, arg, ty = "", "<const D: usize>", "t", "Tensor<D>"
    transposed = ["    let t = raw.clone().transpose();"] if param else []
    lines = [
        f"fn show{suffix}{generics}(name: &str, {arg}: &{ty}) {{",
        *transposed,
        f"    let values = t.try_to_vec_as::<{elem}>().unwrap();",
        "    println!(",
        '        "{} shape={:?} is_autodiff={} is_tracked={} is_require_grad={} values={:?}",',
        f"        name, t.dims(), {arg}.is_autodiff(), {arg}.is_tracked(), {arg}.is_require_grad(), values",
        "    );",
        "}",
    ]
    if uses_grads:
        lines += [
            f"fn show_grad{suffix}{generics}(name: &str, {arg}: &{ty}, grads: &Gradients) {{",
            f"    match {arg}.grad(grads) {{",
            "        Some(g) => {",
            *(["            let g = g.transpose();"] if param else []),
            f"            let values = g.try_to_vec_as::<{elem}>().unwrap();",
            '            println!("grad {} = {:?} shape={:?}", name, values, g.dims());',
            "        }",
            '        None => println!("grad {} = None", name),',
            "    }",
            "}",
        ]
    return lines


def test_name(case_name: str) -> str:
    """A Rust test name for a case: its name with `-` as `_`, prefixed with `case_` where that
    is not an identifier starting with a letter (a finding's name is a hex digest)."""
    name = case_name.replace("-", "_")
    if not name.isidentifier() or not name[0].isalpha() or name in RUST_KEYWORDS:
        name = "case_" + re.sub(r"\W", "_", name)
    return name


@dataclass
class _Test:
    """The test under way (`rust_test`): its body's lines, what they use and what the statements
    so far defined."""

    program: Program
    shapes: dict[str, Shape]
    names: dict[str, str]  # statement id -> variable name
    stepped: set[str]  # the gradients handles optimizer steps take from (declared `mut`)
    body: list[str]
    uses: set[str] = field(default_factory=set)  # burn::tensor items
    nn_uses: set[str] = field(default_factory=set)  # burn::module and burn::nn items
    optim_uses: set[str] = field(default_factory=set)  # burn::optim items
    defined: list[str] = field(default_factory=list)  # values so far
    weights: dict[str, str] = field(default_factory=dict)  # weight param id -> burn's [in, out] parameter
    expect: Expected | None = None  # what to assert (None: print only)

    def rank(self, ident: str) -> int:
        return len(self.shapes[ident])

    def show(self, st: Statement, var: str, suffix: str = "") -> None:
        self.body.append(f'show{suffix}("{st.id}", &{var});')
        self.defined.append(st.id)
        if self.expect is None:
            return
        flags = self.expect.flags.get(st.id)
        if flags is not None:
            self.body.append(f'check_flags("{st.id}", &{var}, {", ".join(str(f).lower() for f in flags)});')
        check = self.expect.values.get(st.id)
        if check is not None:
            self.body.append(f'check{suffix}("{st.id}", &{var}, {_slices(check)});')


def _f64(x: float) -> str:
    if math.isnan(x):
        return "f64::NAN"
    if math.isinf(x):
        return "f64::INFINITY" if x > 0 else "f64::NEG_INFINITY"
    return rust_f64(x)


def _slices(check: Check) -> str:
    want, tol = check
    return f"&[{', '.join(map(_f64, want))}], &[{', '.join(map(_f64, tol))}]"


_CHECK_HELPERS = """\
fn close(name: &str, got: &[f64], want: &[f64], tol: &[f64]) {
    assert_eq!(got.len(), want.len(), "{name}: {} elements, expected {}", got.len(), want.len());
    for (i, ((g, w), t)) in got.iter().zip(want).zip(tol).enumerate() {
        let ok = if w.is_finite() { (g - w).abs() <= *t } else { g == w || (g.is_nan() && w.is_nan()) };
        assert!(ok, "{name}[{i}] = {g:e}, expected {w:e} within {t:e}");
    }
}
fn check_flags<const D: usize>(name: &str, t: &Tensor<D>, autodiff: bool, tracked: bool, require_grad: bool) {
    let got = (t.is_autodiff(), t.is_tracked(), t.is_require_grad());
    assert_eq!(got, (autodiff, tracked, require_grad), "{name}: (is_autodiff, is_tracked, is_require_grad)");
}
fn check<const D: usize>(name: &str, t: &Tensor<D>, want: &[f64], tol: &[f64]) {
    close(name, &t.try_to_vec_as::<f64>().unwrap(), want, tol);
}
fn check_param(name: &str, raw: &Tensor<2>, want: &[f64], tol: &[f64]) {
    check(name, &raw.clone().transpose(), want, tol);
}"""

_GRAD_HELPERS = """\
fn check_grad<const D: usize>(name: &str, t: &Tensor<D>, grads: &Gradients, want: &[f64], tol: &[f64]) {
    let g = t.grad(grads).unwrap_or_else(|| panic!("grad {name}: none, expected one"));
    close(&format!("grad {name}"), &g.try_to_vec_as::<f64>().unwrap(), want, tol);
}
fn check_grad_param(name: &str, raw: &Tensor<2>, grads: &Gradients, want: &[f64], tol: &[f64]) {
    let g = raw.grad(grads).unwrap_or_else(|| panic!("grad {name}: none, expected one")).transpose();
    close(&format!("grad {name}"), &g.try_to_vec_as::<f64>().unwrap(), want, tol);
}"""


def rust_test(program: Program, name: str, expect: Expected | None = None) -> str:
    """A self-contained burn `#[test]` (plain `burn::tensor` API, concrete ranks) that makes the
    same burn calls as the difftest-burn interpreter and prints values, flags and gradients, and
    with `expect` asserts them (expect.py; `#[should_panic]` where burn is to fail)."""
    if not name.isidentifier() or name in RUST_KEYWORDS:
        raise ValueError(f"test name {name!r} is not a Rust identifier")
    names = variable_names(program)
    ind = "    "
    body: list[str] = []
    leaves = [s for s in program.statements if isinstance(s, Leaf)]
    modules = [s for s in program.statements if isinstance(s, Module)]
    random = [k for k in dict.fromkeys(m.module for m in modules) if module_kind(k).random]
    if random:
        body.append(f"// {' and '.join(random)} masks come from the backend's RNG, seeded as difftest-burn seeds it")
        body.append("Device::flex().seed(0);")
    if any(s.device == "autodiff" for s in leaves) or any(module_kind(m.module).params for m in modules):
        checkpointing = ".gradient_checkpointing()" if program.checkpointing == "balanced" else ""
        body.append(f"let device = Device::flex().autodiff(){checkpointing};")
    if any(s.device == "plain" for s in leaves):
        body.append("let plain = Device::flex();")
    stepped = {st.grads for st in program.statements if isinstance(st, Step)}
    test = _Test(program, infer_shapes(program), names, stepped, body, expect=expect)
    for st in program.statements:
        _WRITERS.of(st)(test, st)
    uses, nn_uses, optim_uses, weights = test.uses, test.nn_uses, test.optim_uses, test.weights
    imports = ["Device", "Tensor", "TensorData", *sorted(uses - {"activation"})]
    if program.dtype != "float32":
        imports.insert(1, "DType")
    if "activation" in uses:
        imports.insert(0, "activation")
    allow = ["non_snake_case"] if any(v != v.lower() for v in names.values()) else []
    out = ["#[test]"]
    if expect is not None and expect.panics:
        out.append("#[should_panic] // burn is to fail where PyTorch's autograd does (the model's prediction)")
    if allow:
        out.append(f"#[allow({', '.join(allow)})]")
    out.append(f"fn {name}() {{")
    out.append(f"{ind}// difftest reproducer: burn 0.22.1, Flex backend {count(program)}")
    if program.dtype != "float32":
        out.append(f"{ind}// program dtype {program.dtype}: leaves and parameters are created in it, "
                   "values print as f64")
    out.append(f"{ind}use burn::tensor::{{{', '.join(imports)}}};")
    for path, names_used in (("burn::module", nn_uses & {"Module", "Param", "RunningState"}),
                             ("burn::nn", nn_uses - {"Module", "Param", "RunningState"})):
        if len(names_used) == 1:
            out.append(f"{ind}use {path}::{next(iter(names_used))};")
        elif names_used:
            out.append(f"{ind}use {path}::{{{', '.join(sorted(names_used))}}};")
    if optim_uses:
        items = sorted(optim_uses)
        out.append(f"{ind}use burn::optim::{{{', '.join(items)}}};")
    out.append("")
    # f32 prints for float32 values only; f64 (exact) as soon as a value is in another dtype
    elem = "f32" if set(value_dtypes(program).values()) <= {"float32"} else "f64"
    out.extend(f"{ind}{line}" for line in _show_helpers("Gradients" in uses, param=False, elem=elem))
    if weights:
        out.extend(f"{ind}{line}" for line in _show_helpers("Gradients" in uses, param=True, elem=elem))
    if expect is not None:
        out.extend(f"{ind}{line}" for line in _CHECK_HELPERS.splitlines())
        if "Gradients" in uses:
            out.extend(f"{ind}{line}" for line in _GRAD_HELPERS.splitlines())
    out.append("")
    for line in body:
        out.extend(f"{ind}{part}" for part in line.split("\n"))
    out.append("}")
    return "\n".join(out) + "\n"


def _backward(t: _Test, st: Backward) -> None:
    names, var = t.names, t.names[st.id]
    mut = "mut " if st.id in t.stepped else ""
    if st.retain_graph:
        t.body.append("// retain_graph=True in PyTorch: burn has no such option")
    t.body.append(f"let {mut}{var} = {names[st.input]}.backward();")
    t.body.append(f'println!("backward {st.id}");')
    for d in t.defined:
        param = "_param" if d in t.weights else ""
        x = t.weights.get(d, names[d])
        t.body.append(f'show_grad{param}("{d}", &{x}, &{var});')
        if t.expect is None or (st.id, d) not in t.expect.grads:
            continue
        check = t.expect.grads[(st.id, d)]
        if check is None:
            t.body.append(f'assert!({x}.grad(&{var}).is_none(), "grad {d}: expected none");')
        else:
            t.body.append(f'check_grad{param}("{d}", &{x}, &{var}, {_slices(check)});')
    t.uses.add("Gradients")


def _optimizer(t: _Test, st: Optimizer) -> None:
    t.optim_uses.add("SgdConfig")
    config = "SgdConfig::new()"
    if st.momentum > 0:
        t.optim_uses.add("momentum::MomentumConfig")
        config += (f".with_momentum(Some(MomentumConfig {{ momentum: {rust_f64(st.momentum)}, "
                   f"dampening: {rust_f64(st.dampening)}, nesterov: {str(st.nesterov).lower()} }}))")
    if st.weight_decay > 0:
        t.optim_uses.add("decay::WeightDecayConfig")
        config += f".with_weight_decay(Some(WeightDecayConfig {{ penalty: {rust_f32(st.weight_decay)} }}))"
    t.body.append(f"let mut {t.names[st.id]} = {config}.init();")


def _step(t: _Test, st: Step) -> None:
    t.optim_uses.add("GradientsParams")
    handle, grads = t.names[st.module], t.names[st.grads]
    t.body.append(f"let {t.names[st.id]} = {t.names[st.optimizer]}.step({rust_f64(st.lr)}, {handle}.clone(), "
                  f"GradientsParams::from_module(&mut {grads}, &{handle}));")


def _grad(t: _Test, st: Grad) -> None:
    var = t.names[st.id]
    of = t.weights.get(st.of, f"{t.names[st.of]}")
    transpose = ".transpose()" if st.of in t.weights else ""
    t.body.append(f"let {var}: Tensor<{t.rank(st.id)}> = {of}.grad(&{t.names[st.grads]})"
                  f".expect(\"no gradient for {st.of} in {st.grads}\"){transpose};")
    t.show(st, var)


def _module(t: _Test, st: Module) -> None:
    kind = module_kind(st.module)
    t.nn_uses.update(kind.burn_uses)
    t.body.append(kind.rust(st, t.names[st.id], t.program.dtype))


def _param(t: _Test, st: Param) -> None:
    var, handle = t.names[st.id], t.names[st.module]
    kind = module_kind(root_module(t.program, st.module).module)
    field = f"{handle}.{kind.burn_fields[st.param]}"
    if st.param in kind.burn_transposed:  # a matrix burn stores transposed (Linear's weight)
        t.weights[st.id] = field
        t.body.append(f"let {var}: Tensor<2> = {field}.transpose(); // PyTorch's layout")
        t.show(st, t.weights[st.id], "_param")
    else:
        t.body.append(f"let {var}: Tensor<{t.rank(st.id)}> = {field};")
        t.show(st, var)


def _apply(t: _Test, st: Apply) -> None:
    var = t.names[st.id]
    # an embedding takes indices: the leaf of integral entries, as an Int tensor
    to_int = ".int()" if module_kind(root_module(t.program, st.module).module).index_bound else ""
    t.body.append(f"let {var}: Tensor<{t.rank(st.id)}> = {t.names[st.module]}.forward({t.names[st.input]}.clone()"
                  f"{to_int});")
    t.show(st, var)


def _value(expr: Callable[[_Test, S], str]) -> Callable[[_Test, S], None]:
    """A value computed by one expression, then shown."""
    def write(t: _Test, st: S) -> None:
        var = t.names[st.id]
        t.body.append(f"let {var}: Tensor<{t.rank(st.id)}> = {expr(t, st)};")
        t.show(st, var)
    return write


def _leaf(t: _Test, st: Leaf) -> str:
    dev = "device" if st.device == "autodiff" else "plain"
    data = wrap(rust_items(st.data, t.program.dtype), "    ")
    expr = (f"Tensor::<{t.rank(st.id)}>::from_data(TensorData::new(vec![{data}], {list_literal(st.shape)}), "
            f"{burn_options(dev, t.program.dtype)})")
    return expr + ".require_grad()" if st.require_grad else expr


def _enter(t: _Test, st: OpCall | Cut) -> str:
    """What an input is taken through: off autodiff in a no_grad or inference_mode region."""
    if st.region == "grad":
        return ""
    t.body.append(f"// {st.region}: burn has no such scope; the inputs are taken off autodiff")
    return ".without_autodiff()"


def _op(t: _Test, st: OpCall) -> str:
    enter = _enter(t, st)
    args = [f"{t.names[i]}.clone(){enter}" for i in st.inputs]
    expr = CATALOG[st.op].burn_expr(args, st.attrs, [t.shapes[i] for i in st.inputs])
    t.uses |= burn_imports(expr)
    return expr


_CUT_METHOD = {"detach": "detach", "without_autodiff": "without_autodiff", "autodiff": "autodiff"}


def _cut(t: _Test, st: Cut) -> str:
    return f"{t.names[st.input]}.clone(){_enter(t, st)}.{_CUT_METHOD[st.cut]}()"


# each statement kind's lines of the test's body
_WRITERS: ByKind[Callable[[_Test, Any], None]] = ByKind(
    "burn reproducer",
    leaf=_value(_leaf),
    op=_value(_op),
    cut=_value(_cut),
    backward=_backward,
    module=_module,
    transform=lambda t, st: t.body.append(f"let {t.names[st.id]} = {t.names[st.input]}."
                                           f"{_RUST_TRANSFORM[st.transform]};"),
    apply=_apply,
    param=_param,
    grad=_grad,
    zero_grad=lambda t, st: t.body.append("// zero_grad: burn's backward returns fresh gradients; nothing to clear"),
    optimizer=_optimizer,
    step=_step,
)


def rust_test_file(tests: Sequence[tuple[Program, str]],
                   emit: Callable[[Program, str], str] = rust_test) -> str:
    """Several reproducers in one integration-test file (`tests/<file>.rs` of a crate that
    depends on burn with the `flex` and `autodiff` features)."""
    header = "//! difftest reproducers (generated).\n"
    return header + "".join("\n" + emit(p, n) for p, n in tests)
