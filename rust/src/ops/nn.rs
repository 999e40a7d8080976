//! burn's module functions: convolutions, pooling, interpolation and embedding, run on the
//! interpreter's dynamic-rank tensors, and their output shapes for the element budget.
//!
//! Layouts are PyTorch's (and burn's): an image `[N, C, H, W]`, a sequence `[N, C, L]`, a
//! convolution weight `[C_out, C_in / groups, k...]`, a transposed convolution's
//! `[C_in, C_out / groups, k...]`, an embedding table `[rows, dim]` with indices `[B, L]`.

use burn::tensor::module;
use burn::tensor::ops::{
    AvgPoolOptions, ConvOptions, ConvTransposeOptions, InterpolateMode, InterpolateOptions,
    MaxPoolOptions,
};
use burn::tensor::{Device, Tensor};

use super::{Inline, Positive, Ranked};
use crate::value::{DynTensor, int_tensor};

/// `v` as an array of one value per spatial dim.
fn arr<const N: usize>(what: &str, name: &str, v: &[usize]) -> [usize; N] {
    v.try_into().unwrap_or_else(|_| {
        panic!(
            "{what}: attribute {name} has {} value(s) {v:?}; it needs {N}",
            v.len()
        )
    })
}

/// A rank-`D` input of an nn op, or a panic naming the op and the rank it needs.
fn ranked<T: Ranked>(what: &str, role: &str, rank: usize, x: DynTensor) -> T {
    let got = x.rank();
    T::from_dyn(x).unwrap_or_else(|| panic!("{what}: the {role} has rank {got}; it needs {rank}"))
}

/// The input, weight and optional bias of a convolution (2 or 3 inputs).
fn conv_inputs<const D: usize>(
    what: &str,
    inputs: Vec<DynTensor>,
) -> (Tensor<D>, Tensor<D>, Option<Tensor<1>>)
where
    Tensor<D>: Ranked,
{
    let n = inputs.len();
    assert!(
        n == 2 || n == 3,
        "{what}: takes an input, a weight and an optional bias; got {n} inputs"
    );
    let mut it = inputs.into_iter();
    let x = ranked(what, "input", D, it.next().expect("counted"));
    let w = ranked(what, "weight", D, it.next().expect("counted"));
    let b = it.next().map(|b| ranked(what, "bias", 1, b));
    (x, w, b)
}

/// Convolution attributes (stride, padding, dilation, per spatial dim; groups).
pub struct Conv<'a> {
    pub stride: &'a [usize],
    pub padding: &'a [usize],
    pub dilation: &'a [usize],
    pub groups: usize,
}

impl Conv<'_> {
    fn options<const N: usize>(&self, what: &str) -> ConvOptions<N> {
        ConvOptions::new(
            arr(what, "stride", self.stride),
            arr(what, "padding", self.padding),
            arr(what, "dilation", self.dilation),
            self.groups,
        )
    }
}

/// The convolution attributes of a `conv1d`, `conv2d` or `conv_transpose2d` op.
pub fn conv<'a>(
    stride: &'a [usize],
    padding: &'a [usize],
    dilation: &'a [usize],
    groups: &Positive,
) -> Conv<'a> {
    Conv {
        stride,
        padding,
        dilation,
        groups: groups.0,
    }
}

pub fn conv1d(inputs: Vec<DynTensor>, c: &Conv) -> DynTensor {
    let (x, w, b) = conv_inputs::<3>("conv1d", inputs);
    DynTensor::R3(module::conv1d(x, w, b, c.options::<1>("conv1d")))
}

pub fn conv2d(inputs: Vec<DynTensor>, c: &Conv) -> DynTensor {
    let (x, w, b) = conv_inputs::<4>("conv2d", inputs);
    DynTensor::R4(module::conv2d(x, w, b, c.options::<2>("conv2d")))
}

impl Conv<'_> {
    fn transpose_options<const N: usize>(
        &self,
        what: &str,
        padding_out: &[usize],
    ) -> ConvTransposeOptions<N> {
        ConvTransposeOptions::new(
            arr(what, "stride", self.stride),
            arr(what, "padding", self.padding),
            arr(what, "padding_out", padding_out),
            arr(what, "dilation", self.dilation),
            self.groups,
        )
    }
}

