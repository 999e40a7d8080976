//! `rms_norm` over the last dim (`d_model` weight elements; PyTorch's weight = burn's gamma).

use burn::module::Param;
use burn::nn::{RmsNorm, RmsNormConfig};
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
pub struct RmsNormDoc {
    pub id: String,
    pub d_model: usize,
    pub epsilon: f64,
    #[serde(deserialize_with = "crate::document::object")]
    pub weight: InlineTensor,
}

#[derive(Clone, Debug)]
pub struct RmsNormSpec {
    pub d_model: usize,
    pub epsilon: f64,
    pub weight: Vec<f64>,
}

impl ModuleKind for RmsNormSpec {
    type Doc = RmsNormDoc;
    type Burn = RmsNorm;

    fn parse(s: RmsNormDoc, dtype: ProgramDType) -> Result<Self, String> {
        let n = s.d_model;
        positive_size("d_model", n)?;
        positive_epsilon(s.epsilon)?;
        Ok(RmsNormSpec {
            d_model: n,
            epsilon: s.epsilon,
            weight: vector(s.weight, "weight", n, dtype)?,
        })
    }

    fn param_shape(&self, param: ParamName) -> Option<Vec<usize>> {
        (param == ParamName::Weight).then(|| vec![self.d_model])
    }

    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        (x.last() == Some(&self.d_model)).then(|| x.to_vec())
    }

    fn build(&self, device: &Device, dtype: FloatDType) -> RmsNorm {
        let mut m = RmsNormConfig::new(self.d_model)
            .with_epsilon(self.epsilon)
            .init(device);
        m.gamma = Param::from_tensor(tensor1(&self.weight, options(device, dtype)));
        m
    }

    fn forward(m: &RmsNorm, x: DynTensor) -> DynTensor {
        map!(x, t => m.forward(t))
    }

    fn param(m: &RmsNorm, param: ParamName) -> Option<DynTensor> {
        (param == ParamName::Weight).then(|| DynTensor::R1(m.gamma.val()))
    }
}
