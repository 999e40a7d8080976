"""Known PyTorch bugs, as data: records of kind known-bug whose framework is PyTorch. They explain
only findings the arbiter judged torch-wrong (float64 sides with burn), and only on the machines
their `host` names (a oneDNN kernel picked by the CPU's features). A torch-wrong finding no record
explains stays news: PyTorch being wrong in a way nobody recorded is worth a case too.
known_bugs.py lists them with burn's."""

from __future__ import annotations

from collections.abc import Sequence

from difftest.divergences.bug_records import Effect, Fault, KnownBug, bug_record, within_f32_rounding
from difftest.divergences.bug_sites import op_in, prior_shapes
from difftest.divergences.host import cpu_has
from difftest.program.conv_shapes import conv_out, conv_transpose_out
from difftest.program.ir import Statement
from difftest.program.statements import OpCall


def _uncovered(size: int, kernel: int, stride: int, padding: int, dilation: int, padding_out: int) -> bool:
    """Whether a transposed convolution along one dim leaves an output position no kernel tap
    reaches (input i and tap j write position i * stride + j * dilation - padding)."""
    out = conv_transpose_out(size, kernel, stride, padding, padding_out, dilation)
    reached = {i * stride + j * dilation - padding for i in range(size) for j in range(kernel)}
    return any(o not in reached for o in range(out))


def conv_transpose2d_bias_uncovered(st: Statement, prior: Sequence[Statement]) -> bool:
    """A conv_transpose2d with a bias whose output has positions no kernel tap reaches (there the
    output is the bias alone)."""
    if not (isinstance(st, OpCall) and st.op == "conv_transpose2d" and len(st.inputs) == 3):
        return False
    shapes = prior_shapes(prior)
    x, w = shapes.get(st.inputs[0]), shapes.get(st.inputs[1])
    if x is None or w is None or len(x) != 4 or len(w) != 4:
        return False  # unknown shapes: no claim
    a = st.attrs
    return any(_uncovered(x[2 + d], w[2 + d], a["stride"][d], a["padding"][d], a["dilation"][d],
                          a["padding_out"][d]) for d in range(2))


def _untouched_tap(size: int, kernel: int, stride: int, padding: int, dilation: int, transposed: bool,
                   padding_out: int = 0) -> bool:
    """Whether a kernel tap along one dim multiplies nothing but padding: a convolution's tap j
    reads input o * stride + j * dilation - padding for each output o; a transposed one's writes
    output i * stride + j * dilation - padding for each input i, and the output keeps [0, out)."""
    if transposed:
        out = conv_transpose_out(size, kernel, stride, padding, padding_out, dilation)
        return any(all(not 0 <= i * stride + j * dilation - padding < out for i in range(size)) for j in range(kernel))
    outputs = conv_out(size, kernel, stride, padding, dilation)
    return any(all(not 0 <= o * stride + j * dilation - padding < size for o in range(outputs)) for j in range(kernel))


CONVS = {"conv1d": (1, False), "conv2d": (2, False), "conv_transpose1d": (1, True), "conv_transpose2d": (2, True)}


def conv_weight_tap_untouched(st: Statement, prior: Sequence[Statement]) -> bool:
    """A convolution (plain or transposed, 1-d or 2-d) with a kernel tap that meets only padding
    for every output: its weight gradient there is exactly 0."""
    if not (isinstance(st, OpCall) and st.op in CONVS):
        return False
    rank, transposed = CONVS[st.op]
    shapes = prior_shapes(prior)
    x, w = shapes.get(st.inputs[0]), shapes.get(st.inputs[1])
    if x is None or w is None or len(x) != rank + 2 or len(w) != rank + 2:
        return False  # unknown shapes: no claim
    a = st.attrs
    return any(_untouched_tap(x[2 + d], w[2 + d], a["stride"][d], a["padding"][d], a["dilation"][d], transposed,
                              a.get("padding_out", [0] * rank)[d]) for d in range(rank))