pub fn conv_transpose1d(inputs: Vec<DynTensor>, c: &Conv, padding_out: &[usize]) -> DynTensor {
    let what = "conv_transpose1d";
    let (x, w, b) = conv_inputs::<3>(what, inputs);
    DynTensor::R3(module::conv_transpose1d(
        x,
        w,
        b,
        c.transpose_options(what, padding_out),
    ))
}

pub fn conv_transpose2d(inputs: Vec<DynTensor>, c: &Conv, padding_out: &[usize]) -> DynTensor {
    let what = "conv_transpose2d";
    let (x, w, b) = conv_inputs::<4>(what, inputs);
    DynTensor::R4(module::conv_transpose2d(
        x,
        w,
        b,
        c.transpose_options(what, padding_out),
    ))
}

/// Pooling attributes (kernel, stride, padding; two values each).
pub struct Pool<'a> {
    pub kernel: &'a [usize],
    pub stride: &'a [usize],
    pub padding: &'a [usize],
}

/// The pooling attributes of a `max_pool2d` or `avg_pool2d` op.
pub fn pool<'a>(kernel: &'a [usize], stride: &'a [usize], padding: &'a [usize]) -> Pool<'a> {
    Pool {
        kernel,
        stride,
        padding,
    }
}

impl Pool<'_> {
    fn max_options<const N: usize>(&self, what: &str) -> MaxPoolOptions<N> {
        MaxPoolOptions::new(arr(what, "kernel", self.kernel))
            .with_stride(arr(what, "stride", self.stride))
            .with_padding(arr(what, "padding", self.padding))
    }

    fn avg_options<const N: usize>(&self, what: &str, count_include_pad: i64) -> AvgPoolOptions<N> {
        assert!(
            matches!(count_include_pad, 0 | 1),
            "{what}: count_include_pad is {count_include_pad}; it must be 0 or 1"
        );
        AvgPoolOptions::new(arr(what, "kernel", self.kernel))
            .with_stride(arr(what, "stride", self.stride))
            .with_padding(arr(what, "padding", self.padding))
            .with_count_include_pad(count_include_pad == 1)
    }
}

pub fn max_pool1d(x: DynTensor, p: &Pool) -> DynTensor {
    let what = "max_pool1d";
    DynTensor::R3(module::max_pool1d(
        ranked(what, "input", 3, x),
        p.max_options(what),
    ))
}

pub fn max_pool2d(x: DynTensor, p: &Pool) -> DynTensor {
    let what = "max_pool2d";
    DynTensor::R4(module::max_pool2d(
        ranked(what, "input", 4, x),
        p.max_options(what),
    ))
}

pub fn avg_pool1d(x: DynTensor, p: &Pool, count_include_pad: i64) -> DynTensor {
    let what = "avg_pool1d";
    let options = p.avg_options(what, count_include_pad);
    DynTensor::R3(module::avg_pool1d(ranked(what, "input", 3, x), options))
}

pub fn avg_pool2d(x: DynTensor, p: &Pool, count_include_pad: i64) -> DynTensor {
    let what = "avg_pool2d";
    let options = p.avg_options(what, count_include_pad);
    DynTensor::R4(module::avg_pool2d(ranked(what, "input", 4, x), options))
}

pub fn adaptive_avg_pool1d(x: DynTensor, output_size: &[usize]) -> DynTensor {
    let what = "adaptive_avg_pool1d";
    let [size] = arr(what, "output_size", output_size);
    DynTensor::R3(module::adaptive_avg_pool1d(
        ranked(what, "input", 3, x),
        size,
    ))
}

pub fn adaptive_avg_pool2d(x: DynTensor, output_size: &[usize]) -> DynTensor {
    let what = "adaptive_avg_pool2d";
    let size = arr(what, "output_size", output_size);
    DynTensor::R4(module::adaptive_avg_pool2d(
        ranked(what, "input", 4, x),
        size,
    ))
}

