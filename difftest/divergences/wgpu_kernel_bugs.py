"""Known bugs of burn's Wgpu kernels (burn-cubecl, cubek-reduce, cubecl): wrong elements read or
written, whatever the dtype's precision; each matched by a model of the kernel's defect where one
decides it (wgpu_layouts.py, wgpu_reduce.py) (docs/backends.md). known_bugs.py lists them with
the others."""

from __future__ import annotations

from difftest.divergences.backend_bugs import absolute_rounding_at_one
from difftest.divergences.bug_records import Effect, KnownBug, bug_record
from difftest.divergences.bug_sites import log_softmax_of_one_computed, repeated_nd_tuples
from difftest.divergences.knowledge import burn_source
from difftest.divergences.wgpu_sites import (
    channels_last_grad_summed,
    last_two_swapped_after_rank_expand,
    misvectorised_view,
    reduce_misvectorised,
    topk_slots_misplaced,
)

REDUCE_MISVECTORISED = "wgpu-reduce-misvectorised-strided-input"

WGPU_KERNEL_BUGS: tuple[KnownBug, ...] = (
    bug_record(
        REDUCE_MISVECTORISED,
        "a reduction along a dim of a tensor burn's Wgpu backend holds in a layout other than the "
        "contiguous one can read the wrong elements: cubek-reduce 0.3.1 (launch/utils.rs, "
        "generate_vector_size) sizes the vector of a reduction along a dim whose stride is not 1 by "
        "the product of the axes where the input's and the output's innermost-first orders agree at "
        "*any* position, where it means their common prefix, so a vector of 4 or 2 spans axes the "
        "output orders differently; the reader loads v consecutive elements from offset / v (truncated) "
        "and the writer stores lane j at r * v + j. Measured: x [1, 4, 3, 2] on the plain device -> "
        "transpose -> max gives 2.6003 where the largest element is 2.7004 (flat indices 4 to 7 and 16 "
        "to 19 are never read); x [2, 3, 4, 5] -> permute [0, 3, 2, 1] -> sum_dim, mean_dim, max_dim, "
        "prod_dim or topk along dim 0; the mean of adaptive_avg_pool2d(x [2, 2, 6, 6], [1, 4]) - 1.37 "
        "(burn-cubecl's pools and conv2d return a channels-last buffer viewed as NCHW; an elementwise op "
        "keeps that memory order). Rank 2 and 3 were right in every permutation tried; a whole-tensor sum "
        "is right (shared_sum). The site replays the kernel's addresses on the layout burn-cubecl gives "
        "the input (difftest/divergences/wgpu_layouts.py, wgpu_reduce.py): 0 disagreements with 1,728 "
        "measured (shape, permutation, dim) cases per op in float32, and in float64, where a vector "
        "holds 2 elements at most (1,728 of 1,728 sum_dim, max_dim and mean cases agree). Found by Wgpu "
        "campaigns (seed 301: program 745, and a pool -> mean); not measured on a GPU. A real bug, "
        "reportable upstream.",
        ("corpus/backends/wgpu-reduce-misvectorised-strided-input.json",
         "corpus/backends/wgpu-reduce-misvectorised-after-pool.json",
         "https://docs.rs/crate/cubek-reduce/0.3.1/source/src/launch/utils.rs",
         burn_source("burn-cubecl", "src/kernel/memory_order.rs")),
        None,
        ("float32", "float64"),
        site=reduce_misvectorised,
        effect=Effect(("value", "grad"), downstream=True),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-topk-slots-written-out-of-place",
        "topk with k >= 2 on burn's Wgpu backend writes results to the wrong output slots: "
        "topk(x, k=2, dim=1) of a contiguous [2, 3, 2, 2] tensor of distinct values puts another slice's "
        "value (or 0, or garbage such as -0.077 for inputs all 0.5) in some outputs, and topk's gradient, "
        "which routes through the same kernel's indices, goes to the wrong elements. burn-cubecl's "
        "float_topk is cubek-reduce 0.3.1's reduce_dim with TopK(k): the output's k slots are laid out in "
        "input-vector units where the output is written element by element "
        "(components/global/base.rs reduction_output_base, writers/layout.rs), and idle_check compares a "
        "slot offset with the output's length, so the last cube's spare units write too (which write "
        "lands last decides the result). The site replays the kernel's writes on the input's layout "
        "(difftest/divergences/wgpu_reduce.py topk_verdict; 0 contradictions with 2,640 measured "
        "cases at k = 2 and 3); sort and gather at topk's indices are right, and the same program in "
        "float64 was right (2 float64 elements to a vector). Found by a Wgpu campaign (seed 301, "
        "program 1492); not measured on a GPU. "
        "A real bug, reportable upstream.",
        ("corpus/backends/wgpu-topk-slots-written-out-of-place.json",
         "https://docs.rs/crate/cubek-reduce/0.3.1/source/src/components/global/base.rs"),
        None,
        ("float32", "float64"),
        site=topk_slots_misplaced,
        effect=Effect(("value", "grad"), downstream=True),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-scatter-nd-add-loses-repeated-updates",
        "scatter_nd with IndexingUpdateOp::Add on burn's Wgpu backend keeps one of the updates an index "
        "tuple is given more than once, where burn documents that Add accumulates them: [0, 0, 0] "
        "scatter_nd-added [0.5, 0.25, 0.125] at [[2], [0], [2]] gives [0.25, 0, 0.125] where PyTorch "
        "(index_put with accumulate) and Flex give [0.25, 0, 0.625]; gather_nd's gradient, a scatter_nd "
        "add of the incoming gradient at the same indices, loses the same way (gather_nd of rows "
        "[[0], [0], [0]] gives row 0 a gradient of 1 where it is 3). burn-cubecl 0.22.1 "
        "kernel/index/scatter_nd.rs runs one unit per updated element, each reading data[i], adding its "
        "value and writing data[i] back, with no atomic: units of repeated tuples race, and the last "
        "write wins. Found by a Wgpu campaign of the new nd ops (seed 4, its first 300 programs: 28 "
        "scatter_nd and 20 gather_nd findings); not measured on a GPU. A real bug, reportable upstream.",
        ("corpus/backends/wgpu-scatter-nd-add-loses-repeated-updates.json",
         "https://docs.rs/crate/burn-cubecl/0.22.1/source/src/kernel/index/scatter_nd.rs"),
        None,
        site=repeated_nd_tuples,
        effect=Effect(("value", "grad"), downstream=True),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-channels-last-grad-summed-misvectorised",
        "the gradient through a 2-d pool or conv2d whose input's gradient is then summed along a dim (by "
        "the backward of a sum_dim, mean_dim, softmax or log_softmax before it) lands on the wrong "
        "elements on burn's Wgpu backend: x [2, 4, 4, 6] -> mean_dim(dim 2) -> adaptive_avg_pool2d(output "
        "[1, 4]) -> backward gives each width row [.125, .125, .125, .125, .25, .25] where PyTorch and Flex "
        "give [.125, .25, .125, .125, .25, .125] (the same total, moved); x [2, 4, 4, 1] -> log_softmax(dim "
        "3) -> conv2d(1x1) -> backward gives x a gradient where PyTorch's is 0 (log_softmax over one "
        "element). The cause is the one of wgpu-reduce-misvectorised-strided-input, in the backward: the "
        "pool's and the convolution's backward return the gradient of their input channels-last "
        "(burn-cubecl kernel/pool/base.rs, kernel/conv), and the backward before it sums that gradient "
        "along the dim (burn-autodiff float_sum_dim / float_mean_dim: sum_dim of the incoming gradient; "
        "burn-backend's log_softmax, x - max - log(sum_dim(exp(..))): sum_dim of the negated gradient, a "
        "fresh elementwise result), a read cubek-reduce misvectorises where the reduction model says. "
        "Replayed value for value: every [B, C, H, W] up to [2, 4, 3, 3] and every dim, through conv2d and "
        "avg_pool2d, directly and through add and scatter_nd (2,472 measured cases in float32, 0 "
        "disagreements; 204 sum_dim and mean_dim cases in float64); softmax's and log_softmax's float64 "
        "backward is wrong everywhere on Wgpu (its exp) and not this record's. Found by Wgpu campaigns "
        "(seed 301, program 3364; --profile no-half seed 21, program 117); not measured on a GPU. One "
        "report upstream with its root.",
        ("corpus/backends/wgpu-channels-last-grad-summed-misvectorised.json",
         "corpus/backends/wgpu-channels-last-grad-summed-misvectorised-conv2d.json",
         burn_source("burn-cubecl", "src/kernel/pool/base.rs"), burn_source("burn-autodiff", "src/ops/tensor.rs"),
         "https://docs.rs/crate/burn-backend/0.22.1/source/src/backend/ops/activation.rs"),
        None,
        ("float32", "float64"),
        site=channels_last_grad_summed,
        effect=Effect(("grad",), downstream=True),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-grad-misplaced-after-expand-and-last-two-swap",
        "the gradient through an expand that adds a leading dim followed by a permute that swaps the last "
        "two dims goes to the wrong elements on burn's Wgpu backend: x [2, 2, 2] -> expand [2, 2, 2, 2] -> "
        "permute [0, 1, 3, 2] -> narrow(dim 2, 0, 1) -> backward gives x.grad 2 where PyTorch, Flex and "
        "NdArray give 0 (and 0 where they give 2); with a mul by a leaf instead of the narrow, 10 where "
        "they give 14. The cause is the one of wgpu-reduce-misvectorised-strided-input, in the backward: "
        "expand's backward sums the incoming gradient over the added dim, and that gradient is permute's "
        "backward, a view [2, 2, 2, 2] of strides [8, 4, 1, 2], whose sum_dim(0) reads the wrong elements "
        "(measured alone too). Measured right: the same permute of a leaf, of an expand that broadcasts a "
        "size-1 dim without adding one, permutes [1, 0, 2, 3], [0, 2, 1, 3] and [3, 1, 2, 0], and rank 3 "
        "([2, 2] -> [2, 2, 2], permute [0, 2, 1]: a sum over strides [4, 1, 2] that vectorises right). "
        "Found by a Wgpu campaign (seed 301); not measured on a GPU. One report upstream with its root.",
        ("corpus/backends/wgpu-grad-misplaced-after-expand-and-last-two-swap.json",
         burn_source("burn-cubecl", "src/ops/tensor.rs")),
        None,
        ("float32",),
        site=last_two_swapped_after_rank_expand,
        effect=Effect(("grad",), downstream=True),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-log-softmax-of-one-element-not-zero",
        "log_softmax over a dim of size 1 on burn's Wgpu backend is not exactly 0 (PyTorch's and Flex's "
        "result; x - max(x) - log(exp(0))) when its input comes from interpolate_nearest then sub_scalar: "
        "up to 2.1e-7, a few float32 ulps of the inputs (about 1), as if the fused kernel rounded x once "
        "for the max and differently for the difference. Measured: the same values from a leaf, from "
        "interpolate_nearest alone, from mean_dim or mul_scalar then sub_scalar, and softmax instead, are "
        "exact. Found by a Wgpu campaign (seed 301, program 326); the fused kernel is a reading, not "
        "traced. An absolute error of at most 4 float32 ulps of 1 is this record; more is news.",
        ("corpus/backends/wgpu-log-softmax-of-one-element-not-zero.json",),
        None,
        ("float32",),
        site=log_softmax_of_one_computed,
        effect=Effect(("value",), error=absolute_rounding_at_one),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-view-read-in-misaligned-vectors",
        "a view whose strides are not all multiples of the vector its last dim is read in gives the wrong "
        "elements on burn's Wgpu backend: x [2, 3] = [0, 1, 2, 3, 4, 5] unfolded along dim 1 to one window "
        "of 2 (step 2) is the view [2, 1, 2] with strides [3, 2, 1] and reads back as [0, 1, 2, 3] where it "
        "is [0, 1, 3, 4] (PyTorch, Flex and NdArray), and so does any op that reads it (exp, sum). "
        "cubecl-core 0.11.3 `try_tensor_vector_size_parallel` (lib.rs) sizes the vector by the smallest "
        "other stride only (2, the one-window dim's, never applied), though its own comment says every "
        "other stride must be a multiple of it; cubecl-std's copy then loads from offset / 2 = 3 / 2 = 1. "
        "Decided by the model of difftest/divergences/wgpu_reduce.py (defect 3) on the layouts of "
        "wgpu_layouts.py: it agreed with the backend on each of the 1,710 unfold views of ranks 1 to 3, sizes "
        "up to 4 and steps 1 to 3, in float32 and in float64 (18 wrong in each). Found by a Wgpu campaign of "
        "the new ops (--profile no-half, seed 4, "
        "program 299); not measured on a GPU. A real bug, reportable upstream.",
        ("corpus/backends/wgpu-view-read-in-misaligned-vectors.json",
         "https://docs.rs/crate/cubecl-core/0.11.3/source/src/lib.rs",
         burn_source("burn-cubecl", "src/ops/base.rs")),
        None,
        site=misvectorised_view,
        effect=Effect(("value", "grad"), downstream=True),
        backends=("wgpu",),
    ),
)
