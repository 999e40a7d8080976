"""Where the Wgpu records strike (difftest/divergences/wgpu_sites.py, bug_sites.py): each site holds where the
bug was measured and not at the neighbours measured right, so a finding there is news."""

from __future__ import annotations

from difftest.divergences.bug_sites import log_softmax_of_one_computed, wgpu_f64_site
from difftest.divergences.wgpu_layouts import burn_layouts
from difftest.divergences.wgpu_sites import (
    channels_last_grad_summed,
    last_two_swapped_after_rank_expand,
    misvectorised_view,
    reduce_misvectorised,
    topk_slots_misplaced,
)
from difftest.program.ir import Program
from difftest.program.statements import Apply, Leaf, Module, OpCall, Param, Statement


def _leaf(shape: tuple[int, ...]) -> Leaf:
    n = 1
    for s in shape:
        n *= s
    return Leaf("x", shape, tuple(0.5 for _ in range(n)), "autodiff", True)



def test_a_pool_after_a_height_reduction_strikes_where_the_reductions_backward_misreads() -> None:
    """The pool's backward returns its input's gradient channels-last; the reduction's backward
    sums it along the reduced dim of size 1: misvectorised for [B, C, 1, W] with B even, C and
    W >= 2 and C * W even (measured: helper sweep of 900 cases; docs/backends.md)."""
    def site(shape: tuple[int, ...], reduce: str, dim: int, pool: str = "adaptive_avg_pool2d") -> bool:
        attrs = ({"output_size": [1, 4]} if pool == "adaptive_avg_pool2d"
                 else {"kernel": [1, 2], "stride": [1, 2], "padding": [0, 0]})
        prior: list[Statement] = [_leaf(shape), OpCall("m", reduce, ("x",), {"dim": dim})]
        return channels_last_grad_summed.holds(OpCall("p", pool, ("m",), attrs), prior, "float32")

    assert site((2, 4, 4, 6), "mean_dim", 2) and site((2, 4, 4, 7), "sum_dim", 2)
    assert site((2, 4, 4, 6), "mean_dim", 2, "avg_pool2d") and site((2, 4, 4, 6), "mean_dim", 2, "max_pool2d")
    assert not site((1, 4, 4, 7), "mean_dim", 2)  # batch 1: vectors of 1
    assert not site((2, 1, 4, 7), "mean_dim", 2)  # one channel
    assert not site((2, 3, 4, 7), "mean_dim", 2)  # C * W odd
    assert not site((2, 4, 4, 6), "mean_dim", 3)  # a width reduction: right
    assert not site((2, 4, 4, 6), "max_dim", 2)  # max_dim's backward sums nothing
    assert not channels_last_grad_summed.holds(
        OpCall("p", "adaptive_avg_pool2d", ("x",), {"output_size": [1, 4]}), [_leaf((2, 4, 1, 6))], "float32")


def test_a_conv2d_after_log_softmax_strikes_through_ops_that_pass_the_gradient_on() -> None:
    """conv2d's backward returns its input's gradient channels-last too; log_softmax's backward
    sums the negated gradient (a fresh elementwise result of it), softmax's the gradient as it is;
    add and scatter_nd hand the gradient on unchanged (measured: tests/backends)."""
    kernel = Leaf("k", (4, 4, 1, 1), tuple(0.5 for _ in range(16)), "plain", False)
    conv = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1}

    def site(shape: tuple[int, ...], op: str, dim: int, between: str = "", dtype: str = "float32") -> bool:
        prior: list[Statement] = [_leaf(shape), kernel, OpCall("m", op, ("x",), {"dim": dim})]
        source = "m"
        if between == "scatter_nd":
            prior += [Leaf("u", (1, *shape[1:]), tuple(0.5 for _ in range(4 * shape[2] * shape[3])), "plain", False),
                      OpCall("z", "scatter_nd", ("m", "u"), {"indices": {"shape": [1, 1], "data": [0]}})]
            source = "z"
        elif between == "exp":
            prior.append(OpCall("z", "exp", ("m",)))
            source = "z"
        return channels_last_grad_summed.holds(OpCall("p", "conv2d", (source, "k"), conv), prior, dtype)

    assert site((2, 4, 4, 1), "log_softmax", 3) and site((2, 4, 4, 1), "log_softmax", 3, "scatter_nd")
    assert not site((2, 4, 4, 1), "softmax", 3)  # the gradient as it is: read right there
    assert site((2, 4, 1, 2), "softmax", 2) and site((2, 4, 1, 2), "sum_dim", 2)
    assert not site((2, 4, 4, 3), "log_softmax", 3)  # measured right
    assert not site((2, 4, 4, 1), "log_softmax", 3, "exp")  # exp's backward makes a fresh gradient
    assert not site((2, 4, 4, 1), "log_softmax", 3, dtype="float64")  # not measured apart from exp's