def garbage_where_zero(f: Fault) -> bool:
    """PyTorch's weight gradient is not 0 at failing elements where float64 gives exactly 0 (and
    only there): memory no output wrote, whatever it held (NaN, 1e25, 2.3e-9)."""
    return bool(f.pairs) and all(r == 0.0 and not t == 0.0 for r, t in f.pairs)


def bias_left_out(f: Fault) -> bool:
    """At the site itself, PyTorch's output is exactly 0 at every failing element where the
    float64 result is not (the bias left out, no tap reaching there); a finding downstream of the
    site (a value computed from it, a gradient through it) shows the error however those ops
    transform it, so only the site's holding is checked there."""
    st = f.program.by_id().get(f.site or "")
    if not (isinstance(st, OpCall) and st.op == "conv_transpose2d"):
        return True
    return f.kind == "value" and bool(f.pairs) and all(t == 0.0 and r != 0.0 for r, t in f.pairs)


# log of the largest finite value of the dtype PyTorch computes an op in (float16 and bfloat16
# compute in float32): exp of more overflows to inf
EXP_OVERFLOW = {"float64": 709.782712893384, "float32": 88.72283935546875, "float16": 88.72283935546875,
                "bfloat16": 88.72283935546875}


def sigmoid_of_input_overflows(f: Fault) -> bool:
    """At every failing element the op's input x is below -EXP_OVERFLOW of the dtype: there
    exp(-x) is inf, and a sigmoid computed as 1 / (1 + exp(-x)) is 0 instead of about exp(x).
    Read on the localised one-op program's input (`Fault.inputs`); False where it has none."""
    limit = EXP_OVERFLOW.get(f.dtype)
    if limit is None or not f.inputs or not f.elements:
        return False
    x = f.inputs[0]
    return all(0 <= e < len(x) and x[e] < -limit for e in f.elements)


