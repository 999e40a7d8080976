//! `group_norm` over channel dim 1 split into `num_groups` groups (inputs of rank 2 to 4).
//! PyTorch's weight/bias = burn's gamma/beta; weight and bias both `null` for a module without
//! affine parameters.

use burn::module::Param;
use burn::nn::{GroupNorm, GroupNormConfig};
use burn::tensor::{Device, FloatDType};
use serde::Deserialize;

use super::ModuleKind;
use super::common::{options, positive_epsilon, positive_size, tensor1, vector};
use crate::document::{ParamName, Tensor as InlineTensor};
use crate::dtype::ProgramDType;
use crate::map;
use crate::ops;
use crate::value::DynTensor;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupNormDoc {
    pub id: String,
    pub num_groups: usize,
    pub num_channels: usize,
    pub epsilon: f64,
    #[serde(deserialize_with = "crate::document::nullable_object")]
    pub weight: Option<InlineTensor>,
    #[serde(deserialize_with = "crate::document::nullable_object")]
    pub bias: Option<InlineTensor>,
}

/// `num_channels` elements per tensor; `affine` = `Some((weight, bias))`.
#[derive(Clone, Debug)]
pub struct GroupNormSpec {
    pub num_groups: usize,
    pub num_channels: usize,
    pub epsilon: f64,
    pub affine: Option<(Vec<f64>, Vec<f64>)>,
}

impl ModuleKind for GroupNormSpec {
    type Doc = GroupNormDoc;
    type Burn = GroupNorm;

    /// burn's `GroupNormConfig::init` asserts that the groups divide the channels; its
    /// `affine` needs both gamma and beta.
    fn parse(s: GroupNormDoc, dtype: ProgramDType) -> Result<Self, String> {
        let (g, c) = (s.num_groups, s.num_channels);
        positive_size("num_groups", g)?;
        positive_size("num_channels", c)?;
        if c % g != 0 {
            return Err(format!(
                "\"num_channels\" ({c}) must be divisible by \"num_groups\" ({g})"
            ));
        }
        positive_epsilon(s.epsilon)?;
        let affine = match (s.weight, s.bias) {
            (Some(w), Some(b)) => {
                Some((vector(w, "weight", c, dtype)?, vector(b, "bias", c, dtype)?))
            }
            (None, None) => None,
            _ => return Err("weight and bias must both be tensors or both be null".to_string()),
        };
        Ok(GroupNormSpec {
            num_groups: g,
            num_channels: c,
            epsilon: s.epsilon,
            affine,
        })
    }

    fn param_shape(&self, param: ParamName) -> Option<Vec<usize>> {
        match param {
            ParamName::Weight | ParamName::Bias if self.affine.is_some() => {
                Some(vec![self.num_channels])
            }
            _ => None,
        }
    }

    // burn's group_norm panics when the input has at most 2 elements
    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        ((2..=4).contains(&x.len()) && x[1] == self.num_channels && ops::numel(x) > 2)
            .then(|| x.to_vec())
    }

    fn build(&self, device: &Device, dtype: FloatDType) -> GroupNorm {
        let mut m = GroupNormConfig::new(self.num_groups, self.num_channels)
            .with_epsilon(self.epsilon)
            .with_affine(self.affine.is_some())
            .init(device);
        if let Some((w, b)) = &self.affine {
            m.gamma = Some(Param::from_tensor(tensor1(w, options(device, dtype))));
            m.beta = Some(Param::from_tensor(tensor1(b, options(device, dtype))));
        }
        m
    }

    fn forward(m: &GroupNorm, x: DynTensor) -> DynTensor {
        map!(x, t => m.forward(t))
    }

    fn param(m: &GroupNorm, param: ParamName) -> Option<DynTensor> {
        let affine = match param {
            ParamName::Weight => &m.gamma,
            ParamName::Bias => &m.beta,
            _ => return None,
        };
        Some(DynTensor::R1(
            affine.as_ref().map(|p| p.val()).expect("validated: affine"),
        ))
    }
}
