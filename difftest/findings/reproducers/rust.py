"""The burn reproducer: a self-contained `#[test]` (plain `burn::tensor` API, concrete ranks)
that makes the burn calls of the difftest-burn interpreter and prints values, flags and
gradients."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from difftest.findings.reproducers.names import RUST_KEYWORDS, count, variable_names
from difftest.ops.catalog import CATALOG
from difftest.ops.spelling import burn_imports
from difftest.ops.validate import infer_shapes
from difftest.ops.value_dtypes import value_dtypes
from difftest.program.ir import (
    Apply,
    Backward,
    Cut,
    Grad,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Param,
    Program,
    Step,
    Transform,
    ZeroGrad,
    root_module,
)
from difftest.program.literals import burn_options, list_literal, rust_f32, rust_f64, rust_items, wrap
from difftest.program.modules import module_kind

__all__ = ["rust_test", "rust_test_file"]


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


def rust_test(program: Program, name: str) -> str:
    """A self-contained burn `#[test]` (plain `burn::tensor` API, concrete ranks) that makes the
    same burn calls as the difftest-burn interpreter and prints values, flags and gradients."""
    if not name.isidentifier() or name in RUST_KEYWORDS:
        raise ValueError(f"test name {name!r} is not a Rust identifier")
    shapes = infer_shapes(program)
    names = variable_names(program)
    ranks = {k: len(v) for k, v in shapes.items()}
    uses: set[str] = set()
    ind = "    "
    body: list[str] = []
    leaves = [s for s in program.statements if isinstance(s, Leaf)]
    modules = [s for s in program.statements if isinstance(s, Module)]
    nn_uses: set[str] = set()
    random = [k for k in dict.fromkeys(m.module for m in modules) if module_kind(k).random]
    if random:
        body.append(f"// {' and '.join(random)} masks come from the backend's RNG, seeded as difftest-burn seeds it")
        body.append("Device::flex().seed(0);")
    if any(s.device == "autodiff" for s in leaves) or any(module_kind(m.module).params for m in modules):
        body.append("let device = Device::flex().autodiff();")
    if any(s.device == "plain" for s in leaves):
        body.append("let plain = Device::flex();")
    defined: list[str] = []
    weights: dict[str, str] = {}  # weight param id -> expression of burn's [in, out] parameter
    stepped = {st.grads for st in program.statements if isinstance(st, Step)}
    optim_uses: set[str] = set()
    for st in program.statements:
        if isinstance(st, Backward):
            mut = "mut " if st.id in stepped else ""
            if st.retain_graph:
                body.append("// retain_graph=True in PyTorch: burn has no such option")
            body.append(f"let {mut}{names[st.id]} = {names[st.input]}.backward();")
            body.append(f'println!("backward {st.id}");')
            for d in defined:
                if d in weights:
                    body.append(f'show_grad_param("{d}", &{weights[d]}, &{names[st.id]});')
                else:
                    body.append(f'show_grad("{d}", &{names[d]}, &{names[st.id]});')
            uses.add("Gradients")
            continue
        var = names[st.id]
        if isinstance(st, ZeroGrad):
            body.append("// zero_grad: burn's backward returns fresh gradients; nothing to clear")
            continue
        if isinstance(st, Optimizer):
            optim_uses.add("SgdConfig")
            config = "SgdConfig::new()"
            if st.momentum > 0:
                optim_uses.add("momentum::MomentumConfig")
                config += (f".with_momentum(Some(MomentumConfig {{ momentum: {rust_f64(st.momentum)}, "
                           f"dampening: {rust_f64(st.dampening)}, nesterov: {str(st.nesterov).lower()} }}))")
            if st.weight_decay > 0:
                optim_uses.add("decay::WeightDecayConfig")
                config += f".with_weight_decay(Some(WeightDecayConfig {{ penalty: {rust_f32(st.weight_decay)} }}))"
            body.append(f"let mut {var} = {config}.init();")
            continue
        if isinstance(st, Step):
            optim_uses.add("GradientsParams")
            handle, grads = names[st.module], names[st.grads]
            body.append(f"let {var} = {names[st.optimizer]}.step({rust_f64(st.lr)}, {handle}.clone(), "
                        f"GradientsParams::from_module(&mut {grads}, &{handle}));")
            continue
        if isinstance(st, Grad):
            rank = ranks[st.id]
            of = weights.get(st.of, f"{names[st.of]}")
            transpose = ".transpose()" if st.of in weights else ""
            body.append(f"let {var}: Tensor<{rank}> = {of}.grad(&{names[st.grads]})"
                        f".expect(\"no gradient for {st.of} in {st.grads}\"){transpose};")
            body.append(f'show("{st.id}", &{var});')
            defined.append(st.id)
            continue
        if isinstance(st, Module):
            kind = module_kind(st.module)
            nn_uses.update(kind.burn_uses)
            body.append(kind.rust(st, var, program.dtype))
            continue
        if isinstance(st, Transform):
            body.append(f"let {var} = {names[st.input]}.{_RUST_TRANSFORM[st.transform]};")
            continue
        rank = ranks[st.id]
        if isinstance(st, Param):
            handle = names[st.module]
            kind = module_kind(root_module(program, st.module).module)
            field = f"{handle}.{kind.burn_fields[st.param]}"
            if st.param in kind.burn_transposed:  # a matrix burn stores transposed (Linear's weight)
                weights[st.id] = field
                body.append(f"let {var}: Tensor<2> = {field}.transpose(); // PyTorch's layout")
                body.append(f'show_param("{st.id}", &{weights[st.id]});')
            else:
                body.append(f"let {var}: Tensor<{rank}> = {field};")
                body.append(f'show("{st.id}", &{var});')
            defined.append(st.id)
            continue
        if isinstance(st, Apply):
            # an embedding takes indices: the leaf of integral entries, as an Int tensor
            to_int = ".int()" if module_kind(root_module(program, st.module).module).index_bound else ""
            body.append(f"let {var}: Tensor<{rank}> = {names[st.module]}.forward({names[st.input]}.clone(){to_int});")
            body.append(f'show("{st.id}", &{var});')
            defined.append(st.id)
            continue
        if isinstance(st, Leaf):
            dev = "device" if st.device == "autodiff" else "plain"
            data = wrap(rust_items(st.data, program.dtype), ind)
            expr = (f"Tensor::<{rank}>::from_data(TensorData::new(vec![{data}], {list_literal(st.shape)}), "
                    f"{burn_options(dev, program.dtype)})")
            if st.require_grad:
                expr += ".require_grad()"
        else:
            assert isinstance(st, (OpCall, Cut)), st
            region = st.region
            if region != "grad":
                body.append(f"// {region}: burn has no such scope; the inputs are taken off autodiff")
            enter = ".without_autodiff()" if region != "grad" else ""
            if isinstance(st, OpCall):
                args = [f"{names[i]}.clone(){enter}" for i in st.inputs]
                expr = CATALOG[st.op].burn_expr(args, st.attrs, [shapes[i] for i in st.inputs])
                uses |= burn_imports(expr)
            else:
                assert isinstance(st, Cut), st
                method = {"detach": "detach", "without_autodiff": "without_autodiff", "autodiff": "autodiff"}
                expr = f"{names[st.input]}.clone(){enter}.{method[st.cut]}()"
        body.append(f"let {var}: Tensor<{rank}> = {expr};")
        body.append(f'show("{st.id}", &{var});')
        defined.append(st.id)
    imports = ["Device", "Tensor", "TensorData", *sorted(uses - {"activation"})]
    if program.dtype != "float32":
        imports.insert(1, "DType")
    if "activation" in uses:
        imports.insert(0, "activation")
    allow = ["non_snake_case"] if any(v != v.lower() for v in names.values()) else []
    out = ["#[test]"]
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
    out.append("")
    for line in body:
        out.extend(f"{ind}{part}" for part in line.split("\n"))
    out.append("}")
    return "\n".join(out) + "\n"


def rust_test_file(tests: Sequence[tuple[Program, str]],
                   emit: Callable[[Program, str], str] = rust_test) -> str:
    """Several reproducers in one integration-test file (`tests/<file>.rs` of a crate that
    depends on burn with the `flex` and `autodiff` features)."""
    header = "//! difftest reproducers (generated).\n"
    return header + "".join("\n" + emit(p, n) for p, n in tests)
