//! The op catalog: one `Op` variant per op (attributes as fields), its parser, its shape
//! inference and its execution on burn. The catalog itself is the `ops!` invocation below, the
//! Rust side's one declaration of each op (name, arity, attribute names and types: what the
//! `ops` request reports and tests/differential/test_catalog.py compares with the Python
//! catalog): adding an op is one line there plus one arm in [`Op::execute`] (`execute.rs`) and
//! one in [`Op::infer_shape`] (`shape.rs`) (docs/adding-an-op.md). Attribute types and their
//! JSON parsing are in `attr.rs`; the longer burn calls of the tensor ops, activations and
//! losses in `extra.rs`, of burn's module functions (convolutions, pooling, ...) in `nn.rs`.

mod attr;
mod execute;
pub mod extra;
pub mod nd_index;
pub mod nn;
pub(crate) mod shape;

use serde_json::{Map, Value};

pub use attr::{Attr, Dims, Inline, Positive, Range, check_data, check_keys, check_shape, get};
pub use execute::Ranked;
pub use shape::numel;

/// Arity of n-ary ops (`cat`, `stack`): one input or more.
pub const NARY: i32 = -1;

/// `$new` for the field named `dim`, `$old` for any other field (see [`Op::with_dim`]).
macro_rules! pick_dim {
    (dim, $old:expr, $new:expr) => {
        $new
    };
    ($field:ident, $old:expr, $new:expr) => {
        $old
    };
}

/// The value of the field named `dim` among `field field` pairs (each field twice: the first
/// is matched against `dim`, the second names the binding), or `None`.
macro_rules! dim_value {
    () => {
        None
    };
    (dim $binding:ident $($rest:ident)*) => {
        Some(*$binding)
    };
    ($field:ident $binding:ident $($rest:ident)*) => {
        dim_value!($($rest)*)
    };
}

/// An op as the catalog lists it (the `ops` request).
#[derive(Clone, Copy, Debug)]
pub struct OpDecl {
    pub name: &'static str,
    /// The number of inputs, [`NARY`] for n-ary ops.
    pub arity: i32,
    /// Attribute names and their catalog types ([`Attr::TYPE`]), in declaration order.
    pub attrs: &'static [(&'static str, &'static str)],
}

macro_rules! ops {
    ($( $variant:ident = $name:literal / $arity:expr $(, { $($field:ident : $ty:ty),* })? ;)*) => {
        /// One variant per catalog op.
        #[derive(Clone, Debug)]
        pub enum Op {
            $( $variant { $($($field: $ty),*)? }, )*
        }

        impl Op {
            /// Every op, in catalog order.
            pub const ALL: &[OpDecl] = &[$(OpDecl {
                name: $name,
                arity: $arity,
                attrs: &[$($((stringify!($field), <$ty as Attr>::TYPE)),*)?],
            }),*];

            /// Parses an op from its name and attributes (every attribute required, no extras).
            pub fn parse(name: &str, attrs: &Map<String, Value>) -> Result<Op, String> {
                match name {
                    $( $name => {
                        check_keys(attrs, &[$($(stringify!($field)),*)?])?;
                        Ok(Op::$variant { $($($field: get(attrs, stringify!($field))?),*)? })
                    } )*
                    other => Err(format!("unknown op {other:?}")),
                }
            }

            pub fn name(&self) -> &'static str {
                match self {
                    $( Op::$variant { .. } => $name, )*
                }
            }

            pub fn arity(&self) -> i32 {
                match self {
                    $( Op::$variant { .. } => $arity, )*
                }
            }

            /// The attribute names of the op called `name` (`None`: not a catalog op).
            pub fn attr_names(name: &str) -> Option<&'static [&'static str]> {
                match name {
                    $( $name => Some(&[$($(stringify!($field)),*)?]), )*
                    _ => None,
                }
            }

            /// The op's `dim` attribute, if it has one.
            #[allow(unused_variables)]
            pub fn dim(&self) -> Option<usize> {
                match self {
                    $( Op::$variant { $($($field),*)? } => dim_value!($($($field $field)*)?), )*
                }
            }

            /// The op with its `dim` attribute replaced by `new` (`None` if it has none).
            #[allow(unused_variables)]
            pub fn with_dim(&self, new: usize) -> Option<Op> {
                self.dim()?;
                Some(match self {
                    $( Op::$variant { $($($field),*)? } => Op::$variant {
                        $($($field: pick_dim!($field, $field.clone(), new)),*)?
                    }, )*
                })
            }

            /// The op's inline tensor attributes (gather indices, masks): name and shape.
            pub fn tensor_attrs(&self) -> Vec<(&'static str, &[usize])> {
                match self {
                    $( Op::$variant { $($($field),*)? } => {
                        let attrs: Vec<(&'static str, Option<&[usize]>)> =
                            vec![$($((stringify!($field), Attr::tensor_shape($field))),*)?];
                        attrs.into_iter().filter_map(|(n, s)| Some((n, s?))).collect()
                    } )*
                }
            }
        }
    };
}

