//! `embedding`: a table `[num_embeddings, embedding_dim]` (PyTorch's and burn's layout). Its
//! forward takes indices: a leaf `[B, L]` of integral entries in `[0, rows)` that does not
//! require grad (burn's users convert token ids held as floats with `.int()`, which truncates;
//! the leaf is data, as token ids are).

use burn::module::Param;
use burn::nn::{Embedding, EmbeddingConfig};
use burn::tensor::{Device, FloatDType, Tensor, TensorData};
use serde::Deserialize;

use super::ModuleKind;
use super::common::{fitted, options};
use crate::document::{ParamName, Tensor as InlineTensor};
use crate::dtype::ProgramDType;
use crate::program;
use crate::value::DynTensor;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingDoc {
    pub id: String,
    #[serde(deserialize_with = "crate::document::object")]
    pub weight: InlineTensor,
}

/// `weight` row-major `[rows, dim]`.
#[derive(Clone, Debug)]
pub struct EmbeddingSpec {
    pub rows: usize,
    pub dim: usize,
    pub weight: Vec<f64>,
}

impl ModuleKind for EmbeddingSpec {
    type Doc = EmbeddingDoc;
    type Burn = Embedding;

    /// A table `[rows, dim]` with dims >= 1.
    fn parse(s: EmbeddingDoc, dtype: ProgramDType) -> Result<Self, String> {
        let (shape, weight) = fitted(s.weight, "weight", 2, dtype)?;
        if shape.contains(&0) {
            return Err(format!("weight shape {shape:?} has a zero dim"));
        }
        Ok(EmbeddingSpec {
            rows: shape[0],
            dim: shape[1],
            weight,
        })
    }

    fn param_shape(&self, param: ParamName) -> Option<Vec<usize>> {
        (param == ParamName::Weight).then(|| vec![self.rows, self.dim])
    }

    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        (x.len() == 2).then(|| vec![x[0], x[1], self.dim])
    }

    /// The input is a leaf that does not require grad, of integral entries in `[0, rows)`.
    fn check_input(&self, input: &program::Kind) -> Result<(), String> {
        let rows = self.rows;
        let program::Kind::Leaf {
            data, require_grad, ..
        } = input
        else {
            return Err(
                "embedding takes indices: its input must be a leaf (of integral entries), not a computed value"
                    .to_string(),
            );
        };
        if *require_grad {
            return Err(
                "embedding takes indices: its input leaf must not require grad".to_string(),
            );
        }
        match data
            .iter()
            .position(|v| !(v.fract() == 0.0 && *v >= 0.0 && *v < rows as f64))
        {
            Some(k) => Err(format!(
                "embedding takes indices in [0, {rows}): element {k} of its input is {}",
                data[k]
            )),
            None => Ok(()),
        }
    }

    fn build(&self, device: &Device, dtype: FloatDType) -> Embedding {
        let mut m = EmbeddingConfig::new(self.rows, self.dim).init(device);
        m.weight = Param::from_tensor(Tensor::<2>::from_data(
            TensorData::new(self.weight.clone(), [self.rows, self.dim]),
            options(device, dtype),
        ));
        m
    }

    /// The indices leaf (validated: integral entries in range) converted as burn's users
    /// convert token ids held as floats: `.int()`.
    fn forward(m: &Embedding, x: DynTensor) -> DynTensor {
        match x {
            DynTensor::R2(t) => DynTensor::R3(m.forward(t.int())),
            other => panic!(
                "validated: embedding takes a rank-2 input, got rank {}",
                other.rank()
            ),
        }
    }

    fn param(m: &Embedding, param: ParamName) -> Option<DynTensor> {
        (param == ParamName::Weight).then(|| DynTensor::R2(m.weight.val()))
    }
}
