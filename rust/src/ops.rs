//! The op catalog: one `Op` variant per op (attributes as fields), its parser, and one `match`
//! that runs it on burn. The catalog itself is the `ops!` invocation below, the Rust side's one
//! declaration of each op (name, arity, attribute names and types: what the `ops` request
//! reports and tests/differential/test_catalog.py compares with the Python catalog): adding an op is one line
//! there plus one arm in [`Op::execute`] and one in [`Op::infer_shape`] (docs/adding-an-op.md).

use burn::tensor::activation;
use burn::tensor::{Int, Shape, Tensor, TensorData};
use serde_json::{Map, Value};

use crate::floats::{kind_of, parse_f64};
use crate::ops_extra as extra;
use crate::ops_nn;
use crate::value::{DynTensor, MAX_RANK, bool_tensor, int_tensor};
use crate::{apply, map, of_rank};

/// Arity of n-ary ops (`cat`, `stack`): one input or more.
pub const NARY: i32 = -1;

/// An attribute type: how to read it from JSON, and its name in the catalog's terms
/// (`ATTR_TYPES` in difftest/ops/spec.py; `tests/differential/test_catalog.py` compares the two catalogs).
pub trait Attr: Sized {
    /// The type's catalog name.
    const TYPE: &'static str;
    /// The catalog name of a list of it (`Vec<Self>`).
    const LIST_TYPE: &'static str = "unsupported list";
    /// The catalog name of an inline tensor of it (`Inline<Self>`).
    const INLINE_TYPE: &'static str = "unsupported inline tensor";

    fn parse(v: &Value) -> Result<Self, String>;

    /// The shape of the attribute when it is an inline tensor (element budget), else `None`.
    fn tensor_shape(&self) -> Option<&[usize]> {
        None
    }
}

impl Attr for f64 {
    const TYPE: &'static str = "float";

    fn parse(v: &Value) -> Result<Self, String> {
        parse_f64(v)
    }
}

impl Attr for i64 {
    const TYPE: &'static str = "int";
    const LIST_TYPE: &'static str = "ints";
    const INLINE_TYPE: &'static str = "int_tensor";

    fn parse(v: &Value) -> Result<Self, String> {
        v.as_i64()
            .ok_or_else(|| format!("expected an integer, got {}", show(v)))
    }
}

/// A dimension index or a count: a non-negative integer.
impl Attr for usize {
    const TYPE: &'static str = "dim";
    const LIST_TYPE: &'static str = "dims";

    fn parse(v: &Value) -> Result<Self, String> {
        v.as_u64()
            .and_then(|x| usize::try_from(x).ok())
            .ok_or_else(|| format!("expected a non-negative integer, got {}", show(v)))
    }
}

impl<T: Attr> Attr for Vec<T> {
    const TYPE: &'static str = T::LIST_TYPE;

    fn parse(v: &Value) -> Result<Self, String> {
        let items = v
            .as_array()
            .ok_or_else(|| format!("expected an array, got {}", kind_of(v)))?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| T::parse(x).map_err(|e| format!("element {i}: {e}")))
            .collect()
    }
}

impl Attr for bool {
    const TYPE: &'static str = "bool";
    const INLINE_TYPE: &'static str = "bool_tensor";

    fn parse(v: &Value) -> Result<Self, String> {
        v.as_bool()
            .ok_or_else(|| format!("expected a boolean, got {}", show(v)))
    }
}

/// A count that must be at least 1 (`repeat_dim`'s `times`).
#[derive(Clone, Copy, Debug)]
pub struct Positive(pub usize);

impl Attr for Positive {
    const TYPE: &'static str = "int";

    fn parse(v: &Value) -> Result<Self, String> {
        match usize::parse(v)? {
            0 => Err("expected an integer >= 1, got 0".into()),
            n => Ok(Positive(n)),
        }
    }
}

/// A float dtype (`cast`): `float32`, `float64`, `float16` or `bfloat16`.
impl Attr for crate::dtype::ProgramDType {
    const TYPE: &'static str = "dtype";

    fn parse(v: &Value) -> Result<Self, String> {
        serde_json::from_value(v.clone()).map_err(|_| {
            format!(
                "expected a float dtype (float32, float64, float16, bfloat16), got {}",
                show(v)
            )
        })
    }
}

