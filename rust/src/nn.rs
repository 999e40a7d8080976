//! nn modules (`module`, `transform`, `apply`, `param` statements) on burn's `burn::nn`.
//!
//! Modules are built on the autodiff device with their parameters as `Param::from_tensor`
//! (require grad). `Linear` stores its weight as `[d_input, d_output]`; programs use PyTorch's
//! `[d_output, d_input]`, so the weight is transposed when the module is built and when it is
//! reported (a declared layout difference).

use burn::module::{Module, Param};
use burn::nn::{Dropout, DropoutConfig, Linear};
use burn::tensor::{Device, FloatDType, Tensor, TensorCreationOptions, TensorData};

use crate::map;
use crate::program::{ModuleSpec, ParamName, Transform};
use crate::value::DynTensor;

/// A module handle.
#[derive(Clone, Debug)]
pub enum NnModule {
    Linear(Linear),
    Dropout(Dropout),
}

/// Row-major `[rows, cols]` data transposed to `[cols, rows]`.
pub fn transpose_data<T: Copy>(rows: usize, cols: usize, data: &[T]) -> Vec<T> {
    assert_eq!(
        data.len(),
        rows * cols,
        "transpose: data does not match the shape"
    );
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| data[r * cols + c]))
        .collect()
}

/// Applies a `Module` method to either module type.
macro_rules! each {
    ($m:expr, $x:ident => $body:expr) => {
        match $m {
            NnModule::Linear($x) => NnModule::Linear($body),
            NnModule::Dropout($x) => NnModule::Dropout($body),
        }
    };
}

impl NnModule {
    /// Builds the module on `device` (the autodiff device).
    pub fn build(spec: &ModuleSpec, device: &Device, dtype: FloatDType) -> Self {
        let options = || TensorCreationOptions::new(device.clone()).with_dtype(dtype.into());
        match spec {
            ModuleSpec::Linear {
                d_input,
                d_output,
                weight,
                bias,
            } => {
                let w = transpose_data(*d_output, *d_input, weight);
                let w =
                    Tensor::<2>::from_data(TensorData::new(w, [*d_input, *d_output]), options());
                let bias = bias.as_ref().map(|b| {
                    let b =
                        Tensor::<1>::from_data(TensorData::new(b.clone(), [*d_output]), options());
                    Param::from_tensor(b)
                });
                NnModule::Linear(Linear {
                    weight: Param::from_tensor(w),
                    bias,
                })
            }
            ModuleSpec::Dropout { p } => NnModule::Dropout(DropoutConfig::new(*p).init()),
        }
    }

    /// The module after a burn `Module` method (the original is left untouched).
    pub fn transform(&self, transform: Transform) -> Self {
        match transform {
            Transform::Valid => each!(self, m => m.valid()),
            Transform::Train => each!(self.clone(), m => m.train()),
            Transform::NoGrad => each!(self.clone(), m => m.no_grad()),
            Transform::Freeze => each!(self.clone(), m => m.freeze()),
            Transform::Unfreeze => each!(self.clone(), m => m.unfreeze()),
        }
    }

    /// The module's forward on `x`.
    pub fn forward(&self, x: DynTensor) -> DynTensor {
        match self {
            NnModule::Linear(m) => map!(x, t => m.forward(t)),
            NnModule::Dropout(m) => map!(x, t => m.forward(t)),
        }
    }

    /// A parameter tensor as burn stores it (`.val()`): the weight is `[d_input, d_output]`.
    pub fn param(&self, param: ParamName) -> DynTensor {
        match (self, param) {
            (NnModule::Linear(m), ParamName::Weight) => DynTensor::R2(m.weight.val()),
            (NnModule::Linear(m), ParamName::Bias) => DynTensor::R1(
                m.bias
                    .as_ref()
                    .expect("validated: the linear module has a bias")
                    .val(),
            ),
            (NnModule::Dropout(_), _) => panic!("validated: a dropout module has no parameters"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes() {
        // [[1, 2, 3], [4, 5, 6]] -> [[1, 4], [2, 5], [3, 6]]
        assert_eq!(
            transpose_data(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
    }

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
