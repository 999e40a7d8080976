//! Execution: one `match` that runs an op on burn, on the interpreter's dynamic-rank tensors.

use burn::tensor::IndexingUpdateOp::{Add, Assign, Max, Min, Mul};
use burn::tensor::activation;
use burn::tensor::{Int, Shape, Tensor, TensorData};

use super::nn::{self, conv, pool};
use super::{Op, Range, extra, nd_index};
use crate::value::{DynTensor, MAX_RANK, bool_tensor, int_tensor};
use crate::{apply, map, of_rank};

/// Both operands at the same rank: the lower-rank one gets leading size-1 dims.
fn promote_pair(a: DynTensor, b: DynTensor) -> (DynTensor, DynTensor) {
    let rank = a.rank().max(b.rank());
    (a.promote(rank), b.promote(rank))
}

/// Applies a rank-generic binary expression to two operands after rank promotion.
macro_rules! zip {
    ($a:expr, $b:expr, $x:ident, $y:ident => $body:expr) => {
        match promote_pair($a, $b) {
            (DynTensor::R1($x), DynTensor::R1($y)) => DynTensor::R1($body),
            (DynTensor::R2($x), DynTensor::R2($y)) => DynTensor::R2($body),
            (DynTensor::R3($x), DynTensor::R3($y)) => DynTensor::R3($body),
            (DynTensor::R4($x), DynTensor::R4($y)) => DynTensor::R4($body),
            _ => unreachable!("operands were promoted to the same rank"),
        }
    };
}

/// Takes a statically ranked tensor out of a [`DynTensor`].
pub trait Ranked: Sized {
    fn from_dyn(x: DynTensor) -> Option<Self>;
}

macro_rules! ranked {
    ($($d:literal => $v:ident),*) => {$(
        impl Ranked for Tensor<$d> {
            fn from_dyn(x: DynTensor) -> Option<Self> {
                match x {
                    DynTensor::$v(t) => Some(t),
                    _ => None,
                }
            }
        }
    )*};
}
ranked!(1 => R1, 2 => R2, 3 => R3, 4 => R4);

/// The inputs of an n-ary op as tensors of one rank (the first input's).
fn same_rank<T: Ranked>(what: &str, inputs: Vec<DynTensor>) -> Vec<T> {
    let ranks: Vec<usize> = inputs.iter().map(DynTensor::rank).collect();
    inputs
        .into_iter()
        .map(|x| {
            T::from_dyn(x)
                .unwrap_or_else(|| panic!("{what}: inputs have ranks {ranks:?}; they must match"))
        })
        .collect()
}

fn permute<const D: usize>(t: Tensor<D>, axes: &[usize]) -> Tensor<D> {
    let axes: [usize; D] = axes.try_into().unwrap_or_else(|_| {
        panic!(
            "permute: {} axes {axes:?} given for a rank-{D} tensor",
            axes.len()
        )
    });
    t.permute(axes)
}

fn flip<const D: usize>(t: Tensor<D>, axes: &[usize]) -> Tensor<D> {
    match *axes {
        [] => t.flip::<0>([0usize; 0]),
        [a] => t.flip([a]),
        [a, b] => t.flip([a, b]),
        [a, b, c] => t.flip([a, b, c]),
        [a, b, c, d] => t.flip([a, b, c, d]),
        _ => panic!(
            "flip: {} axes {axes:?} given (at most {MAX_RANK})",
            axes.len()
        ),
    }
}

fn slice<const D: usize>(t: Tensor<D>, ranges: &[Range]) -> Tensor<D> {
    let slices: Vec<burn::tensor::Slice> = ranges
        .iter()
        .map(|r| burn::tensor::Slice::new(r.0 as isize, Some(r.1 as isize), 1))
        .collect();
    t.slice(&slices)
}