def test_log_softmax_of_one_element_needs_a_computed_input() -> None:
    sub = OpCall("b", "sub_scalar", ("x",), {"scalar": 0.125})
    assert log_softmax_of_one_computed(OpCall("y", "log_softmax", ("b",), {"dim": 3}), [_leaf((2, 4, 4, 1)), sub])
    assert not log_softmax_of_one_computed(OpCall("y", "log_softmax", ("x",), {"dim": 3}), [_leaf((2, 4, 4, 1))])
    assert not log_softmax_of_one_computed(OpCall("y", "log_softmax", ("b",), {"dim": 2}), [_leaf((2, 4, 4, 1)), sub])


def test_float64_on_wgpu_strikes_transcendentals_norms_and_parameters_read_after_them() -> None:
    norm = Module("m", "layer_norm", attrs={"d_model": 3, "epsilon": 1e-5})
    linear = Module("n", "linear")
    x = _leaf((2, 3))
    assert wgpu_f64_site(OpCall("y", "exp", ("x",)), [x])
    assert wgpu_f64_site(OpCall("y", "powi_scalar", ("x",), {"exponent": 3}), [x])
    assert not wgpu_f64_site(OpCall("y", "powi_scalar", ("x",), {"exponent": 2}), [x])
    assert not wgpu_f64_site(OpCall("y", "mul", ("x", "x")), [x])
    # the inverse functions are WGSL builtins too (measured: asin(0.5) = 0.52339 in float64)
    for op in ("asin", "acos", "asinh", "acosh", "atanh"):
        assert wgpu_f64_site(OpCall("y", op, ("x",)), [x]), op
    assert wgpu_f64_site(OpCall("y", "atan2", ("x", "x")), [x])
    assert not wgpu_f64_site(OpCall("y", "hypot", ("x", "x")), [x])  # measured right
    assert wgpu_f64_site(Apply("y", "m", "x"), [x, norm])
    assert not wgpu_f64_site(Apply("y", "n", "x"), [x, linear])
    assert wgpu_f64_site(Param("p", "n", "weight"), [x, linear, norm, Apply("y", "m", "x")])
    assert not wgpu_f64_site(Param("p", "n", "weight"), [x, linear, Apply("y", "n", "x")])


def test_the_expand_then_swap_site_needs_a_rank_raising_expand_and_the_last_two_dims_swapped() -> None:
    def site(shape: tuple[int, ...], expand: list[int], axes: list[int], source: str = "expand") -> bool:
        prior: list[Statement] = [_leaf(shape), OpCall("e", source, ("x",), {"shape": expand} if source == "expand"
                                                        else {"scalar": 2.0})]
        return last_two_swapped_after_rank_expand(OpCall("p", "permute", ("e",), {"axes": axes}), prior)

    assert site((2, 2, 2), [2, 2, 2, 2], [0, 1, 3, 2])
    assert not site((2, 1, 2, 2), [2, 2, 2, 2], [0, 1, 3, 2])  # a size-1 dim broadcast, no new dim: right
    assert not site((2, 2, 2), [2, 2, 2, 2], [1, 0, 2, 3])  # other dims moved: right
    assert not site((2, 2, 2), [2, 2, 2, 2], [0, 2, 1, 3])
    assert not site((2, 2, 2), [2, 2, 2, 2], [0, 1, 3, 2], source="mul_scalar")  # not an expand
    assert not last_two_swapped_after_rank_expand(OpCall("p", "permute", ("x",), {"axes": [0, 1, 3, 2]}),
                                                  [_leaf((2, 2, 2, 2))])  # a leaf: right


