//! `batch_norm`: BatchNorm over channel dim 1 (inputs of rank 2 to 4). PyTorch's names: weight
//! = burn's gamma, bias = beta; the running statistics are buffers. Every tensor has
//! `num_features` elements and is given inline.

use burn::module::{Param, RunningState};
use burn::nn::{BatchNorm, BatchNormConfig};
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
pub struct BatchNormDoc {
    pub id: String,
    pub num_features: usize,
    pub epsilon: f64,
    pub momentum: f64,
    #[serde(deserialize_with = "crate::document::object")]
    pub weight: InlineTensor,
    #[serde(deserialize_with = "crate::document::object")]
    pub bias: InlineTensor,
    #[serde(deserialize_with = "crate::document::object")]
    pub running_mean: InlineTensor,
    #[serde(deserialize_with = "crate::document::object")]
    pub running_var: InlineTensor,
}

/// Every tensor has `num_features` elements.
#[derive(Clone, Debug)]
pub struct BatchNormSpec {
    pub num_features: usize,
    pub epsilon: f64,
    pub momentum: f64,
    pub weight: Vec<f64>,
    pub bias: Vec<f64>,
    pub running_mean: Vec<f64>,
    pub running_var: Vec<f64>,
}

impl ModuleKind for BatchNormSpec {
    type Doc = BatchNormDoc;
    type Burn = BatchNorm;

    const NOT_STEPPED: Option<&'static str> = Some(
        "step: a batch_norm module is not stepped (its running state is not modelled \
         across optimizer steps)",
    );

    /// burn's `BatchNormConfig::init` asserts the same.
    fn parse(s: BatchNormDoc, dtype: ProgramDType) -> Result<Self, String> {
        let n = s.num_features;
        positive_size("num_features", n)?;
        positive_epsilon(s.epsilon)?;
        if !(s.momentum.is_finite() && (0.0..=1.0).contains(&s.momentum)) {
            return Err(format!(
                "\"momentum\" must be finite and in [0, 1], got {}",
                s.momentum
            ));
        }
        Ok(BatchNormSpec {
            num_features: n,
            epsilon: s.epsilon,
            momentum: s.momentum,
            weight: vector(s.weight, "weight", n, dtype)?,
            bias: vector(s.bias, "bias", n, dtype)?,
            running_mean: vector(s.running_mean, "running_mean", n, dtype)?,
            running_var: vector(s.running_var, "running_var", n, dtype)?,
        })
    }

    fn param_shape(&self, _param: ParamName) -> Option<Vec<usize>> {
        Some(vec![self.num_features])
    }

    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        ((2..=4).contains(&x.len()) && x[1] == self.num_features).then(|| x.to_vec())
    }

    fn build(&self, device: &Device, dtype: FloatDType) -> BatchNorm {
        let mut m = BatchNormConfig::new(self.num_features)
            .with_epsilon(self.epsilon)
            .with_momentum(self.momentum)
            .init(device);
        let t = |data: &[f64]| tensor1(data, options(device, dtype));
        m.gamma = Param::from_tensor(t(&self.weight));
        m.beta = Param::from_tensor(t(&self.bias));
        m.running_mean = RunningState::new(t(&self.running_mean));
        m.running_var = RunningState::new(t(&self.running_var));
        m
    }

    fn forward(m: &BatchNorm, x: DynTensor) -> DynTensor {
        map!(x, t => m.forward(t))
    }

    fn param(m: &BatchNorm, param: ParamName) -> Option<DynTensor> {
        Some(DynTensor::R1(match param {
            ParamName::Weight => m.gamma.val(),
            ParamName::Bias => m.beta.val(),
            ParamName::RunningMean => m.running_mean.value_sync(),
            ParamName::RunningVar => m.running_var.value_sync(),
        }))
    }
}

#[cfg(test)]
mod tests {
    fn bn(field: &str, value: serde_json::Value) -> Result<crate::program::Program, String> {
        let t = |d: Vec<f32>| serde_json::json!({"shape": [d.len()], "data": d});
        let mut m = serde_json::json!({"id": "bn", "kind": "module", "module": "batch_norm",
            "num_features": 2, "epsilon": 1e-5, "momentum": 0.1,
            "weight": t(vec![1.0, 1.0]), "bias": t(vec![0.0, 0.0]),
            "running_mean": t(vec![0.0, 0.0]), "running_var": t(vec![1.0, 1.0])});
        m[field] = value;
        let doc =
            serde_json::json!({"format": "difftest-program", "version": 1, "statements": [m]});
        crate::program::Program::from_json(&doc).map_err(|e| e.message)
    }

    #[test]
    fn batch_norm_statements_are_validated() {
        assert!(bn("momentum", serde_json::json!(0.5)).is_ok());
        let err = bn("momentum", serde_json::json!(1.5)).unwrap_err();
        assert!(err.contains("momentum"), "{err}");
        let err = bn("epsilon", serde_json::json!(0.0)).unwrap_err();
        assert!(err.contains("epsilon"), "{err}");
        let err = bn(
            "running_var",
            serde_json::json!({"shape": [3], "data": [1.0, 1.0, 1.0]}),
        )
        .unwrap_err();
        assert!(err.contains("running_var") && err.contains("[2]"), "{err}");
    }
}
