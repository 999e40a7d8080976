"""Where the Wgpu records strike (difftest/divergences/bug_sites.py): each site holds where the
bug was measured and not at the neighbours measured right, so a finding there is news."""

from __future__ import annotations

from difftest.divergences.bug_sites import (
    adaptive_pool_after_h_reduction,
    extreme_of_last_two_swapped,
    last_two_swapped_after_rank_expand,
    log_softmax_of_one_computed,
    topk_rank4_outer_dim,
    wgpu_f64_site,
)
from difftest.program.ir import Program
from difftest.program.statements import Apply, Leaf, Module, OpCall, Param, Statement


def _leaf(shape: tuple[int, ...]) -> Leaf:
    n = 1
    for s in shape:
        n *= s
    return Leaf("x", shape, tuple(0.5 for _ in range(n)), "autodiff", True)



def test_topk_strikes_rank_4_outer_dims_with_k_of_two_or_more() -> None:
    def site(shape: tuple[int, ...], dim: int, k: int) -> bool:
        return topk_rank4_outer_dim(OpCall("y", "topk", ("x",), {"dim": dim, "k": k}), [_leaf(shape)])

    assert site((2, 3, 2, 2), 1, 2) and site((2, 3, 1, 6), 0, 2)
    assert not site((2, 3, 4), 1, 2)  # rank 3: right
    assert not site((2, 3, 2, 2), 3, 2) and not site((2, 3, 2, 2), 2, 2)  # inner dims: right
    assert not site((2, 3, 2, 2), 1, 1)  # k = 1: right


def test_the_adaptive_pool_site_needs_a_height_reduction_and_overlapping_width_windows() -> None:
    def site(reduce: str, dim: int, out: list[int]) -> bool:
        prior: list[Statement] = [_leaf((2, 4, 4, 6)), OpCall("m", reduce, ("x",), {"dim": dim})]
        return adaptive_pool_after_h_reduction(OpCall("p", "adaptive_avg_pool2d", ("m",), {"output_size": out}), prior)

    assert site("mean_dim", 2, [1, 4]) and site("sum_dim", 2, [3, 4])
    assert not site("mean_dim", 2, [1, 3])  # 6 -> 3: no overlap
    assert not site("mean_dim", 3, [4, 1])  # a width reduction: right
    assert not site("max_dim", 2, [1, 4])
    assert not adaptive_pool_after_h_reduction(
        OpCall("p", "adaptive_avg_pool2d", ("x",), {"output_size": [1, 4]}), [_leaf((2, 4, 1, 6))])  # a leaf


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


def test_max_and_min_strike_after_the_last_two_dims_of_rank_4_are_swapped() -> None:
    def site(shape: tuple[int, ...], swap: OpCall, reduce: str = "max") -> bool:
        return extreme_of_last_two_swapped(OpCall("m", reduce, ("t",)), [_leaf(shape), swap])

    transpose = OpCall("t", "transpose", ("x",))
    assert site((1, 4, 3, 2), transpose) and site((1, 4, 3, 2), transpose, "min")
    assert site((1, 4, 3, 2), OpCall("t", "permute", ("x",), {"axes": [0, 1, 3, 2]}))
    assert site((1, 4, 3, 2), OpCall("t", "swap_dims", ("x",), {"dim1": 3, "dim2": 2}))
    assert not site((1, 4, 3, 2), OpCall("t", "permute", ("x",), {"axes": [1, 0, 2, 3]}))
    assert not site((4, 3, 2), transpose)  # rank 3: right
    assert not site((1, 4, 3, 2), transpose, "sum")  # sum: right


def test_a_wrong_value_no_single_op_makes_is_signed_by_the_op_that_shows_it() -> None:
    """Two composition bugs (a layout two ops make together) are two cases: `graph@max`, not one
    `graph` for every wrong value the localiser cannot pin on one op."""
    from types import SimpleNamespace
    from typing import cast

    from difftest.findings.localise import Localisation
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