impl Op {
    /// Runs the op on burn. Inputs are already resolved (and taken off autodiff in a region);
    /// their count matches the arity. Invalid shapes make burn panic, which the caller catches.
    pub fn execute(&self, mut inputs: Vec<DynTensor>) -> DynTensor {
        assert!(!inputs.is_empty(), "{}: no inputs", self.name());
        macro_rules! next {
            () => {
                inputs.remove(0)
            };
        }
        match self {
            Op::Exp {} => map!(next!(), t => t.exp()),
            Op::Log {} => map!(next!(), t => t.log()),
            Op::Log1p {} => map!(next!(), t => t.log1p()),
            Op::Sqrt {} => map!(next!(), t => t.sqrt()),
            Op::Sin {} => map!(next!(), t => t.sin()),
            Op::Cos {} => map!(next!(), t => t.cos()),
            Op::Tan {} => map!(next!(), t => t.tan()),
            Op::Tanh {} => map!(next!(), t => t.tanh()),
            Op::Sinh {} => map!(next!(), t => t.sinh()),
            Op::Cosh {} => map!(next!(), t => t.cosh()),
            Op::Erf {} => map!(next!(), t => t.erf()),
            Op::Atan {} => map!(next!(), t => t.atan()),
            Op::Asin {} => map!(next!(), t => t.asin()),
            Op::Acos {} => map!(next!(), t => t.acos()),
            Op::Asinh {} => map!(next!(), t => t.asinh()),
            Op::Acosh {} => map!(next!(), t => t.acosh()),
            Op::Atanh {} => map!(next!(), t => t.atanh()),
            Op::Recip {} => map!(next!(), t => t.recip()),
            Op::Square {} => map!(next!(), t => t.square()),
            Op::Abs {} => map!(next!(), t => t.abs()),
            Op::Neg {} => map!(next!(), t => t.neg()),
            Op::Sign {} => map!(next!(), t => t.sign()),
            Op::Floor {} => map!(next!(), t => t.floor()),
            Op::Ceil {} => map!(next!(), t => t.ceil()),
            Op::Round {} => map!(next!(), t => t.round()),
            Op::Trunc {} => map!(next!(), t => t.trunc()),
            Op::Sigmoid {} => map!(next!(), t => activation::sigmoid(t)),
            Op::Relu {} => map!(next!(), t => activation::relu(t)),
            Op::Gelu {} => map!(next!(), t => activation::gelu(t)),
            Op::Silu {} => map!(next!(), t => activation::silu(t)),
            Op::Cast { dtype } => map!(next!(), t => t.cast(dtype.float())),
            Op::ToDevice {} => map!(next!(), t => {
                let device = t.device();
                t.to_device(&device)
            }),
            Op::LeakyRelu { slope } => map!(next!(), t => activation::leaky_relu(t, *slope)),
            Op::PowfScalar { exponent } => map!(next!(), t => t.powf_scalar(*exponent)),
            Op::PowiScalar { exponent } => map!(next!(), t => t.powi_scalar(*exponent)),
            Op::Clamp { min, max } => map!(next!(), t => t.clamp(*min, *max)),
            Op::ClampMin { min } => map!(next!(), t => t.clamp_min(*min)),
            Op::ClampMax { max } => map!(next!(), t => t.clamp_max(*max)),
            Op::AddScalar { scalar } => map!(next!(), t => t.add_scalar(*scalar)),
            Op::SubScalar { scalar } => map!(next!(), t => t.sub_scalar(*scalar)),
            Op::MulScalar { scalar } => map!(next!(), t => t.mul_scalar(*scalar)),
            Op::DivScalar { scalar } => map!(next!(), t => t.div_scalar(*scalar)),
            Op::RemainderScalar { scalar } => map!(next!(), t => t.remainder_scalar(*scalar)),
            Op::Add {} => zip!(next!(), next!(), a, b => a.add(b)),
            Op::Sub {} => zip!(next!(), next!(), a, b => a.sub(b)),
            Op::Mul {} => zip!(next!(), next!(), a, b => a.mul(b)),
            Op::Div {} => zip!(next!(), next!(), a, b => a.div(b)),
            Op::Powf {} => zip!(next!(), next!(), a, b => a.powf(b)),
            Op::Maximum {} => zip!(next!(), next!(), a, b => a.max_pair(b)),
            Op::Minimum {} => zip!(next!(), next!(), a, b => a.min_pair(b)),
            Op::Atan2 {} => zip!(next!(), next!(), a, b => a.atan2(b)),
            Op::Hypot {} => zip!(next!(), next!(), a, b => a.hypot(b)),
            Op::Cross { dim } => zip!(next!(), next!(), a, b => a.cross(b, *dim)),
            Op::Matmul {} => zip!(next!(), next!(), a, b => a.matmul(b)),
            Op::Sum {} => DynTensor::R1(apply!(next!(), t => t.sum())),
            Op::Mean {} => DynTensor::R1(apply!(next!(), t => t.mean())),
            Op::Max {} => DynTensor::R1(apply!(next!(), t => t.max())),
            Op::Min {} => DynTensor::R1(apply!(next!(), t => t.min())),
            Op::Prod {} => DynTensor::R1(apply!(next!(), t => t.prod())),
            Op::SumDim { dim } => map!(next!(), t => t.sum_dim(*dim)),
            Op::MeanDim { dim } => map!(next!(), t => t.mean_dim(*dim)),
            Op::MaxDim { dim } => map!(next!(), t => t.max_dim(*dim)),
            Op::MinDim { dim } => map!(next!(), t => t.min_dim(*dim)),
            Op::ProdDim { dim } => map!(next!(), t => t.prod_dim(*dim)),
            Op::Cumsum { dim } => map!(next!(), t => t.cumsum(*dim)),
            Op::Cumprod { dim } => map!(next!(), t => t.cumprod(*dim)),
            Op::Cummax { dim } => map!(next!(), t => t.cummax(*dim)),
            Op::Cummin { dim } => map!(next!(), t => t.cummin(*dim)),
            Op::Softmax { dim } => map!(next!(), t => activation::softmax(t, *dim)),
            Op::LogSoftmax { dim } => map!(next!(), t => activation::log_softmax(t, *dim)),
            Op::Reshape { shape } => next!().reshape(&shape.0),
            Op::Transpose {} => map!(next!(), t => t.transpose()),
            Op::SwapDims { dim1, dim2 } => map!(next!(), t => t.swap_dims(*dim1, *dim2)),
            Op::Permute { axes } => map!(next!(), t => permute(t, axes)),
            Op::Unsqueeze { dim } => match next!() {
                DynTensor::R1(t) => DynTensor::R2(t.unsqueeze_dim(*dim)),
                DynTensor::R2(t) => DynTensor::R3(t.unsqueeze_dim(*dim)),
                DynTensor::R3(t) => DynTensor::R4(t.unsqueeze_dim(*dim)),
                DynTensor::R4(_) => panic!("unsqueeze: rank 5 is not supported (ranks 1 to 4)"),
            },
            Op::Squeeze { dim } => match next!() {
                DynTensor::R1(t) => {
                    let _: Tensor<0> = t.squeeze_dim(*dim);
                    panic!("squeeze: burn returned a rank-0 tensor, which is not supported")
                }
                DynTensor::R2(t) => DynTensor::R1(t.squeeze_dim(*dim)),
                DynTensor::R3(t) => DynTensor::R2(t.squeeze_dim(*dim)),
                DynTensor::R4(t) => DynTensor::R3(t.squeeze_dim(*dim)),
            },
            Op::Flip { axes } => map!(next!(), t => flip(t, axes)),
            Op::Slice { ranges } => map!(next!(), t => slice(t, ranges)),
            Op::Cat { dim } => {
                of_rank!(
                    inputs[0].rank(),
                    "cat",
                    Tensor::cat(same_rank("cat", inputs), *dim)
                )
            }
            Op::Stack { dim } => match inputs[0].rank() {
                1 => DynTensor::R2(Tensor::<1>::stack(same_rank("stack", inputs), *dim)),
                2 => DynTensor::R3(Tensor::<2>::stack(same_rank("stack", inputs), *dim)),
                3 => DynTensor::R4(Tensor::<3>::stack(same_rank("stack", inputs), *dim)),
                _ => panic!("stack: rank 5 is not supported (ranks 1 to 4)"),
            },
            Op::Expand { shape } => {
                let x = next!();
                let to = Shape::from(shape.0.clone());
                of_rank!(shape.0.len(), "expand", apply!(x, t => t.expand(to)))
            }
            Op::RepeatDim { dim, times } => map!(next!(), t => t.repeat_dim(*dim, times.0)),
            Op::Unfold { dim, size, step } => match next!() {
                DynTensor::R1(t) => DynTensor::R2(t.unfold(*dim, size.0, step.0)),
                DynTensor::R2(t) => DynTensor::R3(t.unfold(*dim, size.0, step.0)),
                DynTensor::R3(t) => DynTensor::R4(t.unfold(*dim, size.0, step.0)),
                DynTensor::R4(_) => panic!("unfold: rank 5 is not supported (ranks 1 to 4)"),
            },
            Op::Gather { dim, indices } => map!(next!(), t => {
                let idx = int_tensor(&indices.data, &indices.shape, &t.device());
                t.gather(*dim, idx)
            }),
            Op::GatherNd { indices } => nd_index::gather_nd(next!(), indices),
            Op::Select { dim, indices } => map!(next!(), t => {
                let data = TensorData::new(indices.clone(), [indices.len()]);
                let idx = Tensor::<1, Int>::from_data(data, &t.device());
                t.select(*dim, idx)
            }),
            Op::MaskFill { mask, value } => map!(next!(), t => {
                let m = bool_tensor(&mask.data, &mask.shape, &t.device());
                t.mask_fill(m, *value)
            }),
            Op::MaskWhere { mask } => zip!(next!(), next!(), a, b => {
                let m = bool_tensor(&mask.data, &mask.shape, &a.device());
                a.mask_where(m, b)
            }),
            // tensor ops, activations, losses
            Op::Scatter { dim, indices } => extra::scatter(next!(), next!(), *dim, indices, Add),
            Op::ScatterReplace { dim, indices } => {
                extra::scatter(next!(), next!(), *dim, indices, Assign)
            }
            Op::ScatterMul { dim, indices } => extra::scatter(next!(), next!(), *dim, indices, Mul),
            Op::ScatterMax { dim, indices } => extra::scatter(next!(), next!(), *dim, indices, Max),
            Op::ScatterMin { dim, indices } => extra::scatter(next!(), next!(), *dim, indices, Min),
            Op::ScatterNd { indices } => nd_index::scatter_nd(next!(), next!(), indices, Add),
            Op::ScatterNdReplace { indices } => {
                nd_index::scatter_nd(next!(), next!(), indices, Assign)
            }
            Op::ScatterNdMul { indices } => nd_index::scatter_nd(next!(), next!(), indices, Mul),
            Op::ScatterNdMax { indices } => nd_index::scatter_nd(next!(), next!(), indices, Max),
            Op::ScatterNdMin { indices } => nd_index::scatter_nd(next!(), next!(), indices, Min),
            Op::SelectAssign { dim, indices } => {
                extra::select_assign(next!(), next!(), *dim, indices, Add)
            }
            Op::SelectReplace { dim, indices } => {
                extra::select_assign(next!(), next!(), *dim, indices, Assign)
            }
            Op::SelectMul { dim, indices } => {
                extra::select_assign(next!(), next!(), *dim, indices, Mul)
            }
            Op::SelectMax { dim, indices } => {
                extra::select_assign(next!(), next!(), *dim, indices, Max)
            }
            Op::SelectMin { dim, indices } => {
                extra::select_assign(next!(), next!(), *dim, indices, Min)
            }
            Op::SliceAssign { ranges } => extra::slice_assign(next!(), next!(), ranges),
            Op::Sort { dim } => map!(next!(), t => t.sort(*dim)),
            Op::SortDescending { dim } => map!(next!(), t => t.sort_descending(*dim)),
            Op::Topk { k, dim } => map!(next!(), t => t.topk(k.0, *dim)),
            Op::CrossEntropy { targets } => extra::cross_entropy(next!(), targets),
            Op::CrossEntropyWithLogits {} => extra::cross_entropy_with_logits(next!(), next!()),
            Op::MseLoss {} => extra::mse_loss(next!(), next!()),
            Op::BinaryCrossEntropy { targets } => {
                extra::binary_cross_entropy(next!(), targets, false)
            }
            Op::BinaryCrossEntropyWithLogits { targets } => {
                extra::binary_cross_entropy(next!(), targets, true)
            }
            Op::Var { dim } => map!(next!(), t => t.var(*dim)),
            Op::VarBias { dim } => map!(next!(), t => t.var_bias(*dim)),
            Op::Tril { diagonal } => map!(next!(), t => t.tril(*diagonal)),
            Op::Triu { diagonal } => map!(next!(), t => t.triu(*diagonal)),
            Op::Narrow { dim, start, length } => extra::narrow(next!(), *dim, *start, length.0),
            Op::Remainder {} => zip!(next!(), next!(), a, b => a.remainder(b)),
            Op::Softplus { beta } => map!(next!(), t => activation::softplus(t, *beta)),
            Op::Mish {} => map!(next!(), t => activation::mish(t)),
            Op::LogSigmoid {} => map!(next!(), t => activation::log_sigmoid(t)),
            Op::HardSigmoid {} => map!(next!(), t => activation::hard_sigmoid(t, 1.0 / 6.0, 0.5)),
            Op::Prelu {} => extra::prelu(next!(), next!()),
            Op::QuietSoftmax { dim } => map!(next!(), t => activation::quiet_softmax(t, *dim)),
            Op::Elu { alpha } => map!(next!(), t => activation::elu(t, *alpha)),
            Op::Celu { alpha } => map!(next!(), t => activation::celu(t, *alpha)),
            Op::Selu {} => map!(next!(), t => activation::selu(t)),
            Op::GeluApproximate {} => map!(next!(), t => activation::gelu_approximate(t)),
            Op::HardSwish {} => map!(next!(), t => activation::hard_swish(t)),
            Op::Softsign {} => map!(next!(), t => activation::softsign(t)),
            Op::Tanhshrink {} => map!(next!(), t => activation::tanhshrink(t)),
            Op::Glu { dim } => map!(next!(), t => activation::glu(t, *dim)),
            Op::Softmin { dim } => map!(next!(), t => activation::softmin(t, *dim)),
            Op::Hardtanh { min, max } => map!(next!(), t => activation::hardtanh(t, *min, *max)),
            Op::Relu6 {} => map!(next!(), t => activation::relu6(t)),
            Op::Threshold { threshold, value } => {
                map!(next!(), t => activation::threshold(t, *threshold, *value))
            }
            Op::HardShrink { lambd } => map!(next!(), t => activation::hard_shrink(t, *lambd)),
            Op::SoftShrink { lambd } => map!(next!(), t => activation::soft_shrink(t, *lambd)),
            Op::Conv2d {
                stride,
                padding,
                dilation,
                groups,
            } => nn::conv2d(inputs, &conv(stride, padding, dilation, groups)),
            Op::Conv1d {
                stride,
                padding,
                dilation,
                groups,
            } => nn::conv1d(inputs, &conv(stride, padding, dilation, groups)),
            Op::ConvTranspose2d {
                stride,
                padding,
                dilation,
                groups,
                padding_out,
            } => nn::conv_transpose2d(
                inputs,
                &conv(stride, padding, dilation, groups),
                padding_out,
            ),
            Op::MaxPool2d {
                kernel,
                stride,
                padding,
            } => nn::max_pool2d(next!(), &pool(kernel, stride, padding)),
            Op::AvgPool2d {
                kernel,
                stride,
                padding,
                count_include_pad,
            } => nn::avg_pool2d(next!(), &pool(kernel, stride, padding), *count_include_pad),
            Op::AdaptiveAvgPool2d { output_size } => {
                nn::adaptive_avg_pool2d(next!(), &output_size.0)
            }
            Op::ConvTranspose1d {
                stride,
                padding,
                dilation,
                groups,
                padding_out,
            } => nn::conv_transpose1d(
                inputs,
                &conv(stride, padding, dilation, groups),
                padding_out,
            ),
            Op::MaxPool1d {
                kernel,
                stride,
                padding,
            } => nn::max_pool1d(next!(), &pool(kernel, stride, padding)),
            Op::AvgPool1d {
                kernel,
                stride,
                padding,
                count_include_pad,
            } => nn::avg_pool1d(next!(), &pool(kernel, stride, padding), *count_include_pad),
            Op::AdaptiveAvgPool1d { output_size } => {
                nn::adaptive_avg_pool1d(next!(), &output_size.0)
            }
            Op::InterpolateNearest { output_size } => {
                nn::interpolate(next!(), &output_size.0, None)
            }
            Op::InterpolateBilinear {
                output_size,
                align_corners,
            } => nn::interpolate(next!(), &output_size.0, Some(*align_corners)),
            Op::Embedding { indices } => {
                let w = next!();
                let device = apply!(&w, t => t.device());
                nn::embedding(w, indices, &device)
            }
            Op::GatherArgmax { dim } => map!(next!(), t => {
                let indices = t.clone().argmax(*dim);
                t.gather(*dim, indices)
            }),
            Op::GatherArgmin { dim } => map!(next!(), t => {
                let indices = t.clone().argmin(*dim);
                t.gather(*dim, indices)
            }),
            Op::GatherSortIndices { dim } => map!(next!(), t => {
                let (_, indices) = t.clone().sort_with_indices(*dim);
                t.gather(*dim, indices)
            }),
            Op::GatherTopkIndices { k, dim } => map!(next!(), t => {
                let (_, indices) = t.clone().topk_with_indices(k.0, *dim);
                t.gather(*dim, indices)
            }),
            Op::Chunk { chunks, dim, part } => map!(next!(), t => {
                extra::part("chunk", t.chunk(chunks.0, *dim), *part)
            }),
            Op::Split {
                split_size,
                dim,
                part,
            } => map!(next!(), t => extra::part("split", t.split(split_size.0, *dim), *part)),
            Op::VarMean { dim, part } => map!(next!(), t => {
                let (var, mean) = t.var_mean(*dim);
                extra::part("var_mean", vec![var, mean], *part)
            }),
        }
    }
}