def _reduce(op: str, source: str, prior: list[Statement], dtype: str = "float32", **attrs: int) -> bool:
    return reduce_misvectorised.holds(OpCall("r", op, (source,), dict(attrs)), prior, dtype)


def test_a_reduction_strikes_where_the_kernel_reads_other_elements() -> None:
    """The measured [2, 3, 4, 5] pattern (tests/backends/test_wgpu_layouts.py measures many more):
    after permute [0, 3, 2, 1] a reduction along dim 0 reads the wrong elements, along the
    others right; a leaf, rank 3 and a whole-tensor sum are right."""
    x = _leaf((2, 3, 4, 5))
    p = OpCall("p", "permute", ("x",), {"axes": [0, 3, 2, 1]})
    for op in ("sum_dim", "mean_dim", "max_dim", "prod_dim", "gather_argmax", "softmax", "var"):
        assert _reduce(op, "p", [x, p], dim=0), op
        assert not any(_reduce(op, "p", [x, p], dim=d) for d in (1, 2, 3)), op
    assert _reduce("topk", "p", [x, p], dim=0, k=1)
    assert not _reduce("sum_dim", "x", [x], dim=0)
    three = OpCall("p", "permute", ("x",), {"axes": [0, 2, 1]})
    assert not any(_reduce("sum_dim", "p", [_leaf((3, 4, 5)), three], dim=d) for d in range(3))
    # whole tensor: mean and max read a wrong set of elements, the sum is shared_sum (right)
    t = OpCall("t", "transpose", ("x",))
    assert _reduce("max", "t", [_leaf((1, 4, 3, 2)), t]) and _reduce("mean", "t", [_leaf((1, 4, 3, 2)), t])
    assert not _reduce("sum", "t", [_leaf((1, 4, 3, 2)), t])
    assert not _reduce("max", "t", [_leaf((2, 2, 3, 2)), t])


