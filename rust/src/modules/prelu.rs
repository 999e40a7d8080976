//! `prelu`: `x` where `x >= 0`, `weight * x` elsewhere, with one weight (`[1]`, any input) or one
//! per channel (`[C]`, dim 1 of an input of rank >= 2). PyTorch's weight is burn's `alpha`.
//!
//! burn-nn 0.22.1 activation/prelu.rs: `PRelu::forward` is `activation::prelu(x, alpha)`, which
//! reshapes alpha to broadcast over dim 1 and computes `mask_where(x, x < 0, x * alpha)`; its
//! shape check refuses `[C]` with C > 1 on a rank-1 input (PyTorch's too). At `x = 0` the two
//! frameworks' gradients differ (record `prelu-at-zero`; the generator keeps inputs off it).

use burn::module::Param;
use burn::nn::{PRelu, PReluConfig};
use burn::tensor::{Device, FloatDType};
use serde::Deserialize;

use super::ModuleKind;
use super::common::{fitted, options, tensor1};
use crate::document::{ParamName, Tensor as InlineTensor};
use crate::dtype::ProgramDType;
use crate::map;
use crate::value::DynTensor;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PReluDoc {
    pub id: String,
    #[serde(deserialize_with = "crate::document::object")]
    pub weight: InlineTensor,
}

/// `weight`: `num_parameters` elements.
#[derive(Clone, Debug)]
pub struct PReluSpec {
    pub weight: Vec<f64>,
}

impl ModuleKind for PReluSpec {
    type Doc = PReluDoc;
    type Burn = PRelu;

    /// A weight of rank 1 with at least one element.
    fn parse(s: PReluDoc, dtype: ProgramDType) -> Result<Self, String> {
        let (shape, weight) = fitted(s.weight, "weight", 1, dtype)?;
        if shape[0] == 0 {
            return Err("weight shape [0] has no element".to_string());
        }
        Ok(PReluSpec { weight })
    }

    fn param_shape(&self, param: ParamName) -> Option<Vec<usize>> {
        (param == ParamName::Weight).then(|| vec![self.weight.len()])
    }

    /// One weight: any input; `[C]`: dim 1 of an input of rank >= 2 is C (burn panics otherwise).
    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        let n = self.weight.len();
        (n == 1 || (x.len() >= 2 && x[1] == n)).then(|| x.to_vec())
    }

    fn build(&self, device: &Device, dtype: FloatDType) -> PRelu {
        let mut m = PReluConfig::new()
            .with_num_parameters(self.weight.len())
            .init(device);
        m.alpha = Param::from_tensor(tensor1(&self.weight, options(device, dtype)));
        m
    }

    fn forward(m: &PRelu, x: DynTensor) -> DynTensor {
        map!(x, t => m.forward(t))
    }

    fn param(m: &PRelu, param: ParamName) -> Option<DynTensor> {
        (param == ParamName::Weight).then(|| DynTensor::R1(m.alpha.val()))
    }
}