/// A shape: rank 1 to 4, every dim >= 1.
#[derive(Clone, Debug)]
pub struct Dims(pub Vec<usize>);

impl Attr for Dims {
    const TYPE: &'static str = "shape";

    fn parse(v: &Value) -> Result<Self, String> {
        let dims = Vec::<usize>::parse(v)?;
        check_shape(&dims)?;
        Ok(Dims(dims))
    }
}

/// Checks the shape rules shared by leaves and attributes: rank 1..=4, dims >= 1.
pub fn check_shape(dims: &[usize]) -> Result<(), String> {
    if dims.is_empty() || dims.len() > MAX_RANK {
        return Err(format!(
            "shape {dims:?} has rank {}; ranks 1 to {MAX_RANK} are supported",
            dims.len()
        ));
    }
    if dims.contains(&0) {
        return Err(format!("shape {dims:?} has a zero dimension"));
    }
    Ok(())
}

/// A `[start, end)` range with step 1 (`slice`).
#[derive(Clone, Copy, Debug)]
pub struct Range(pub usize, pub usize);

impl Attr for Range {
    const TYPE: &'static str = "range";
    const LIST_TYPE: &'static str = "ranges";

    fn parse(v: &Value) -> Result<Self, String> {
        match Vec::<usize>::parse(v)?.as_slice() {
            [start, end] => Ok(Range(*start, *end)),
            _ => Err(format!("expected [start, end], got {}", show(v))),
        }
    }
}

/// A small tensor given inline as `{"shape": [...], "data": [...]}` (gather indices, masks).
#[derive(Clone, Debug)]
pub struct Inline<T> {
    pub shape: Vec<usize>,
    pub data: Vec<T>,
}

impl<T: Attr> Attr for Inline<T> {
    const TYPE: &'static str = T::INLINE_TYPE;

    fn parse(v: &Value) -> Result<Self, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| format!("expected {{\"shape\", \"data\"}}, got {}", kind_of(v)))?;
        check_keys(obj, &["shape", "data"])?;
        let shape: Vec<usize> = get(obj, "shape")?;
        check_shape(&shape).map_err(|e| format!("shape: {e}"))?;
        let data: Vec<T> = get(obj, "data")?;
        let n: usize = shape.iter().product();
        if data.len() != n {
            return Err(format!(
                "data has {} elements but shape {shape:?} needs {n}",
                data.len()
            ));
        }
        Ok(Inline { shape, data })
    }

    fn tensor_shape(&self) -> Option<&[usize]> {
        Some(&self.shape)
    }
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}...", &s[..37])
    } else {
        s
    }
}

/// Rejects keys of `obj` that are not in `allowed`.
pub fn check_keys(obj: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) if allowed.is_empty() => Err(format!("unexpected attribute {k:?} (takes none)")),
        Some(k) => Err(format!(
            "unexpected attribute {k:?} (expected {})",
            allowed.join(", ")
        )),
    }
}