/// Nearest (`align_corners` None: burn's default, which its nearest mode ignores) or bilinear
/// interpolation to `output_size`.
pub fn interpolate(x: DynTensor, output_size: &[usize], align_corners: Option<i64>) -> DynTensor {
    let what = "interpolate";
    let size = arr(what, "output_size", output_size);
    let options = match align_corners {
        None => InterpolateOptions::new(InterpolateMode::Nearest).with_output_size(size),
        Some(a) => {
            assert!(
                matches!(a, 0 | 1),
                "{what}: align_corners is {a}; it must be 0 or 1"
            );
            InterpolateOptions::new(InterpolateMode::Bilinear)
                .with_output_size(size)
                .with_align_corners(a == 1)
        }
    };
    DynTensor::R4(module::interpolate(ranked(what, "input", 4, x), options))
}

pub fn embedding(weight: DynTensor, indices: &Inline<i64>, device: &Device) -> DynTensor {
    let idx = int_tensor::<2>(&indices.data, &indices.shape, device);
    DynTensor::R3(module::embedding(
        ranked("embedding", "weight", 2, weight),
        idx,
    ))
}

// ---------------------------------------------------------------- shapes (element budget)

/// `(size + 2 padding - dilation (k - 1) - 1) / stride + 1`, or `None` below 1.
fn conv_out(
    size: usize,
    k: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
) -> Option<usize> {
    let span = dilation.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    let room = (size + 2 * padding).checked_sub(span)?;
    Some(room / stride.max(1) + 1)
}

/// The output shape of a convolution (`transposed`: with `padding_out`), or `None`.
pub fn conv_shape(
    inputs: &[Vec<usize>],
    c: &Conv,
    padding_out: Option<&[usize]>,
) -> Option<Vec<usize>> {
    let (x, w) = (inputs.first()?, inputs.get(1)?);
    let n = x.len().checked_sub(2)?;
    let g = c.groups;
    if !(2..=3).contains(&inputs.len()) || w.len() != n + 2 || g == 0 {
        return None;
    }
    if [c.stride.len(), c.padding.len(), c.dilation.len()] != [n; 3] {
        return None;
    }
    let mut out = vec![x[0]];
    let c_out = match padding_out {
        None => (x[1] % g == 0 && w[0] % g == 0 && w[1] * g == x[1]).then_some(w[0])?,
        Some(po) => (po.len() == n && w[0] == x[1] && x[1] % g == 0).then_some(w[1] * g)?,
    };
    out.push(c_out);
    for i in 0..n {
        let (k, s, p, d) = (w[2 + i], c.stride[i], c.padding[i], c.dilation[i]);
        let size = match padding_out {
            None => conv_out(x[2 + i], k, s, p, d)?,
            Some(po) => {
                ((x[2 + i] - 1) * s + d * (k.checked_sub(1)?) + po[i] + 1).checked_sub(2 * p)?
            }
        };
        out.push(size);
    }
    if let Some(b) = inputs.get(2)
        && *b != vec![c_out]
    {
        return None;
    }
    Some(out)
}

/// The output shape of a pooling over the last `n` dims of `x` (rank `n + 2`), or `None`.
pub fn pool_shape(x: &[usize], p: &Pool, n: usize) -> Option<Vec<usize>> {
    if x.len() != n + 2 || [p.kernel.len(), p.stride.len(), p.padding.len()] != [n; 3] {
        return None;
    }
    let mut out = x[..2].to_vec();
    for i in 0..n {
        out.push(conv_out(
            x[2 + i],
            p.kernel[i],
            p.stride[i],
            p.padding[i],
            1,
        )?);
    }
    Some(out)
}

/// `x` (rank `output_size.len() + 2`) with its last dims `output_size`, or `None`.
pub fn adaptive_shape(x: &[usize], output_size: &[usize]) -> Option<Vec<usize>> {
    (x.len() == output_size.len() + 2).then(|| [&x[..2], output_size].concat())
}

pub fn embedding_shape(weight: &[usize], indices: &Inline<i64>) -> Option<Vec<usize>> {
    (weight.len() == 2 && indices.shape.len() == 2)
        .then(|| vec![indices.shape[0], indices.shape[1], weight[1]])
}