ops! {
    Exp = "exp" / 1;
    Log = "log" / 1;
    Log1p = "log1p" / 1;
    Sqrt = "sqrt" / 1;
    Sin = "sin" / 1;
    Cos = "cos" / 1;
    Tan = "tan" / 1;
    Tanh = "tanh" / 1;
    Sinh = "sinh" / 1;
    Cosh = "cosh" / 1;
    Erf = "erf" / 1;
    Atan = "atan" / 1;
    Asin = "asin" / 1;
    Acos = "acos" / 1;
    Asinh = "asinh" / 1;
    Acosh = "acosh" / 1;
    Atanh = "atanh" / 1;
    Recip = "recip" / 1;
    Square = "square" / 1;
    Abs = "abs" / 1;
    Neg = "neg" / 1;
    Sign = "sign" / 1;
    Floor = "floor" / 1;
    Ceil = "ceil" / 1;
    Round = "round" / 1;
    Trunc = "trunc" / 1;
    Sigmoid = "sigmoid" / 1;
    Relu = "relu" / 1;
    Gelu = "gelu" / 1;
    Silu = "silu" / 1;
    Cast = "cast" / 1, { dtype: crate::dtype::ProgramDType };
    ToDevice = "to_device" / 1;
    LeakyRelu = "leaky_relu" / 1, { slope: f64 };
    PowfScalar = "powf_scalar" / 1, { exponent: f64 };
    PowiScalar = "powi_scalar" / 1, { exponent: i64 };
    Clamp = "clamp" / 1, { min: f64, max: f64 };
    ClampMin = "clamp_min" / 1, { min: f64 };
    ClampMax = "clamp_max" / 1, { max: f64 };
    AddScalar = "add_scalar" / 1, { scalar: f64 };
    SubScalar = "sub_scalar" / 1, { scalar: f64 };
    MulScalar = "mul_scalar" / 1, { scalar: f64 };
    DivScalar = "div_scalar" / 1, { scalar: f64 };
    RemainderScalar = "remainder_scalar" / 1, { scalar: f64 };
    Add = "add" / 2;
    Sub = "sub" / 2;
    Mul = "mul" / 2;
    Div = "div" / 2;
    Powf = "powf" / 2;
    Maximum = "maximum" / 2;
    Minimum = "minimum" / 2;
    Atan2 = "atan2" / 2;
    Hypot = "hypot" / 2;
    Cross = "cross" / 2, { dim: usize };
    Matmul = "matmul" / 2;
    Sum = "sum" / 1;
    Mean = "mean" / 1;
    Max = "max" / 1;
    Min = "min" / 1;
    Prod = "prod" / 1;
    SumDim = "sum_dim" / 1, { dim: usize };
    MeanDim = "mean_dim" / 1, { dim: usize };
    MaxDim = "max_dim" / 1, { dim: usize };
    MinDim = "min_dim" / 1, { dim: usize };
    ProdDim = "prod_dim" / 1, { dim: usize };
    Cumsum = "cumsum" / 1, { dim: usize };
    Cumprod = "cumprod" / 1, { dim: usize };
    Cummax = "cummax" / 1, { dim: usize };
    Cummin = "cummin" / 1, { dim: usize };
    Softmax = "softmax" / 1, { dim: usize };
    LogSoftmax = "log_softmax" / 1, { dim: usize };
    Reshape = "reshape" / 1, { shape: Dims };
    Transpose = "transpose" / 1;
    SwapDims = "swap_dims" / 1, { dim1: usize, dim2: usize };
    Permute = "permute" / 1, { axes: Vec<usize> };
    Unsqueeze = "unsqueeze" / 1, { dim: usize };
    Squeeze = "squeeze" / 1, { dim: usize };
    Flip = "flip" / 1, { axes: Vec<usize> };
    Slice = "slice" / 1, { ranges: Vec<Range> };
    Cat = "cat" / NARY, { dim: usize };
    Stack = "stack" / NARY, { dim: usize };
    Expand = "expand" / 1, { shape: Dims };
    Unfold = "unfold" / 1, { dim: usize, size: Positive, step: Positive };
    RepeatDim = "repeat_dim" / 1, { dim: usize, times: Positive };
    Gather = "gather" / 1, { dim: usize, indices: Inline<i64> };
    GatherNd = "gather_nd" / 1, { indices: Inline<i64> };
    Select = "select" / 1, { dim: usize, indices: Vec<i64> };
    MaskFill = "mask_fill" / 1, { mask: Inline<bool>, value: f64 };
    MaskWhere = "mask_where" / 2, { mask: Inline<bool> };
    // tensor ops, activations, losses (their longer burn calls: extra.rs)
    Scatter = "scatter" / 2, { dim: usize, indices: Inline<i64> };
    ScatterNd = "scatter_nd" / 2, { indices: Inline<i64> };
    SelectAssign = "select_assign" / 2, { dim: usize, indices: Vec<i64> };
    SelectReplace = "select_replace" / 2, { dim: usize, indices: Vec<i64> };
    // scatter / select_assign / scatter_nd with the other updates (extra.rs, nd_index.rs;
    // distinct indices)
    ScatterReplace = "scatter_replace" / 2, { dim: usize, indices: Inline<i64> };
    ScatterMul = "scatter_mul" / 2, { dim: usize, indices: Inline<i64> };
    ScatterMax = "scatter_max" / 2, { dim: usize, indices: Inline<i64> };
    ScatterMin = "scatter_min" / 2, { dim: usize, indices: Inline<i64> };
    SelectMul = "select_mul" / 2, { dim: usize, indices: Vec<i64> };
    SelectMax = "select_max" / 2, { dim: usize, indices: Vec<i64> };
    SelectMin = "select_min" / 2, { dim: usize, indices: Vec<i64> };
    ScatterNdReplace = "scatter_nd_replace" / 2, { indices: Inline<i64> };
    ScatterNdMul = "scatter_nd_mul" / 2, { indices: Inline<i64> };
    ScatterNdMax = "scatter_nd_max" / 2, { indices: Inline<i64> };
    ScatterNdMin = "scatter_nd_min" / 2, { indices: Inline<i64> };
    SliceAssign = "slice_assign" / 2, { ranges: Vec<Range> };
    Sort = "sort" / 1, { dim: usize };
    SortDescending = "sort_descending" / 1, { dim: usize };
    Topk = "topk" / 1, { k: Positive, dim: usize };
    CrossEntropy = "cross_entropy" / 1, { targets: Vec<i64> };
    CrossEntropyWithLogits = "cross_entropy_with_logits" / 2;
    MseLoss = "mse_loss" / 2;
    BinaryCrossEntropy = "binary_cross_entropy" / 1, { targets: Inline<i64> };
    BinaryCrossEntropyWithLogits = "binary_cross_entropy_with_logits" / 1, { targets: Inline<i64> };
    Var = "var" / 1, { dim: usize };
    VarBias = "var_bias" / 1, { dim: usize };
    Tril = "tril" / 1, { diagonal: i64 };
    Triu = "triu" / 1, { diagonal: i64 };
    Narrow = "narrow" / 1, { dim: usize, start: i64, length: Positive };
    Remainder = "remainder" / 2;
    Softplus = "softplus" / 1, { beta: f64 };
    Mish = "mish" / 1;
    LogSigmoid = "log_sigmoid" / 1;
    HardSigmoid = "hard_sigmoid" / 1;
    Prelu = "prelu" / 2;
    QuietSoftmax = "quiet_softmax" / 1, { dim: usize };
    // burn's module functions (their burn calls: nn.rs)
    Conv2d = "conv2d" / NARY, { stride: Vec<usize>, padding: Vec<usize>, dilation: Vec<usize>, groups: Positive };
    MaxPool2d = "max_pool2d" / 1, { kernel: Vec<usize>, stride: Vec<usize>, padding: Vec<usize> };
    Embedding = "embedding" / 1, { indices: Inline<i64> };
    Conv1d = "conv1d" / NARY, { stride: Vec<usize>, padding: Vec<usize>, dilation: Vec<usize>, groups: Positive };
    AvgPool2d = "avg_pool2d" / 1, { kernel: Vec<usize>, stride: Vec<usize>, padding: Vec<usize>, count_include_pad: i64 };
    AdaptiveAvgPool2d = "adaptive_avg_pool2d" / 1, { output_size: Dims };
    ConvTranspose2d = "conv_transpose2d" / NARY, { stride: Vec<usize>, padding: Vec<usize>, dilation: Vec<usize>, groups: Positive, padding_out: Vec<usize> };
    ConvTranspose1d = "conv_transpose1d" / NARY, { stride: Vec<usize>, padding: Vec<usize>, dilation: Vec<usize>, groups: Positive, padding_out: Vec<usize> };
    MaxPool1d = "max_pool1d" / 1, { kernel: Vec<usize>, stride: Vec<usize>, padding: Vec<usize> };
    AvgPool1d = "avg_pool1d" / 1, { kernel: Vec<usize>, stride: Vec<usize>, padding: Vec<usize>, count_include_pad: i64 };
    AdaptiveAvgPool1d = "adaptive_avg_pool1d" / 1, { output_size: Dims };
    InterpolateNearest = "interpolate_nearest" / 1, { output_size: Dims };
    InterpolateBilinear = "interpolate_bilinear" / 1, { output_size: Dims, align_corners: i64 };
    // indices used through gather (one statement: the IR carries float values only)
    GatherArgmax = "gather_argmax" / 1, { dim: usize };
    GatherArgmin = "gather_argmin" / 1, { dim: usize };
    GatherSortIndices = "gather_sort_indices" / 1, { dim: usize };
    GatherTopkIndices = "gather_topk_indices" / 1, { k: Positive, dim: usize };
    // several outputs: one statement per output, `part` names it
    Chunk = "chunk" / 1, { chunks: Positive, dim: usize, part: i64 };
    Split = "split" / 1, { split_size: Positive, dim: usize, part: i64 };
    VarMean = "var_mean" / 1, { dim: usize, part: i64 };
    // burn-tensor's activations built from other ops
    Elu = "elu" / 1, { alpha: f64 };
    Celu = "celu" / 1, { alpha: f64 };
    Selu = "selu" / 1;
    GeluApproximate = "gelu_approximate" / 1;
    HardSwish = "hard_swish" / 1;
    Softsign = "softsign" / 1;
    Tanhshrink = "tanhshrink" / 1;
    Glu = "glu" / 1, { dim: usize };
    Softmin = "softmin" / 1, { dim: usize };
    Hardtanh = "hardtanh" / 1, { min: f64, max: f64 };
    Relu6 = "relu6" / 1;
    Threshold = "threshold" / 1, { threshold: f64, value: f64 };
    HardShrink = "hard_shrink" / 1, { lambd: f64 };
    SoftShrink = "soft_shrink" / 1, { lambd: f64 };
}

#[cfg(test)]
#[path = "catalog_tests.rs"]
mod tests;
