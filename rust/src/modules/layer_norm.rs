//! `layer_norm` over the last dim (`normalized_shape` = `[d_model]`). PyTorch's weight/bias =
//! burn's gamma/beta; bias `null` for none.

use burn::module::Param;
use burn::nn::{LayerNorm, LayerNormConfig};
use burn::tensor::{Device, FloatDType};
use serde::Deserialize;

use super::ModuleKind;
use super::common::{options, positive_epsilon, positive_size, tensor1, vector};
use crate::document::{ParamName, Tensor as InlineTensor};
use crate::dtype::ProgramDType;
use crate::map;
use crate::value::DynTensor;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormDoc {
    pub id: String,
    pub d_model: usize,
    pub epsilon: f64,
    #[serde(deserialize_with = "crate::document::object")]
    pub weight: InlineTensor,
    #[serde(deserialize_with = "crate::document::nullable_object")]
    pub bias: Option<InlineTensor>,
}

/// `d_model` elements per tensor.
#[derive(Clone, Debug)]
pub struct LayerNormSpec {
    pub d_model: usize,
    pub epsilon: f64,
    pub weight: Vec<f64>,
    pub bias: Option<Vec<f64>>,
}

impl ModuleKind for LayerNormSpec {
    type Doc = LayerNormDoc;
    type Burn = LayerNorm;

    fn parse(s: LayerNormDoc, dtype: ProgramDType) -> Result<Self, String> {
        let n = s.d_model;
        positive_size("d_model", n)?;
        positive_epsilon(s.epsilon)?;
        Ok(LayerNormSpec {
            d_model: n,
            epsilon: s.epsilon,
            weight: vector(s.weight, "weight", n, dtype)?,
            bias: s.bias.map(|b| vector(b, "bias", n, dtype)).transpose()?,
        })
    }

    fn param_shape(&self, param: ParamName) -> Option<Vec<usize>> {
        match param {
            ParamName::Weight => Some(vec![self.d_model]),
            ParamName::Bias if self.bias.is_some() => Some(vec![self.d_model]),
            _ => None,
        }
    }

    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        (x.last() == Some(&self.d_model)).then(|| x.to_vec())
    }

    fn build(&self, device: &Device, dtype: FloatDType) -> LayerNorm {
        let mut m = LayerNormConfig::new(self.d_model)
            .with_epsilon(self.epsilon)
            .with_bias(self.bias.is_some())
            .init(device);
        m.gamma = Param::from_tensor(tensor1(&self.weight, options(device, dtype)));
        m.beta = self
            .bias
            .as_ref()
            .map(|b| Param::from_tensor(tensor1(b, options(device, dtype))));
        m
    }

    fn forward(m: &LayerNorm, x: DynTensor) -> DynTensor {
        map!(x, t => m.forward(t))
    }

    fn param(m: &LayerNorm, param: ParamName) -> Option<DynTensor> {
        match param {
            ParamName::Weight => Some(DynTensor::R1(m.gamma.val())),
            ParamName::Bias => Some(DynTensor::R1(
                m.beta.as_ref().map(|b| b.val()).expect("validated: a bias"),
            )),
            _ => None,
        }
    }
}