TORCH_BUGS: tuple[KnownBug, ...] = (
    bug_record(
        "torch-mish-grad-sigmoid-overflow",
        "PyTorch 2.15's mish gradient on the CPU is wrong where exp(-x) overflows (x < -709.78 in float64, "
        "x < -88.72 in float32): it computes sigmoid(x) as 1 / (1 + exp(-x)), which is 0 there, so "
        "d/dx x tanh(softplus(x)) loses its x sigmoid(x) (1 - tanh^2) term and is tanh(softplus(x)) "
        "~ exp(x) alone. At x = -711 it gives +1.65e-309 where the exact derivative is -1.17e-306 "
        "(and burn, -1.17e-306); at -720, 2.0e-313 against -1.5e-310. Tiny numbers, but of the wrong "
        "sign and a factor |x| off. Found by a float64 campaign whose boundary value 1000 went through "
        "a linear layer to -711. Matched only as a torch-wrong mish gradient at inputs past that "
        "threshold, in float64: in float32 (and float16 and bfloat16, computed in float32) the lost term "
        "is below 2.4e-37, within the comparison's floor for the subnormal range, and no finding shows.",
        ("corpus/bugs/torch-mish-grad-sigmoid-overflow.json", "docs/checks.md",
         "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cpu/Activation.cpp"),
        None,
        ("float64",),
        site=op_in(("mish",)),
        effect=Effect(("grad",), error=sigmoid_of_input_overflows),
        burn_versions="*",
        framework="torch",
    ),
    bug_record(
        "torch-hardsigmoid-grad-f64-sixth-in-f32",
        "PyTorch 2.15's float64 hardsigmoid gradient on the CPU multiplies by 1/6 rounded to float32: "
        "aten/src/ATen/native/cpu/Activation.cpp's hardsigmoid_backward_kernel builds its constant as "
        "`scalar_t one_sixth(1.0f / 6.0f)` (and the vectorised `Vec kOneSixthVec(1.0f / 6.0f)`), a float "
        "division widened to double, so d/dx hardsigmoid(x) is 0.1666666716337204 where float64 and burn "
        "give 0.16666666666666666 (float32 programs cannot see it; float16 and bfloat16 compute in float). "
        "The forward divides by 6 and agrees. Found once float64 campaigns kept a share of the sites the "
        "generator avoided for burn's hard-sigmoid-autodiff-f64-in-f32 (the same op, device and dtype): "
        "avoiding burn's bug had hidden PyTorch's. Matched only as a torch-wrong gradient of a float64 "
        "hardsigmoid off by float32 rounding.",
        ("corpus/bugs/torch-hardsigmoid-grad-f64-sixth-in-f32.json", "docs/checks.md",
         "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cpu/Activation.cpp"),
        None,
        ("float64",),
        site=op_in(("hard_sigmoid",)),
        effect=Effect(("grad",), error=within_f32_rounding),
        burn_versions="*",
        framework="torch",
    ),
    bug_record(
        "torch-bf16-conv-transpose2d-amx-drops-bias",
        "PyTorch 2.15's bfloat16 conv_transpose2d on a CPU with AMX-BF16 (Sapphire Rapids and later) "
        "leaves the bias out at output positions no kernel tap reaches (a stride larger than the "
        "kernel's reach, or an output padding): 0 there, where float32, float64 and burn give the "
        "bias. oneDNN's brg_deconv:avx10_1_512_amx kernel (ONEDNN_VERBOSE=1 names it); with "
        "torch.backends.mkldnn.enabled = False PyTorch gives the bias. Seen for some kernel shapes "
        "only (a 2x1 kernel at stride 2, 2x2 at stride 3), never on CPUs without AMX-BF16: the "
        "record holds on such CPUs alone, and its case is skipped elsewhere. The arbiter's noise "
        "runs take the same kernel, so the conv's own value passes its (inflated) budget and the "
        "finding shows downstream (atan2, exp of the output) as torch-wrong.",
        ("corpus/bugs/torch-bf16-conv-transpose2d-amx-drops-bias.json", "docs/checks.md#pytorch-amx-bf16",
         "https://github.com/pytorch/pytorch/issues/148973"),
        None,
        ("bfloat16",),
        site=conv_transpose2d_bias_uncovered,
        effect=Effect(("value", "grad"), error=bias_left_out, downstream=True),
        burn_versions="*",
        framework="torch",
        host=cpu_has("amx_bf16"),
    ),
    bug_record(
        "torch-bf16-conv-weight-grad-uninitialised",
        "PyTorch 2.15's bfloat16 weight gradient of a convolution (conv1d, conv2d and their transposed forms) "
        "leaves the kernel taps that meet only padding uninitialised instead of 0: NaN, 1e25 or 2.3e-9 "
        "garbage by what the allocator held, where float64 and burn give exactly 0. On this machine's AMX-BF16 "
        "CPU oneDNN's brgconv_bwd_w:avx10_1_512_amx kernel does it 19 runs in 20 (ONEDNN_VERBOSE=1; with "
        "torch.backends.mkldnn.enabled = False none), so a fresh-worker re-check gives it again; it was first "
        "seen as a flaky result on an earlier machine, so the record names no host. Matched only as what it is: a "
        "torch-wrong gradient of the weight (input 1) of a bfloat16 convolution with such a tap, at elements "
        "where float64 gives exactly 0. No corpus case: the numbers are uninitialised memory, so no replay "
        "could insist on them; tests/unit/test_torch_bugs.py and a 20,000-program campaign of the quality "
        "suite (seed 12, program 18590) are its evidence.",
        ("docs/checks.md#pytorch-amx-bf16", "tests/unit/test_torch_bugs.py"),
        None,
        ("bfloat16",),
        site=conv_weight_tap_untouched,
        effect=Effect(("grad",), input=(1,), error=garbage_where_zero),
        burn_versions="*",
        framework="torch",
    ),
)
