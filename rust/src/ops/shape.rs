//! Shape inference: the shape of an op's result as burn computes it, without running it (the
//! element budget, [`crate::program::Program::check_bounds`], and the `wrong-dim` fault).

use super::nn::{self, conv, pool};
use super::{Op, check_shape, extra};

/// The broadcast of two shapes after burn's rank promotion (leading size-1 dims), or `None`.
pub(crate) fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let pad = |s: &[usize]| {
        let mut p = vec![1; rank - s.len()];
        p.extend_from_slice(s);
        p
    };
    pad(a)
        .into_iter()
        .zip(pad(b))
        .map(|(x, y)| match (x, y) {
            _ if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// The number of elements of a shape (saturating: shapes of bombs overflow `u64`).
pub fn numel(shape: &[usize]) -> u64 {
    shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64))
}

impl Op {
    /// The shape of the op's result on inputs of these shapes, as burn computes it, without
    /// running it; `None` when burn would reject the inputs (it panics at run time). Used by
    /// the element budget ([`crate::program::Program::check_bounds`]) and the `wrong-dim` fault.
    pub fn infer_shape(&self, inputs: &[Vec<usize>]) -> Option<Vec<usize>> {
        let x = inputs.first()?.clone();
        let rank = x.len();
        let with = |dim: usize, extent: usize| {
            let mut s = x.clone();
            *s.get_mut(dim)? = extent;
            Some(s)
        };
        let shape = match self {
            Op::Exp {}
            | Op::Log {}
            | Op::Log1p {}
            | Op::Sqrt {}
            | Op::Sin {}
            | Op::Cos {}
            | Op::Tan {}
            | Op::Tanh {}
            | Op::Sinh {}
            | Op::Cosh {}
            | Op::Erf {}
            | Op::Atan {}
            | Op::Asin {}
            | Op::Acos {}
            | Op::Asinh {}
            | Op::Acosh {}
            | Op::Atanh {}
            | Op::Recip {}
            | Op::Square {}
            | Op::Abs {}
            | Op::Neg {}
            | Op::Sign {}
            | Op::Floor {}
            | Op::Ceil {}
            | Op::Round {}
            | Op::Trunc {}
            | Op::Sigmoid {}
            | Op::Relu {}
            | Op::Gelu {}
            | Op::Silu {}
            | Op::Cast { .. }
            | Op::ToDevice {}
            | Op::LeakyRelu { .. }
            | Op::PowfScalar { .. }
            | Op::PowiScalar { .. }
            | Op::Clamp { .. }
            | Op::ClampMin { .. }
            | Op::ClampMax { .. }
            | Op::AddScalar { .. }
            | Op::SubScalar { .. }
            | Op::MulScalar { .. }
            | Op::DivScalar { .. }
            | Op::RemainderScalar { .. }
            | Op::Flip { .. } => x,
            Op::MaskFill { mask, .. } => (mask.shape == x).then_some(x)?,
            Op::Add {}
            | Op::Sub {}
            | Op::Mul {}
            | Op::Div {}
            | Op::Powf {}
            | Op::Maximum {}
            | Op::Minimum {}
            | Op::Atan2 {}
            | Op::Hypot {}
            | Op::MaskWhere { .. } => broadcast_shapes(&x, inputs.get(1)?)?,
            Op::Cross { dim } => {
                let y = inputs.get(1)?;
                (*y == x && x.get(*dim) == Some(&3)).then_some(x)?
            }
            Op::Matmul {} => {
                let y = inputs.get(1)?;
                let (m, k) = (x.len().checked_sub(2)?, y.len().checked_sub(2)?);
                if x[m + 1] != y[k] {
                    return None;
                }
                let mut s = broadcast_shapes(&x[..m], &y[..k])?;
                s.extend([x[m], y[k + 1]]);
                s
            }
            Op::Sum {} | Op::Mean {} | Op::Max {} | Op::Min {} | Op::Prod {} => vec![1],
            Op::SumDim { dim }
            | Op::MeanDim { dim }
            | Op::MaxDim { dim }
            | Op::MinDim { dim }
            | Op::ProdDim { dim } => with(*dim, 1)?,
            Op::Cumsum { dim }
            | Op::Cumprod { dim }
            | Op::Cummax { dim }
            | Op::Cummin { dim }
            | Op::Softmax { dim }
            | Op::LogSoftmax { dim } => with(*dim, *x.get(*dim)?)?,
            Op::Reshape { shape } => (numel(&shape.0) == numel(&x)).then(|| shape.0.clone())?,
            Op::Transpose {} => {
                let mut s = x;
                if rank >= 2 {
                    s.swap(rank - 2, rank - 1);
                }
                s
            }
            Op::SwapDims { dim1, dim2 } => {
                let mut s = x;
                if *dim1.max(dim2) >= rank {
                    return None;
                }
                s.swap(*dim1, *dim2);
                s
            }
            Op::Permute { axes } => {
                let mut seen = axes.clone();
                seen.sort_unstable();
                if seen != (0..rank).collect::<Vec<_>>() {
                    return None;
                }
                axes.iter().map(|&a| x[a]).collect()
            }
            Op::Unsqueeze { dim } => {
                let mut s = x;
                if *dim > rank {
                    return None;
                }
                s.insert(*dim, 1);
                s
            }
            Op::Squeeze { dim } => {
                let mut s = x;
                if rank < 2 || s.get(*dim) != Some(&1) {
                    return None;
                }
                s.remove(*dim);
                s
            }
            Op::Slice { ranges } => {
                if ranges.len() > rank {
                    return None;
                }
                let mut s = x;
                for (d, r) in s.iter_mut().zip(ranges) {
                    let end = r.1.min(*d);
                    if r.0 >= end {
                        return None;
                    }
                    *d = end - r.0;
                }
                s
            }
            Op::Cat { dim } => {
                if *dim >= rank {
                    return None;
                }
                let off = |s: &[usize]| [&s[..*dim], &s[*dim + 1..]].concat();
                let mut total = 0usize;
                for s in inputs {
                    if s.len() != rank || off(s) != off(&x) {
                        return None;
                    }
                    total = total.saturating_add(s[*dim]);
                }
                with(*dim, total)?
            }
            Op::Stack { dim } => {
                if inputs.iter().any(|s| *s != x) || *dim > rank {
                    return None;
                }
                let mut s = x;
                s.insert(*dim, inputs.len());
                s
            }
            Op::Expand { shape } => {
                let to = &shape.0;
                let lead = to.len().checked_sub(rank)?;
                let fits = x.iter().zip(&to[lead..]).all(|(&a, &b)| a == b || a == 1);
                fits.then(|| to.clone())?
            }
            Op::RepeatDim { dim, times } => with(*dim, x.get(*dim)?.saturating_mul(times.0))?,
            Op::Unfold { dim, size, step } => {
                // complete windows only: none (an empty tensor, refused) when size > x[dim]
                let n = x.get(*dim)?.checked_sub(size.0)? / step.0 + 1;
                if rank >= 4 {
                    return None;
                }
                let mut s = with(*dim, n)?;
                s.push(size.0);
                s
            }
            Op::Gather { dim, indices } => {
                (*dim < rank && indices.shape.len() == rank).then(|| indices.shape.clone())?
            }
            Op::GatherNd { indices } => nd_slices(&x, &indices.shape)?,
            Op::Select { dim, indices } => with(*dim, indices.len())?,
            // tensor ops, activations, losses
            Op::Mish {} | Op::LogSigmoid {} | Op::HardSigmoid {} | Op::Softplus { .. } => x,
            Op::Elu { .. }
            | Op::Celu { .. }
            | Op::Selu {}
            | Op::GeluApproximate {}
            | Op::HardSwish {}
            | Op::Softsign {}
            | Op::Tanhshrink {}
            | Op::Hardtanh { .. }
            | Op::Relu6 {}
            | Op::Threshold { .. }
            | Op::HardShrink { .. }
            | Op::SoftShrink { .. } => x,
            Op::Softmin { dim } => with(*dim, *x.get(*dim)?)?,
            Op::Glu { dim } => {
                let n = *x.get(*dim)?;
                (n % 2 == 0).then(|| with(*dim, n / 2))??
            }
            Op::Tril { .. } | Op::Triu { .. } => (rank >= 2).then_some(x)?,
            Op::Sort { dim } | Op::SortDescending { dim } | Op::QuietSoftmax { dim } => {
                with(*dim, *x.get(*dim)?)?
            }
            Op::Var { dim }
            | Op::VarBias { dim }
            | Op::GatherArgmax { dim }
            | Op::GatherArgmin { dim } => with(*dim, 1)?,
            Op::GatherSortIndices { dim } => with(*dim, *x.get(*dim)?)?,
            Op::GatherTopkIndices { k, dim } => {
                (k.0 <= *x.get(*dim)?).then(|| with(*dim, k.0))??
            }
            Op::Topk { k, dim } => (k.0 <= *x.get(*dim)?).then(|| with(*dim, k.0))??,
            Op::Narrow { dim, start, length } => {
                let start = usize::try_from(*start).ok()?;
                (start.checked_add(length.0)? <= *x.get(*dim)?).then(|| with(*dim, length.0))??
            }
            Op::Scatter { dim, indices }
            | Op::ScatterReplace { dim, indices }
            | Op::ScatterMul { dim, indices }
            | Op::ScatterMax { dim, indices }
            | Op::ScatterMin { dim, indices } => {
                let fits = *dim < rank
                    && indices.shape.len() == rank
                    && inputs.get(1)? == &indices.shape
                    && (0..rank).all(|d| d == *dim || indices.shape[d] == x[d]);
                fits.then_some(x)?
            }
            Op::ScatterNd { indices }
            | Op::ScatterNdReplace { indices }
            | Op::ScatterNdMul { indices }
            | Op::ScatterNdMax { indices }
            | Op::ScatterNdMin { indices } => {
                (inputs.get(1)? == &nd_slices(&x, &indices.shape)?).then_some(x)?
            }
            Op::SelectAssign { dim, indices }
            | Op::SelectReplace { dim, indices }
            | Op::SelectMul { dim, indices }
            | Op::SelectMax { dim, indices }
            | Op::SelectMin { dim, indices } => {
                let values = with(*dim, indices.len())?;
                (inputs.get(1)? == &values).then_some(x)?
            }
            Op::SliceAssign { ranges } => {
                let mut cut = x.clone();
                if ranges.len() > rank {
                    return None;
                }
                for (d, r) in cut.iter_mut().zip(ranges) {
                    if r.0 >= r.1 || r.1 > *d {
                        return None;
                    }
                    *d = r.1 - r.0;
                }
                (inputs.get(1)? == &cut).then_some(x)?
            }
            Op::CrossEntropy { targets } => {
                (rank == 2 && targets.len() == x[0]).then(|| vec![1])?
            }
            Op::CrossEntropyWithLogits {} => {
                (rank == 2 && inputs.get(1)? == &x).then(|| vec![1])?
            }
            Op::MseLoss {} => (inputs.get(1)? == &x).then(|| vec![1])?,
            Op::BinaryCrossEntropy { targets } | Op::BinaryCrossEntropyWithLogits { targets } => {
                (targets.shape == x).then(|| vec![1])?
            }
            Op::Remainder {} => broadcast_shapes(&x, inputs.get(1)?)?,
            Op::Chunk { chunks, dim, part } => {
                let lengths = extra::burn_chunk_lengths(*x.get(*dim)?, chunks.0)?;
                with(*dim, *lengths.get(usize::try_from(*part).ok()?)?)?
            }
            Op::Split {
                split_size,
                dim,
                part,
            } => {
                let lengths = extra::split_lengths(*x.get(*dim)?, split_size.0);
                with(*dim, *lengths.get(usize::try_from(*part).ok()?)?)?
            }
            Op::VarMean { dim, part } => (0..=1).contains(part).then(|| with(*dim, 1))??,
            Op::Prelu {} => {
                let w = inputs.get(1)?;
                let fits = w.len() == 1 && (w[0] == 1 || (rank >= 2 && w[0] == x[1]));
                fits.then_some(x)?
            }
            Op::Conv2d {
                stride,
                padding,
                dilation,
                groups,
            }
            | Op::Conv1d {
                stride,
                padding,
                dilation,
                groups,
            } => nn::conv_shape(inputs, &conv(stride, padding, dilation, groups), None)?,
            Op::ConvTranspose2d {
                stride,
                padding,
                dilation,
                groups,
                padding_out,
            }
            | Op::ConvTranspose1d {
                stride,
                padding,
                dilation,
                groups,
                padding_out,
            } => nn::conv_shape(
                inputs,
                &conv(stride, padding, dilation, groups),
                Some(padding_out),
            )?,
            Op::MaxPool2d {
                kernel,
                stride,
                padding,
            }
            | Op::AvgPool2d {
                kernel,
                stride,
                padding,
                ..
            } => nn::pool_shape(&x, &pool(kernel, stride, padding), 2)?,
            Op::MaxPool1d {
                kernel,
                stride,
                padding,
            }
            | Op::AvgPool1d {
                kernel,
                stride,
                padding,
                ..
            } => nn::pool_shape(&x, &pool(kernel, stride, padding), 1)?,
            Op::AdaptiveAvgPool1d { output_size }
            | Op::AdaptiveAvgPool2d { output_size }
            | Op::InterpolateNearest { output_size }
            | Op::InterpolateBilinear { output_size, .. } => {
                nn::adaptive_shape(&x, &output_size.0)?
            }
            Op::Embedding { indices } => nn::embedding_shape(&x, indices)?,
        };
        check_shape(&shape).is_ok().then_some(shape)
    }
}

/// The shape of the slices `[n, k]` indices select from an input of shape `x`: `[n] + x[k..]`
/// (gather_nd; scatter_nd's values).
fn nd_slices(x: &[usize], indices: &[usize]) -> Option<Vec<usize>> {
    match *indices {
        [n, k] if (1..=x.len()).contains(&k) => Some([&[n][..], &x[k..]].concat()),
        _ => None,
    }
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
