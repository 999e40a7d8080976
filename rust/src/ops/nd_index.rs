//! `gather_nd` and `scatter_nd` (every update): burn's multi-dimensional indexing. The indices are an
//! `[n, k]` Int tensor (n tuples into the leading k dims); the slices they select have rank
//! 1 + D - k, a const generic of burn's calls, so each (input rank, k) pair is one arm.

use burn::tensor::IndexingUpdateOp;

use super::Inline;
use crate::value::{DynTensor, int_tensor};

/// k, the number of leading dims each index tuple names (0 for malformed indices, which no
/// arm matches).
fn leading(indices: &Inline<i64>) -> usize {
    match indices.shape.as_slice() {
        &[_, k] => k,
        _ => 0,
    }
}

/// The slices of `x` at `indices`: `[n] + x.shape[k..]`.
pub fn gather_nd(x: DynTensor, indices: &Inline<i64>) -> DynTensor {
    macro_rules! gather {
        ($t:expr, $dv:literal, $wrap:path) => {{
            let idx = int_tensor::<2>(&indices.data, &indices.shape, &$t.device());
            $wrap($t.gather_nd::<2, $dv>(idx))
        }};
    }
    match (x, leading(indices)) {
        (DynTensor::R1(t), 1) => gather!(t, 1, DynTensor::R1),
        (DynTensor::R2(t), 1) => gather!(t, 2, DynTensor::R2),
        (DynTensor::R2(t), 2) => gather!(t, 1, DynTensor::R1),
        (DynTensor::R3(t), 1) => gather!(t, 3, DynTensor::R3),
        (DynTensor::R3(t), 2) => gather!(t, 2, DynTensor::R2),
        (DynTensor::R3(t), 3) => gather!(t, 1, DynTensor::R1),
        (DynTensor::R4(t), 1) => gather!(t, 4, DynTensor::R4),
        (DynTensor::R4(t), 2) => gather!(t, 3, DynTensor::R3),
        (DynTensor::R4(t), 3) => gather!(t, 2, DynTensor::R2),
        (DynTensor::R4(t), 4) => gather!(t, 1, DynTensor::R1),
        (x, _) => panic!(
            "gather_nd: indices of shape {:?} do not index a rank-{} input ([n, k], 1 <= k <= rank)",
            indices.shape,
            x.rank()
        ),
    }
}

/// `x` with `values` (`[n] + x.shape[k..]`) written at `indices` by `update` (with Add, repeats
/// accumulate; the catalog gives the other updates distinct tuples).
pub fn scatter_nd(
    x: DynTensor,
    values: DynTensor,
    indices: &Inline<i64>,
    update: IndexingUpdateOp,
) -> DynTensor {
    macro_rules! scatter {
        ($t:expr, $v:expr, $wrap:path) => {{
            let idx = int_tensor::<2>(&indices.data, &indices.shape, &$t.device());
            $wrap($t.scatter_nd(idx, $v, update))
        }};
    }
    match (x, values, leading(indices)) {
        (DynTensor::R1(t), DynTensor::R1(v), 1) => scatter!(t, v, DynTensor::R1),
        (DynTensor::R2(t), DynTensor::R2(v), 1) => scatter!(t, v, DynTensor::R2),
        (DynTensor::R2(t), DynTensor::R1(v), 2) => scatter!(t, v, DynTensor::R2),
        (DynTensor::R3(t), DynTensor::R3(v), 1) => scatter!(t, v, DynTensor::R3),
        (DynTensor::R3(t), DynTensor::R2(v), 2) => scatter!(t, v, DynTensor::R3),
        (DynTensor::R3(t), DynTensor::R1(v), 3) => scatter!(t, v, DynTensor::R3),
        (DynTensor::R4(t), DynTensor::R4(v), 1) => scatter!(t, v, DynTensor::R4),
        (DynTensor::R4(t), DynTensor::R3(v), 2) => scatter!(t, v, DynTensor::R4),
        (DynTensor::R4(t), DynTensor::R2(v), 3) => scatter!(t, v, DynTensor::R4),
        (DynTensor::R4(t), DynTensor::R1(v), 4) => scatter!(t, v, DynTensor::R4),
        (x, v, _) => panic!(
            "scatter_nd: indices of shape {:?} and values of rank {} do not fit a rank-{} input \
             ([n, k], values of rank 1 + rank - k)",
            indices.shape,
            v.rank(),
            x.rank()
        ),
    }
}