/// Reads a required attribute.
pub fn get<T: Attr>(obj: &Map<String, Value>, key: &str) -> Result<T, String> {
    let v = obj
        .get(key)
        .ok_or_else(|| format!("missing attribute {key:?}"))?;
    T::parse(v).map_err(|e| format!("attribute {key:?}: {e}"))
}

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
    Recip = "recip" / 1;
    Square = "square" / 1;
    Abs = "abs" / 1;
    Neg = "neg" / 1;
    Sign = "sign" / 1;
    Floor = "floor" / 1;
    Ceil = "ceil" / 1;
    Round = "round" / 1;
    Sigmoid = "sigmoid" / 1;
    Relu = "relu" / 1;
    Gelu = "gelu" / 1;
    Silu = "silu" / 1;
    Cast = "cast" / 1, { dtype: crate::dtype::ProgramDType };
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
    Add = "add" / 2;
    Sub = "sub" / 2;
    Mul = "mul" / 2;
    Div = "div" / 2;
    Powf = "powf" / 2;
    Maximum = "maximum" / 2;
    Minimum = "minimum" / 2;
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
    RepeatDim = "repeat_dim" / 1, { dim: usize, times: Positive };
    Gather = "gather" / 1, { dim: usize, indices: Inline<i64> };
    Select = "select" / 1, { dim: usize, indices: Vec<i64> };
    MaskFill = "mask_fill" / 1, { mask: Inline<bool>, value: f64 };
    MaskWhere = "mask_where" / 2, { mask: Inline<bool> };
    // issue 15: tensor ops, activations, losses (their longer calls: ops_extra.rs)
    Scatter = "scatter" / 2, { dim: usize, indices: Inline<i64> };
    SelectAssign = "select_assign" / 2, { dim: usize, indices: Vec<i64> };
    SelectReplace = "select_replace" / 2, { dim: usize, indices: Vec<i64> };
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
    // issue 15: nn functions (ops_nn.rs)
    Conv2d = "conv2d" / NARY, { stride: Vec<usize>, padding: Vec<usize>, dilation: Vec<usize>, groups: Positive };
    MaxPool2d = "max_pool2d" / 1, { kernel: Vec<usize>, stride: Vec<usize>, padding: Vec<usize> };
    Embedding = "embedding" / 1, { indices: Inline<i64> };
    Conv1d = "conv1d" / NARY, { stride: Vec<usize>, padding: Vec<usize>, dilation: Vec<usize>, groups: Positive };
    AvgPool2d = "avg_pool2d" / 1, { kernel: Vec<usize>, stride: Vec<usize>, padding: Vec<usize>, count_include_pad: i64 };
    AdaptiveAvgPool2d = "adaptive_avg_pool2d" / 1, { output_size: Dims };
    ConvTranspose2d = "conv_transpose2d" / NARY, { stride: Vec<usize>, padding: Vec<usize>, dilation: Vec<usize>, groups: Positive, padding_out: Vec<usize> };
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
}

/// The broadcast of two shapes after burn's rank promotion (leading size-1 dims), or `None`.
fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
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

fn conv<'a>(
    stride: &'a [usize],
    padding: &'a [usize],
    dilation: &'a [usize],
    groups: &Positive,
) -> ops_nn::Conv<'a> {
    ops_nn::Conv {
        stride,
        padding,
        dilation,
        groups: groups.0,
    }
}