def test_the_campaigns_pool_and_convolution_programs_are_this_record() -> None:
    """burn-cubecl's pools and conv2d return a channels-last buffer viewed as NCHW, and an
    elementwise op after them keeps that memory order."""
    x = _leaf((2, 2, 6, 6))
    pool = OpCall("y", "adaptive_avg_pool2d", ("x",), {"output_size": [1, 4]})
    sub = OpCall("s", "sub_scalar", ("y",), {"scalar": -1.37})
    assert _reduce("mean", "s", [x, pool, sub]) and _reduce("mean", "y", [x, pool])
    whole = OpCall("y", "adaptive_avg_pool2d", ("x",), {"output_size": [1, 1]})  # global_avg_pool2d: contiguous
    assert not _reduce("mean", "y", [x, whole]) and not _reduce("sum_dim", "y", [x, whole], dim=1)
    maxpool = OpCall("y", "max_pool2d", ("x",), {"kernel": [2, 1], "stride": [3, 2], "padding": [0, 0]})
    assert _reduce("topk", "y", [_leaf((2, 2, 2, 4)), maxpool], dim=2, k=1)
    conv = OpCall("y", "conv2d", ("x", "w"), {"stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "groups": 1})
    prior: list[Statement] = [_leaf((2, 2, 1, 6)), Leaf("w", (2, 2, 2, 1), (0.5,) * 8, "autodiff", True), conv]
    assert _reduce("max_dim", "y", prior, "float64", dim=2)
    assert not _reduce("max_dim", "y", prior, "float64", dim=3)


def test_topk_of_two_or_more_strikes_where_its_slots_are_written_out_of_place() -> None:
    def site(shape: tuple[int, ...], dim: int, k: int) -> bool:
        return topk_slots_misplaced.holds(OpCall("y", "topk", ("x",), {"dim": dim, "k": k}), [_leaf(shape)], "float32")

    assert site((2, 3, 2, 2), 1, 2) and site((2, 3, 1, 6), 0, 2)
    assert not site((2, 3, 2, 2), 3, 2) and not site((2, 3, 2, 2), 2, 2)  # inner dims: right
    assert not site((2, 3, 2, 2), 1, 1)  # k = 1: no slots to misplace


def test_burn_cubecl_layouts() -> None:
    x = _leaf((2, 1, 4, 2))
    p = OpCall("p", "permute", ("x",), {"axes": [0, 3, 1, 2]})
    e = OpCall("e", "neg", ("p",))
    both = OpCall("b", "add", ("p", "x2"))
    x2 = _leaf((2, 2, 1, 4))
    x2 = Leaf("x2", x2.shape, x2.data, "plain", False)
    out = burn_layouts([x, p, e, x2, both])
    assert out["p"] == ((2, 2, 1, 4), (8, 1, 8, 2))  # a view
    assert out["e"] == ((2, 2, 1, 4), (8, 1, 16, 2))  # dense in memory order, the size-1 axis outermost
    assert out["b"] == ((2, 2, 1, 4), (8, 4, 4, 1))  # two operands of equal bytes disagree: logical order
    wide = _leaf((2, 2, 8, 4))
    aligned = OpCall("n", "narrow", ("x",), {"dim": 2, "start": 2, "length": 4})  # 2 * 4 floats = 32 bytes
    unaligned = OpCall("m", "narrow", ("x",), {"dim": 2, "start": 1, "length": 4})
    got = burn_layouts([wide, aligned, unaligned])
    assert got["n"] == ((2, 2, 4, 4), (64, 32, 4, 1)) and got["m"] == ((2, 2, 4, 4), (32, 16, 4, 1))


def test_a_wrong_value_no_single_op_makes_is_signed_by_the_op_that_shows_it() -> None:
    """Two composition bugs (a layout two ops make together) are two cases: `graph@max`, not one
    `graph` for every wrong value the localiser cannot pin on one op."""
    from types import SimpleNamespace
    from typing import cast

    from difftest.findings.localisation import Localisation
    from difftest.findings.triage import forward_fault
    from difftest.oracle.compare import Mismatch, Verdict

    program = Program((_leaf((1, 4, 3, 2)), OpCall("t", "transpose", ("x",)), OpCall("m", "max", ("t",)),
                       OpCall("s", "sum", ("t",))))
    verdict = cast(Verdict, SimpleNamespace(program=program))
    graph = Localisation(None, "graph", "value", None, "float32", "large", "burn-wrong")
    at = {ident: forward_fault(verdict, Mismatch("value", ident, None, None, None, None), graph)
          for ident in ("m", "s")}
    assert at["m"] is not None and at["m"].startswith("burn-wrong:-:graph@max:forward #"), at
    assert at["s"] is not None and at["s"].startswith("burn-wrong:-:graph@sum:forward #"), at


def test_a_view_read_in_vectors_its_strides_do_not_fit_strikes_at_the_view() -> None:
    """unfold to one window leaves a dim of one element whose stride (2) is the smallest other:
    cubecl reads the last dim in vectors of 2 that the outer stride 3 does not fit (measured on
    the backend: tests/backends/test_wgpu_layouts.py)."""
    x = Leaf("x", (2, 3), (0.0, 1.0, 2.0, 3.0, 4.0, 5.0), "autodiff", True)
    one = OpCall("y", "unfold", ("x",), {"dim": 1, "size": 2, "step": 2})
    assert burn_layouts([x, one])["y"] == ((2, 1, 2), (3, 2, 1))
    assert misvectorised_view.holds(one, [x], "float32") and misvectorised_view.holds(one, [x], "float64")
    # two windows of a dim of 4: strides [4, 2, 1], all multiples of the vector of 2
    x4 = Leaf("x", (2, 4), tuple(float(i) for i in range(8)), "autodiff", True)

    def unfold(size: int, step: int) -> OpCall:
        return OpCall("y", "unfold", ("x",), {"dim": 1, "size": size, "step": step})

    assert not misvectorised_view.holds(unfold(2, 2), [x4], "float32")
    # windows of 1 element: the last dim is read one element at a time
    assert not misvectorised_view.holds(unfold(1, 2), [x], "float32")
    # overlapping windows (step 1): the smallest other stride is 1
    assert not misvectorised_view.holds(unfold(2, 1), [x], "float32")
