//! `linear`: `y = x W^T + b` over the last dim. The statement's weight is PyTorch's
//! `[d_output, d_input]`; burn's `Linear` stores it as `[d_input, d_output]`, so the weight is
//! transposed when the module is built and when it is reported.

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Device, FloatDType, Tensor, TensorData};
use serde::Deserialize;

use super::ModuleKind;
use super::common::{fitted, options, transpose_data};
use crate::document::{ParamName, Tensor as InlineTensor};
use crate::dtype::ProgramDType;
use crate::map;
use crate::value::DynTensor;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearDoc {
    pub id: String,
    /// `[out, in]`, PyTorch's layout.
    #[serde(deserialize_with = "crate::document::object")]
    pub weight: InlineTensor,
    /// Required, `null` for none.
    #[serde(deserialize_with = "crate::document::nullable_object")]
    pub bias: Option<InlineTensor>,
}

/// `weight` is row-major in PyTorch's layout `[d_output, d_input]`; `bias` has `d_output`
/// elements.
#[derive(Clone, Debug)]
pub struct LinearSpec {
    pub d_input: usize,
    pub d_output: usize,
    pub weight: Vec<f64>,
    pub bias: Option<Vec<f64>>,
}

impl ModuleKind for LinearSpec {
    type Doc = LinearDoc;
    type Burn = Linear;

    fn parse(s: LinearDoc, dtype: ProgramDType) -> Result<Self, String> {
        let (shape, weight) = fitted(s.weight, "weight", 2, dtype)?;
        let (d_output, d_input) = (shape[0], shape[1]);
        let bias = match s.bias {
            None => None,
            Some(b) => {
                let (bshape, bias) = fitted(b, "bias", 1, dtype)?;
                if bshape != [d_output] {
                    return Err(format!(
                        "bias has shape {bshape:?} but the weight [out, in] = {shape:?} needs [{d_output}]"
                    ));
                }
                Some(bias)
            }
        };
        Ok(LinearSpec {
            d_input,
            d_output,
            weight,
            bias,
        })
    }

    fn param_shape(&self, param: ParamName) -> Option<Vec<usize>> {
        match param {
            ParamName::Weight => Some(vec![self.d_output, self.d_input]),
            ParamName::Bias if self.bias.is_some() => Some(vec![self.d_output]),
            _ => None,
        }
    }

    fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        (x.last() == Some(&self.d_input)).then(|| {
            let mut s = x.to_vec();
            s.pop();
            s.push(self.d_output);
            s
        })
    }

    fn build(&self, device: &Device, dtype: FloatDType) -> Linear {
        let (d_input, d_output) = (self.d_input, self.d_output);
        let w = transpose_data(d_output, d_input, &self.weight);
        let w = Tensor::<2>::from_data(
            TensorData::new(w, [d_input, d_output]),
            options(device, dtype),
        );
        let bias = self.bias.as_ref().map(|b| {
            let b = Tensor::<1>::from_data(
                TensorData::new(b.clone(), [d_output]),
                options(device, dtype),
            );
            Param::from_tensor(b)
        });
        Linear {
            weight: Param::from_tensor(w),
            bias,
        }
    }

    fn forward(m: &Linear, x: DynTensor) -> DynTensor {
        map!(x, t => m.forward(t))
    }

    fn param(m: &Linear, param: ParamName) -> Option<DynTensor> {
        match param {
            ParamName::Weight => Some(DynTensor::R2(m.weight.val())),
            ParamName::Bias => Some(DynTensor::R1(
                m.bias.as_ref().map(|b| b.val()).expect("validated: a bias"),
            )),
            _ => None,
        }
    }

    /// burn's weight is `[d_input, d_output]`, the transpose of PyTorch's.
    fn transposed(param: ParamName) -> bool {
        param == ParamName::Weight
    }
}

#[cfg(test)]
mod tests {
    /// docs/semantics.md#golden-linear.
    #[test]
    fn golden_3_flags() {
        let doc = serde_json::json!({"format": "difftest-program", "version": 1, "statements": [
            {"id": "fc", "kind": "module", "module": "linear",
             "weight": {"shape": [2, 2], "data": [0.5, -1.0, 2.0, 0.25]},
             "bias": {"shape": [2], "data": [0.25, -0.5]}},
            {"id": "x", "kind": "leaf", "shape": [1, 2], "data": [1.0, 2.0], "device": "autodiff",
             "require_grad": false},
            {"id": "y1", "kind": "apply", "module": "fc", "input": "x"},
            {"id": "fv", "kind": "transform", "transform": "valid", "input": "fc"},
            {"id": "wv", "kind": "param", "module": "fv", "param": "weight"},
            {"id": "xp", "kind": "cut", "cut": "without_autodiff", "input": "x"},
            {"id": "y2", "kind": "apply", "module": "fv", "input": "xp"},
            {"id": "y3", "kind": "apply", "module": "fv", "input": "x"},
            {"id": "ft", "kind": "transform", "transform": "train", "input": "fv"},
            {"id": "wt", "kind": "param", "module": "ft", "param": "weight"},
            {"id": "w", "kind": "param", "module": "fc", "param": "weight"},
            {"id": "s", "kind": "op", "op": "sum", "inputs": ["y1"]},
            {"id": "bw", "kind": "backward", "input": "s"}
        ]});
        let program = crate::program::Program::from_json(&doc).unwrap();
        let obs = crate::exec::run(&program);
        assert!(obs.error.is_none(), "{:?}", obs.error);
        let flags = |id: &str| {
            let v = obs.values.iter().find(|v| v.id == id).unwrap();
            let f = v.flags;
            (f.is_autodiff, f.is_tracked, f.is_require_grad)
        };
        assert_eq!(flags("y1"), (true, true, false));
        assert_eq!(flags("wv"), (false, false, false));
        assert_eq!(flags("y2"), (false, false, false));
        assert_eq!(flags("y3"), (true, false, false));
        assert_eq!(flags("wt"), (true, true, true));
        // PyTorch layout and values: y = x W^T + b.
        let w = obs.values.iter().find(|v| v.id == "w").unwrap();
        assert_eq!(
            (w.shape.clone(), w.data.clone()),
            (vec![2, 2], vec![0.5, -1.0, 2.0, 0.25])
        );
        let y1 = obs.values.iter().find(|v| v.id == "y1").unwrap();
        assert_eq!(y1.data, vec![-1.25, 2.0]);
        // d sum(x W^T + b) / dW[o][i] = x[i].
        let grads = &obs.backwards[0].grads.0;
        let gw = grads
            .iter()
            .find(|(id, _)| id == "w")
            .unwrap()
            .1
            .as_ref()
            .unwrap();
        assert_eq!(gw.data, vec![1.0, 2.0, 1.0, 2.0]);
    }
}