fn pool<'a>(kernel: &'a [usize], stride: &'a [usize], padding: &'a [usize]) -> ops_nn::Pool<'a> {
    ops_nn::Pool {
        kernel,
        stride,
        padding,
    }
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
            | Op::Recip {}
            | Op::Square {}
            | Op::Abs {}
            | Op::Neg {}
            | Op::Sign {}
            | Op::Floor {}
            | Op::Ceil {}
            | Op::Round {}
            | Op::Sigmoid {}
            | Op::Relu {}
            | Op::Gelu {}
            | Op::Silu {}
            | Op::Cast { .. }
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
            | Op::Flip { .. } => x,
            Op::MaskFill { mask, .. } => (mask.shape == x).then_some(x)?,
            Op::Add {}
            | Op::Sub {}
            | Op::Mul {}
            | Op::Div {}
            | Op::Powf {}
            | Op::Maximum {}
            | Op::Minimum {}
            | Op::MaskWhere { .. } => broadcast_shapes(&x, inputs.get(1)?)?,
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
            Op::Gather { dim, indices } => {
                (*dim < rank && indices.shape.len() == rank).then(|| indices.shape.clone())?
            }
            Op::Select { dim, indices } => with(*dim, indices.len())?,
            // issue 15
            Op::Mish {} | Op::LogSigmoid {} | Op::HardSigmoid {} | Op::Softplus { .. } => x,
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
            Op::Scatter { dim, indices } => {
                let fits = *dim < rank
                    && indices.shape.len() == rank
                    && inputs.get(1)? == &indices.shape
                    && (0..rank).all(|d| d == *dim || indices.shape[d] == x[d]);
                fits.then_some(x)?
            }
            Op::SelectAssign { dim, indices } | Op::SelectReplace { dim, indices } => {
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
            } => ops_nn::conv_shape(inputs, &conv(stride, padding, dilation, groups), None)?,
            Op::ConvTranspose2d {
                stride,
                padding,
                dilation,
                groups,
                padding_out,
            } => ops_nn::conv_shape(
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
            } => ops_nn::pool_shape(&x, &pool(kernel, stride, padding))?,
            Op::AdaptiveAvgPool2d { output_size }
            | Op::InterpolateNearest { output_size }
            | Op::InterpolateBilinear { output_size, .. } => {
                ops_nn::adaptive_shape(&x, &output_size.0)?
            }
            Op::Embedding { indices } => ops_nn::embedding_shape(&x, indices)?,
        };
        check_shape(&shape).is_ok().then_some(shape)
    }

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
            Op::Recip {} => map!(next!(), t => t.recip()),
            Op::Square {} => map!(next!(), t => t.square()),
            Op::Abs {} => map!(next!(), t => t.abs()),
            Op::Neg {} => map!(next!(), t => t.neg()),
            Op::Sign {} => map!(next!(), t => t.sign()),
            Op::Floor {} => map!(next!(), t => t.floor()),
            Op::Ceil {} => map!(next!(), t => t.ceil()),
            Op::Round {} => map!(next!(), t => t.round()),
            Op::Sigmoid {} => map!(next!(), t => activation::sigmoid(t)),
            Op::Relu {} => map!(next!(), t => activation::relu(t)),
            Op::Gelu {} => map!(next!(), t => activation::gelu(t)),
            Op::Silu {} => map!(next!(), t => activation::silu(t)),
            Op::Cast { dtype } => map!(next!(), t => t.cast(dtype.float())),
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
            Op::Add {} => zip!(next!(), next!(), a, b => a.add(b)),
            Op::Sub {} => zip!(next!(), next!(), a, b => a.sub(b)),
            Op::Mul {} => zip!(next!(), next!(), a, b => a.mul(b)),
            Op::Div {} => zip!(next!(), next!(), a, b => a.div(b)),
            Op::Powf {} => zip!(next!(), next!(), a, b => a.powf(b)),
            Op::Maximum {} => zip!(next!(), next!(), a, b => a.max_pair(b)),
            Op::Minimum {} => zip!(next!(), next!(), a, b => a.min_pair(b)),
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
            Op::Gather { dim, indices } => map!(next!(), t => {
                let idx = int_tensor(&indices.data, &indices.shape, &t.device());
                t.gather(*dim, idx)
            }),
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
            // issue 15
            Op::Scatter { dim, indices } => extra::scatter(next!(), next!(), *dim, indices),
            Op::SelectAssign { dim, indices } => {
                extra::select_assign(next!(), next!(), *dim, indices)
            }
            Op::SelectReplace { dim, indices } => {
                extra::select_replace(next!(), next!(), *dim, indices)
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
            Op::Conv2d {
                stride,
                padding,
                dilation,
                groups,
            } => ops_nn::conv2d(inputs, &conv(stride, padding, dilation, groups)),
            Op::Conv1d {
                stride,
                padding,
                dilation,
                groups,
            } => ops_nn::conv1d(inputs, &conv(stride, padding, dilation, groups)),
            Op::ConvTranspose2d {
                stride,
                padding,
                dilation,
                groups,
                padding_out,
            } => ops_nn::conv_transpose2d(
                inputs,
                &conv(stride, padding, dilation, groups),
                padding_out,
            ),
            Op::MaxPool2d {
                kernel,
                stride,
                padding,
            } => ops_nn::max_pool2d(next!(), &pool(kernel, stride, padding)),
            Op::AvgPool2d {
                kernel,
                stride,
                padding,
                count_include_pad,
            } => ops_nn::avg_pool2d(next!(), &pool(kernel, stride, padding), *count_include_pad),
            Op::AdaptiveAvgPool2d { output_size } => {
                ops_nn::adaptive_avg_pool2d(next!(), &output_size.0)
            }
            Op::InterpolateNearest { output_size } => {
                ops_nn::interpolate(next!(), &output_size.0, None)
            }
            Op::InterpolateBilinear {
                output_size,
                align_corners,
            } => ops_nn::interpolate(next!(), &output_size.0, Some(*align_corners)),
            Op::Embedding { indices } => {
                let w = next!();
                let device = apply!(&w, t => t.device());
                ops_nn::embedding(w, indices, &device)
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;
    use serde_json::json;

    /// `infer_shape` agrees with what burn computes.
    #[test]
    fn inferred_shapes_match_burn() {
        let device = Device::flex();
        let t = |shape: &[usize]| {
            let n = shape.iter().product();
            DynTensor::from_f32(vec![0.5; n], shape, &device)
        };
        let cases: Vec<(&str, Value, Vec<Vec<usize>>)> = vec![
            ("exp", json!({}), vec![vec![2, 3]]),
            ("add", json!({}), vec![vec![3], vec![2, 1, 3]]),
            ("mul", json!({}), vec![vec![2, 1], vec![1, 4]]),
            ("matmul", json!({}), vec![vec![2, 3], vec![5, 3, 4]]),
            ("matmul", json!({}), vec![vec![2, 1, 2, 3], vec![3, 3, 1]]),
            ("sum", json!({}), vec![vec![2, 3]]),
            ("max_dim", json!({"dim": 1}), vec![vec![2, 3, 4]]),
            ("softmax", json!({"dim": 0}), vec![vec![2, 3]]),
            ("reshape", json!({"shape": [3, 2]}), vec![vec![6]]),
            ("transpose", json!({}), vec![vec![2, 3, 4]]),
            (
                "swap_dims",
                json!({"dim1": 0, "dim2": 2}),
                vec![vec![2, 3, 4]],
            ),
            ("permute", json!({"axes": [2, 0, 1]}), vec![vec![2, 3, 4]]),
            ("unsqueeze", json!({"dim": 1}), vec![vec![2, 3]]),
            ("squeeze", json!({"dim": 1}), vec![vec![2, 1, 3]]),
            ("slice", json!({"ranges": [[1, 3]]}), vec![vec![4, 2]]),
            ("cat", json!({"dim": 1}), vec![vec![2, 3], vec![2, 1]]),
            (
                "stack",
                json!({"dim": 2}),
                vec![vec![2, 3], vec![2, 3], vec![2, 3]],
            ),
            ("expand", json!({"shape": [4, 2, 3]}), vec![vec![1, 3]]),
            (
                "repeat_dim",
                json!({"dim": 0, "times": 3}),
                vec![vec![2, 3]],
            ),
            (
                "gather",
                json!({"dim": 1, "indices": {"shape": [2, 1], "data": [0, 2]}}),
                vec![vec![2, 3]],
            ),
            (
                "select",
                json!({"dim": 1, "indices": [0, 0, 2, 1]}),
                vec![vec![2, 3]],
            ),
            (
                "mask_where",
                json!({"mask": {"shape": [2], "data": [true, false]}}),
                vec![vec![2], vec![2]],
            ),
            // issue 15
            (
                "scatter",
                json!({"dim": 1, "indices": {"shape": [2, 1], "data": [0, 2]}}),
                vec![vec![2, 3], vec![2, 1]],
            ),
            (
                "select_assign",
                json!({"dim": 0, "indices": [1, 1, 0]}),
                vec![vec![2, 3], vec![3, 3]],
            ),
            (
                "select_replace",
                json!({"dim": 1, "indices": [2, 0]}),
                vec![vec![2, 3], vec![2, 2]],
            ),
            (
                "slice_assign",
                json!({"ranges": [[1, 3], [0, 1]]}),
                vec![vec![4, 2], vec![2, 1]],
            ),
            ("sort", json!({"dim": 1}), vec![vec![2, 3]]),
            ("sort_descending", json!({"dim": 0}), vec![vec![2, 3]]),
            ("topk", json!({"k": 2, "dim": 1}), vec![vec![2, 3, 4]]),
            (
                "cross_entropy",
                json!({"targets": [2, 0]}),
                vec![vec![2, 3]],
            ),
            (
                "cross_entropy_with_logits",
                json!({}),
                vec![vec![2, 3], vec![2, 3]],
            ),
            ("mse_loss", json!({}), vec![vec![2, 1, 3], vec![2, 1, 3]]),
            (
                "binary_cross_entropy",
                json!({"targets": {"shape": [3], "data": [0, 1, 1]}}),
                vec![vec![3]],
            ),
            (
                "binary_cross_entropy_with_logits",
                json!({"targets": {"shape": [2, 2], "data": [0, 1, 1, 0]}}),
                vec![vec![2, 2]],
            ),
            ("var", json!({"dim": 1}), vec![vec![2, 3]]),
            ("var_bias", json!({"dim": 0}), vec![vec![2, 3]]),
            ("tril", json!({"diagonal": -1}), vec![vec![2, 3, 3]]),
            ("triu", json!({"diagonal": 1}), vec![vec![3, 2]]),
            (
                "narrow",
                json!({"dim": 1, "start": 1, "length": 2}),
                vec![vec![2, 4]],
            ),
            ("remainder", json!({}), vec![vec![3], vec![2, 1]]),
            ("softplus", json!({"beta": 1.5}), vec![vec![2, 3]]),
            ("mish", json!({}), vec![vec![4]]),
            ("log_sigmoid", json!({}), vec![vec![4]]),
            ("hard_sigmoid", json!({}), vec![vec![4]]),
            ("prelu", json!({}), vec![vec![2, 3, 2], vec![3]]),
            ("prelu", json!({}), vec![vec![4], vec![1]]),
            ("quiet_softmax", json!({"dim": 0}), vec![vec![2, 3]]),
            ("gather_argmax", json!({"dim": 1}), vec![vec![2, 3]]),
            ("gather_argmin", json!({"dim": 0}), vec![vec![2, 3]]),
            ("gather_sort_indices", json!({"dim": 1}), vec![vec![2, 3]]),
            (
                "gather_topk_indices",
                json!({"k": 2, "dim": 1}),
                vec![vec![2, 3]],
            ),
            (
                "chunk",
                json!({"chunks": 3, "dim": 0, "part": 2}),
                vec![vec![5, 2]],
            ),
            (
                "split",
                json!({"split_size": 2, "dim": 1, "part": 1}),
                vec![vec![2, 3]],
            ),
            ("var_mean", json!({"dim": 1, "part": 1}), vec![vec![2, 3]]),
        ];
        // burn's chunk arithmetic, where it holds (chunk-uneven-pieces-panics: 4 in 3 does not)
        assert_eq!(
            crate::ops_extra::burn_chunk_lengths(7, 3),
            Some(vec![3, 3, 1])
        );
        assert_eq!(crate::ops_extra::burn_chunk_lengths(4, 3), None);
        for (name, attrs, shapes) in cases {
            let op = Op::parse(name, attrs.as_object().unwrap()).unwrap();
            let inputs: Vec<DynTensor> = shapes.iter().map(|s| t(s)).collect();
            let got = op.execute(inputs).dims();
            assert_eq!(op.infer_shape(&shapes), Some(got), "{name} {shapes:?}");
        }
        let add = Op::parse("add", &Map::new()).unwrap();
        assert_eq!(add.infer_shape(&[vec![2], vec![3]]), None);
    }

    /// Every attribute is declared with a catalog type (difftest/ops/spec.py `ATTR_TYPES`).
    #[test]
    fn declared_attribute_types() {
        const TYPES: &[&str] = &[
            "float",
            "int",
            "dim",
            "dims",
            "ints",
            "shape",
            "ranges",
            "int_tensor",
            "bool_tensor",
            "dtype",
        ];
        for decl in Op::ALL {
            for (name, ty) in decl.attrs {
                assert!(TYPES.contains(ty), "{}: {name} has type {ty}", decl.name);
            }
        }
        let gather = Op::ALL.iter().find(|d| d.name == "gather").unwrap();
        assert_eq!(gather.attrs, &[("dim", "dim"), ("indices", "int_tensor")]);
        let repeat = Op::ALL.iter().find(|d| d.name == "repeat_dim").unwrap();
        assert_eq!(repeat.attrs, &[("dim", "dim"), ("times", "int")]);
    }

    #[test]
    fn dim_attributes() {
        let attrs = json!({"dim": 1, "times": 3});
        let op = Op::parse("repeat_dim", attrs.as_object().unwrap()).unwrap();
        assert_eq!(op.dim(), Some(1));
        let other = op.with_dim(0).unwrap();
        assert!(matches!(
            other,
            Op::RepeatDim {
                dim: 0,
                times: Positive(3)
            }
        ));
        let exp = Op::parse("exp", &Map::new()).unwrap();
        assert!(exp.dim().is_none() && exp.with_dim(0).is_none());
        assert_eq!(Op::attr_names("clamp"), Some(&["min", "max"][..]));
        assert_eq!(Op::attr_names("frob"), None);
        let with_dim: Vec<&str> = Op::ALL
            .iter()
            .map(|d| d.name)
            .filter(|n| Op::attr_names(n).unwrap().contains(&"dim"))
            .collect();
        assert!(
            with_dim.contains(&"gather") && !with_dim.contains(&"swap_dims"),
            "{with_dim:?}"
        );
    }
}