#[cfg(test)]
mod tests {
    use crate::ops::Op;
    use crate::value::DynTensor;
    use burn::tensor::Device;
    use serde_json::{Value, json};

    /// `infer_shape` agrees with what burn computes for the nn ops.
    #[test]
    fn inferred_shapes_match_burn() {
        let device = Device::flex();
        let t = |shape: &[usize]| {
            let n = shape.iter().product();
            DynTensor::from_f32(vec![0.5; n], shape, &device)
        };
        let conv = |s: [usize; 2], p: [usize; 2], d: [usize; 2], g: usize| json!({"stride": s, "padding": p, "dilation": d, "groups": g});
        let cases: Vec<(&str, Value, Vec<Vec<usize>>)> = vec![
            (
                "conv2d",
                conv([1, 2], [1, 0], [2, 1], 2),
                vec![vec![2, 4, 5, 6], vec![4, 2, 2, 3], vec![4]],
            ),
            (
                "conv2d",
                conv([2, 1], [0, 1], [1, 1], 1),
                vec![vec![1, 3, 4, 4], vec![2, 3, 3, 1]],
            ),
            (
                "conv1d",
                json!({"stride": [2], "padding": [1], "dilation": [1], "groups": 1}),
                vec![vec![2, 3, 5], vec![4, 3, 2], vec![4]],
            ),
            (
                "conv_transpose2d",
                json!({"stride": [2, 1], "padding": [1, 0], "dilation": [1, 2], "groups": 2,
                       "padding_out": [1, 1]}),
                vec![vec![1, 4, 3, 3], vec![4, 1, 3, 2], vec![2]],
            ),
            (
                "max_pool2d",
                json!({"kernel": [3, 2], "stride": [2, 1], "padding": [1, 1]}),
                vec![vec![2, 3, 5, 4]],
            ),
            (
                "avg_pool2d",
                json!({"kernel": [2, 2], "stride": [1, 3], "padding": [1, 0], "count_include_pad": 0}),
                vec![vec![1, 2, 4, 6]],
            ),
            (
                "adaptive_avg_pool2d",
                json!({"output_size": [3, 2]}),
                vec![vec![1, 2, 5, 4]],
            ),
            (
                "conv_transpose1d",
                json!({"stride": [2], "padding": [1], "dilation": [2], "groups": 2,
                       "padding_out": [1]}),
                vec![vec![2, 4, 3], vec![4, 1, 3], vec![2]],
            ),
            (
                "max_pool1d",
                json!({"kernel": [3], "stride": [2], "padding": [1]}),
                vec![vec![2, 3, 5]],
            ),
            (
                "avg_pool1d",
                json!({"kernel": [2], "stride": [3], "padding": [1], "count_include_pad": 1}),
                vec![vec![1, 2, 6]],
            ),
            (
                "adaptive_avg_pool1d",
                json!({"output_size": [4]}),
                vec![vec![2, 3, 5]],
            ),
            (
                "interpolate_nearest",
                json!({"output_size": [5, 2]}),
                vec![vec![1, 2, 3, 4]],
            ),
            (
                "interpolate_bilinear",
                json!({"output_size": [2, 6], "align_corners": 1}),
                vec![vec![2, 1, 3, 4]],
            ),
            (
                "embedding",
                json!({"indices": {"shape": [2, 3], "data": [0, 2, 0, 1, 1, 2]}}),
                vec![vec![3, 4]],
            ),
        ];
        for (name, attrs, shapes) in cases {
            let op = Op::parse(name, attrs.as_object().unwrap()).unwrap();
            let inputs: Vec<DynTensor> = shapes.iter().map(|s| t(s)).collect();
            let got = op.execute(inputs).dims();
            assert_eq!(op.infer_shape(&shapes), Some(got), "{name} {shapes:?}");
        }
        let bad = Op::parse(
            "conv2d",
            conv([1, 1], [0, 0], [1, 1], 2).as_object().unwrap(),
        )
        .unwrap();
        // 3 input channels do not split into 2 groups
        assert_eq!(bad.infer_shape(&[vec![1, 3, 4, 4], vec![2, 1, 1, 1]]), None);
    }
}
