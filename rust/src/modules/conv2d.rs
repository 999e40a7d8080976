//! `conv2d`: weight `[C_out, C_in / groups, kh, kw]` (PyTorch's and burn's layout), bias
//! `[C_out]` or `null`; stride, padding (symmetric), dilation: one value per spatial dim. Its
//! forward takes an image `[N, C_in, H, W]`.

use burn::module::Param;
use burn::nn::PaddingConfig2d;
use burn::nn::conv::Conv2d;
use burn::tensor::{Device, FloatDType, Tensor, TensorData};
use serde::Deserialize;

use super::ModuleKind;
use super::common::{fitted, options, positive_size, tensor1, vector};
use crate::document::{ParamName, Tensor as InlineTensor};
use crate::dtype::ProgramDType;
use crate::ops::nn::{Conv, conv_shape};
use crate::value::DynTensor;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv2dDoc {
    pub id: String,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
    #[serde(deserialize_with = "crate::document::object")]
    pub weight: InlineTensor,
    #[serde(deserialize_with = "crate::document::nullable_object")]
    pub bias: Option<InlineTensor>,
}

/// `weight` row-major `[C_out, C_in / groups, kh, kw]` (`weight_shape`), `bias` `C_out`
/// elements; padding symmetric per spatial dim.
#[derive(Clone, Debug)]
pub struct Conv2dSpec {
    pub weight_shape: [usize; 4],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub weight: Vec<f64>,
    pub bias: Option<Vec<f64>>,
}

/// One value per spatial dim of a `conv2d` attribute.
fn pair(name: &str, v: &[usize], min: usize) -> Result<[usize; 2], String> {
    let p: [usize; 2] = v
        .try_into()
        .map_err(|_| format!("\"{name}\" must have 2 values (one per spatial dim), got {v:?}"))?;
    if p.iter().any(|&x| x < min) {
        return Err(format!("\"{name}\" values must be >= {min}, got {v:?}"));
    }
    Ok(p)
}

impl ModuleKind for Conv2dSpec {
    type Doc = Conv2dDoc;
    type Burn = Conv2d;

    /// burn's `Conv2dConfig::init` asserts that the groups divide both channel counts.
    fn parse(s: Conv2dDoc, dtype: ProgramDType) -> Result<Self, String> {
        let (shape, weight) = fitted(s.weight, "weight", 4, dtype)?;
        let weight_shape: [usize; 4] = [shape[0], shape[1], shape[2], shape[3]];
        let g = s.groups;
        positive_size("groups", g)?;
        if weight_shape.contains(&0) {
            return Err(format!("weight shape {shape:?} has a zero dim"));
        }
        if !weight_shape[0].is_multiple_of(g) {
            return Err(format!(
                "the weight's C_out ({}) must be divisible by \"groups\" ({g})",
                weight_shape[0]
            ));
        }
        let bias = s
            .bias
            .map(|b| vector(b, "bias", weight_shape[0], dtype))
            .transpose()?;
        Ok(Conv2dSpec {
            weight_shape,
            stride: pair("stride", &s.stride, 1)?,
            padding: pair("padding", &s.padding, 0)?,
            dilation: pair("dilation", &s.dilation, 1)?,
            groups: g,
            weight,
            bias,
        })
    }

    fn param_shape(&self, param: ParamName) -> Option<Vec<usize>> {
        match param {
            ParamName::Weight => Some(self.weight_shape.to_vec()),
            ParamName::Bias if self.bias.is_some() => Some(vec![self.weight_shape[0]]),
            _ => None,
        }
    }

    /// The `conv2d` op's shape rule on the input, the weight and the bias.
    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        let mut inputs = vec![x.to_vec(), self.weight_shape.to_vec()];
        if self.bias.is_some() {
            inputs.push(vec![self.weight_shape[0]]);
        }
        let conv = Conv {
            stride: &self.stride,
            padding: &self.padding,
            dilation: &self.dilation,
            groups: self.groups,
        };
        if x.len() != 4 {
            return None;
        }
        conv_shape(&inputs, &conv, None)
    }

    fn build(&self, device: &Device, dtype: FloatDType) -> Conv2d {
        let w = Tensor::<4>::from_data(
            TensorData::new(self.weight.clone(), self.weight_shape),
            options(device, dtype),
        );
        let [ph, pw] = self.padding;
        Conv2d {
            weight: Param::from_tensor(w),
            bias: self
                .bias
                .as_ref()
                .map(|b| Param::from_tensor(tensor1(b, options(device, dtype)))),
            stride: self.stride,
            kernel_size: [self.weight_shape[2], self.weight_shape[3]],
            dilation: self.dilation,
            groups: self.groups,
            // PyTorch's symmetric padding (ph, pw) is burn's (top, left, bottom, right)
            padding: PaddingConfig2d::Explicit(ph, pw, ph, pw),
        }
    }

    fn forward(m: &Conv2d, x: DynTensor) -> DynTensor {
        match x {
            DynTensor::R4(t) => DynTensor::R4(m.forward(t)),
            other => panic!(
                "validated: conv2d takes a rank-4 input, got rank {}",
                other.rank()
            ),
        }
    }

    fn param(m: &Conv2d, param: ParamName) -> Option<DynTensor> {
        match param {
            ParamName::Weight => Some(DynTensor::R4(m.weight.val())),
            ParamName::Bias => Some(DynTensor::R1(
                m.bias.as_ref().map(|b| b.val()).expect("validated: a bias"),
            )),
            _ => None,
        }
    }
}
