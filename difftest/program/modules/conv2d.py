"""`conv2d`: a 2-d convolution over [N, C_in, H, W] with the weight [C_out, C_in / groups, kh, kw]
(PyTorch's layout and burn's) and an optional bias.

burn-nn 0.22.1 conv/conv2d.rs: burn::tensor::module::conv2d with the module's weight and bias;
the statement's symmetric padding is burn's PaddingConfig2d::Explicit(ph, pw, ph, pw).
torch.nn.Conv2d computes the same."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from difftest.program.conv_shapes import conv
from difftest.program.literals import burn_tensor, burn_vector
from difftest.program.modules.kind import AttrSpec, ModuleError, ModuleKind, TensorSpec, int_pair, positive_int
from difftest.program.parts import Call, Part
from difftest.program.shapes import Shape, ShapeError

if TYPE_CHECKING:
    from difftest.program.statements import Module


def _shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
    w = given.get("weight")
    if w is None or len(w) != 4 or any(d < 1 for d in w):
        raise ModuleError(f"weight shape {list(w) if w else None} is not [C_out, C_in / groups, kh, kw] "
                          "with dims >= 1")
    if w[0] % attrs["groups"]:
        raise ModuleError(f"the weight's C_out = {w[0]} is not divisible by groups = {attrs['groups']}")
    return {"weight": w, "bias": (w[0],)}


def _out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    """The conv2d op's shape rule (conv_shapes.py)."""
    ins = [x, shapes["weight"], *([shapes["bias"]] if "bias" in shapes else [])]
    try:
        return conv(2)(ins, attrs)
    except ShapeError as e:
        raise ModuleError(str(e)) from None


def _pytorch(st: Module, dtype: str) -> str:
    assert st.weight is not None
    c_out, per_group, kh, kw = st.weight.shape
    a = st.attrs
    return (f"torch.nn.Conv2d({per_group * a['groups']}, {c_out}, ({kh}, {kw}), stride={tuple(a['stride'])}, "
            f"padding={tuple(a['padding'])}, dilation={tuple(a['dilation'])}, groups={a['groups']}, "
            f"bias={st.bias is not None}{dtype})")


def _rust(st: Module, var: str, dtype: str) -> str:
    a = st.attrs
    assert st.weight is not None
    shape = list(st.weight.shape)
    bias = "None"
    if st.bias is not None:
        bias = f"Some(Param::from_tensor({burn_vector(st.bias.data, dtype)}))"
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    return "\n".join([
        f"// weight [C_out, C_in / groups, kh, kw] = {shape}, PyTorch's layout and burn's",
        f"let {var} = Conv2d {{",
        f"    weight: Param::from_tensor({burn_tensor(st.weight.data, shape, dtype)}),",
        f"    bias: {bias},",
        f"    stride: [{sh}, {sw}],",
        f"    kernel_size: [{shape[2]}, {shape[3]}],",
        f"    dilation: [{dh}, {dw}],",
        f"    groups: {a['groups']},",
        "    // PyTorch's symmetric padding (ph, pw) is burn's (top, left, bottom, right)",
        f"    padding: PaddingConfig2d::Explicit({ph}, {pw}, {ph}, {pw}),",
        "};"])


def _parts(call: Call) -> tuple[Part, ...] | None:
    # burn-nn 0.22.1 conv/conv2d.rs: forward is burn::tensor::module::conv2d(input, weight, bias,
    # options) with the explicit padding symmetric, the catalog's conv2d op
    attrs = {name: call.attrs[name] for name in ("stride", "padding", "dilation", "groups")}
    params = ("param:weight", "param:bias") if "bias" in call.params else ("param:weight",)
    return (Part("conv2d", (0, *params), attrs),)


CONV2D = ModuleKind(
    "conv2d",
    (AttrSpec("stride", list, int_pair("stride", 1)),
     AttrSpec("padding", list, int_pair("padding", 0)),
     AttrSpec("dilation", list, int_pair("dilation", 1)),
     AttrSpec("groups", int, positive_int("groups"))),
    (TensorSpec("weight", layout="[C_out, C_in / groups, kh, kw]"), TensorSpec("bias", optional=True)),
    _shapes, input_ranks=(4,), out_shape=_out, pytorch=_pytorch, rust=_rust,
    burn_fields={"weight": "weight.val()", "bias": "bias.as_ref().unwrap().val()"},
    burn_uses=frozenset({"Module", "Param", "PaddingConfig2d", "conv::Conv2d"}), noise="as_op:conv2d",
    steppable=True, saves_input=True, layout="memory_format", composed=_parts)
