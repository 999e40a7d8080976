//! nn modules (`module`, `transform`, `apply`, `param` statements) on burn's `burn::nn`.
//!
//! Modules are built on the autodiff device with their parameters as `Param::from_tensor`
//! (require grad). `Linear` stores its weight as `[d_input, d_output]`; programs use PyTorch's
//! `[d_output, d_input]`, so the weight is transposed when the module is built and when it is
//! reported (a declared layout difference).

use burn::module::{Module, Param, RunningState};
use burn::nn::conv::Conv2d;
use burn::nn::{
    BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Embedding, EmbeddingConfig, GroupNorm,
    GroupNormConfig, LayerNorm, LayerNormConfig, Linear, PaddingConfig2d, RmsNorm, RmsNormConfig,
};
use burn::tensor::{Device, FloatDType, Tensor, TensorCreationOptions, TensorData};

use crate::document;
use crate::dtype::ProgramDType;
use crate::map;
use crate::program::{ModuleSpec, ParamName, Transform, inline_tensor};
use crate::value::DynTensor;

/// A module handle.
#[derive(Clone, Debug)]
pub enum NnModule {
    Linear(Linear),
    Dropout(Dropout),
    BatchNorm(BatchNorm),
    LayerNorm(LayerNorm),
    RmsNorm(RmsNorm),
    GroupNorm(GroupNorm),
    Conv2d(Conv2d),
    Embedding(Embedding),
}

/// A rank-1 inline tensor of `n` elements, values of the program's `dtype` (`what` names it in
/// errors).
fn vector(
    t: document::Tensor,
    what: &str,
    n: usize,
    dtype: ProgramDType,
) -> Result<Vec<f64>, String> {
    let (shape, mut data) = inline_tensor(t, what, 1)?;
    dtype
        .fit_all(&mut data)
        .map_err(|e| format!("{what}: {e}"))?;
    if shape != [n] {
        return Err(format!(
            "{what} has shape {shape:?}, the module needs [{n}]"
        ));
    }
    Ok(data)
}

fn positive_size(name: &str, n: usize) -> Result<(), String> {
    if n == 0 {
        return Err(format!("\"{name}\" must be >= 1"));
    }
    Ok(())
}

fn positive_epsilon(e: f64) -> Result<(), String> {
    if !(e.is_finite() && e > 0.0) {
        return Err(format!("\"epsilon\" must be finite and > 0, got {e}"));
    }
    Ok(())
}

/// Validates a `batch_norm` statement (burn's `BatchNormConfig::init` asserts the same).
pub fn batch_norm_spec(
    s: document::BatchNormDoc,
    dtype: ProgramDType,
) -> Result<ModuleSpec, String> {
    let n = s.num_features;
    positive_size("num_features", n)?;
    positive_epsilon(s.epsilon)?;
    if !(s.momentum.is_finite() && (0.0..=1.0).contains(&s.momentum)) {
        return Err(format!(
            "\"momentum\" must be finite and in [0, 1], got {}",
            s.momentum
        ));
    }
    Ok(ModuleSpec::BatchNorm {
        num_features: n,
        epsilon: s.epsilon,
        momentum: s.momentum,
        weight: vector(s.weight, "weight", n, dtype)?,
        bias: vector(s.bias, "bias", n, dtype)?,
        running_mean: vector(s.running_mean, "running_mean", n, dtype)?,
        running_var: vector(s.running_var, "running_var", n, dtype)?,
    })
}

/// Validates a `layer_norm` statement.
pub fn layer_norm_spec(
    s: document::LayerNormDoc,
    dtype: ProgramDType,
) -> Result<ModuleSpec, String> {
    let n = s.d_model;
    positive_size("d_model", n)?;
    positive_epsilon(s.epsilon)?;
    Ok(ModuleSpec::LayerNorm {
        d_model: n,
        epsilon: s.epsilon,
        weight: vector(s.weight, "weight", n, dtype)?,
        bias: s.bias.map(|b| vector(b, "bias", n, dtype)).transpose()?,
    })
}

/// Validates an `rms_norm` statement.
pub fn rms_norm_spec(s: document::RmsNormDoc, dtype: ProgramDType) -> Result<ModuleSpec, String> {
    let n = s.d_model;
    positive_size("d_model", n)?;
    positive_epsilon(s.epsilon)?;
    Ok(ModuleSpec::RmsNorm {
        d_model: n,
        epsilon: s.epsilon,
        weight: vector(s.weight, "weight", n, dtype)?,
    })
}

/// Validates a `group_norm` statement (burn's `GroupNormConfig::init` asserts that the groups
/// divide the channels; its `affine` needs both gamma and beta).
pub fn group_norm_spec(
    s: document::GroupNormDoc,
    dtype: ProgramDType,
) -> Result<ModuleSpec, String> {
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
        (Some(w), Some(b)) => Some((vector(w, "weight", c, dtype)?, vector(b, "bias", c, dtype)?)),
        (None, None) => None,
        _ => return Err("weight and bias must both be tensors or both be null".to_string()),
    };
    Ok(ModuleSpec::GroupNorm {
        num_groups: g,
        num_channels: c,
        epsilon: s.epsilon,
        affine,
    })
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

/// Validates a `conv2d` statement (burn's `Conv2dConfig::init` asserts that the groups divide
/// both channel counts).
pub fn conv2d_spec(s: document::Conv2dDoc, dtype: ProgramDType) -> Result<ModuleSpec, String> {
    let (shape, mut weight) = inline_tensor(s.weight, "weight", 4)?;
    dtype
        .fit_all(&mut weight)
        .map_err(|e| format!("weight: {e}"))?;
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
    Ok(ModuleSpec::Conv2d {
        weight_shape,
        stride: pair("stride", &s.stride, 1)?,
        padding: pair("padding", &s.padding, 0)?,
        dilation: pair("dilation", &s.dilation, 1)?,
        groups: g,
        weight,
        bias,
    })
}

/// Validates an `embedding` statement: a table `[rows, dim]` with dims >= 1.
pub fn embedding_spec(
    s: document::EmbeddingDoc,
    dtype: ProgramDType,
) -> Result<ModuleSpec, String> {
    let (shape, mut weight) = inline_tensor(s.weight, "weight", 2)?;
    dtype
        .fit_all(&mut weight)
        .map_err(|e| format!("weight: {e}"))?;
    if shape.contains(&0) {
        return Err(format!("weight shape {shape:?} has a zero dim"));
    }
    Ok(ModuleSpec::Embedding {
        rows: shape[0],
        dim: shape[1],
        weight,
    })
}

fn tensor1(data: &[f64], options: TensorCreationOptions) -> Tensor<1> {
    Tensor::<1>::from_data(TensorData::new(data.to_vec(), [data.len()]), options)
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
            NnModule::BatchNorm($x) => NnModule::BatchNorm($body),
            NnModule::LayerNorm($x) => NnModule::LayerNorm($body),
            NnModule::RmsNorm($x) => NnModule::RmsNorm($body),
            NnModule::GroupNorm($x) => NnModule::GroupNorm($body),
            NnModule::Conv2d($x) => NnModule::Conv2d($body),
            NnModule::Embedding($x) => NnModule::Embedding($body),
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
            ModuleSpec::BatchNorm {
                num_features,
                epsilon,
                momentum,
                weight,
                bias,
                running_mean,
                running_var,
            } => {
                let mut m = BatchNormConfig::new(*num_features)
                    .with_epsilon(*epsilon)
                    .with_momentum(*momentum)
                    .init(device);
                m.gamma = Param::from_tensor(tensor1(weight, options()));
                m.beta = Param::from_tensor(tensor1(bias, options()));
                m.running_mean = RunningState::new(tensor1(running_mean, options()));
                m.running_var = RunningState::new(tensor1(running_var, options()));
                NnModule::BatchNorm(m)
            }
            ModuleSpec::RmsNorm {
                d_model,
                epsilon,
                weight,
            } => {
                let mut m = RmsNormConfig::new(*d_model)
                    .with_epsilon(*epsilon)
                    .init(device);
                m.gamma = Param::from_tensor(tensor1(weight, options()));
                NnModule::RmsNorm(m)
            }
            ModuleSpec::Conv2d {
                weight_shape,
                stride,
                padding,
                dilation,
                groups,
                weight,
                bias,
            } => {
                let w = Tensor::<4>::from_data(
                    TensorData::new(weight.clone(), *weight_shape),
                    options(),
                );
                NnModule::Conv2d(Conv2d {
                    weight: Param::from_tensor(w),
                    bias: bias
                        .as_ref()
                        .map(|b| Param::from_tensor(tensor1(b, options()))),
                    stride: *stride,
                    kernel_size: [weight_shape[2], weight_shape[3]],
                    dilation: *dilation,
                    groups: *groups,
                    // PyTorch's symmetric padding (ph, pw) is burn's (top, left, bottom, right)
                    padding: PaddingConfig2d::Explicit(
                        padding[0], padding[1], padding[0], padding[1],
                    ),
                })
            }
            ModuleSpec::Embedding { rows, dim, weight } => {
                let mut m = EmbeddingConfig::new(*rows, *dim).init(device);
                m.weight = Param::from_tensor(Tensor::<2>::from_data(
                    TensorData::new(weight.clone(), [*rows, *dim]),
                    options(),
                ));
                NnModule::Embedding(m)
            }
            ModuleSpec::GroupNorm {
                num_groups,
                num_channels,
                epsilon,
                affine,
            } => {
                let mut m = GroupNormConfig::new(*num_groups, *num_channels)
                    .with_epsilon(*epsilon)
                    .with_affine(affine.is_some())
                    .init(device);
                if let Some((w, b)) = affine {
                    m.gamma = Some(Param::from_tensor(tensor1(w, options())));
                    m.beta = Some(Param::from_tensor(tensor1(b, options())));
                }
                NnModule::GroupNorm(m)
            }
            ModuleSpec::LayerNorm {
                d_model,
                epsilon,
                weight,
                bias,
            } => {
                let mut m = LayerNormConfig::new(*d_model)
                    .with_epsilon(*epsilon)
                    .with_bias(bias.is_some())
                    .init(device);
                m.gamma = Param::from_tensor(tensor1(weight, options()));
                m.beta = bias
                    .as_ref()
                    .map(|b| Param::from_tensor(tensor1(b, options())));
                NnModule::LayerNorm(m)
            }
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
            NnModule::BatchNorm(m) => map!(x, t => m.forward(t)),
            NnModule::LayerNorm(m) => map!(x, t => m.forward(t)),
            NnModule::RmsNorm(m) => map!(x, t => m.forward(t)),
            NnModule::GroupNorm(m) => map!(x, t => m.forward(t)),
            NnModule::Conv2d(m) => match x {
                DynTensor::R4(t) => DynTensor::R4(m.forward(t)),
                other => panic!(
                    "validated: conv2d takes a rank-4 input, got rank {}",
                    other.rank()
                ),
            },
            // the indices leaf (validated: integral entries in range) converted as burn's
            // users convert token ids held as floats: `.int()`
            NnModule::Embedding(m) => match x {
                DynTensor::R2(t) => DynTensor::R3(m.forward(t.int())),
                other => panic!(
                    "validated: embedding takes a rank-2 input, got rank {}",
                    other.rank()
                ),
            },
        }
    }

    /// A parameter tensor as burn stores it (`.val()`; Linear's weight is `[d_input, d_output]`,
    /// the only transposed one: see [`NnModule::transposed`]), or a running statistic
    /// (`value_sync()`: `value()` may lag one update behind).
    pub fn param(&self, param: ParamName) -> DynTensor {
        match (self, param) {
            (NnModule::Linear(m), ParamName::Weight) => DynTensor::R2(m.weight.val()),
            (NnModule::Linear(m), ParamName::Bias) => {
                DynTensor::R1(m.bias.as_ref().map(|b| b.val()).expect("validated: a bias"))
            }
            (NnModule::BatchNorm(m), ParamName::Weight) => DynTensor::R1(m.gamma.val()),
            (NnModule::BatchNorm(m), ParamName::Bias) => DynTensor::R1(m.beta.val()),
            (NnModule::BatchNorm(m), ParamName::RunningMean) => {
                DynTensor::R1(m.running_mean.value_sync())
            }
            (NnModule::BatchNorm(m), ParamName::RunningVar) => {
                DynTensor::R1(m.running_var.value_sync())
            }
            (NnModule::LayerNorm(m), ParamName::Weight) => DynTensor::R1(m.gamma.val()),
            (NnModule::RmsNorm(m), ParamName::Weight) => DynTensor::R1(m.gamma.val()),
            (NnModule::Conv2d(m), ParamName::Weight) => DynTensor::R4(m.weight.val()),
            (NnModule::Embedding(m), ParamName::Weight) => DynTensor::R2(m.weight.val()),
            (NnModule::Conv2d(m), ParamName::Bias) => {
                DynTensor::R1(m.bias.as_ref().map(|b| b.val()).expect("validated: a bias"))
            }
            (NnModule::GroupNorm(m), ParamName::Weight) => DynTensor::R1(
                m.gamma
                    .as_ref()
                    .map(|g| g.val())
                    .expect("validated: affine"),
            ),
            (NnModule::GroupNorm(m), ParamName::Bias) => {
                DynTensor::R1(m.beta.as_ref().map(|b| b.val()).expect("validated: affine"))
            }
            (NnModule::LayerNorm(m), ParamName::Bias) => {
                DynTensor::R1(m.beta.as_ref().map(|b| b.val()).expect("validated: a bias"))
            }
            _ => panic!("validated: the module has the parameter {param:?}"),
        }
    }

    /// Whether `param` is stored transposed from PyTorch's layout (Linear's weight).
    pub fn transposed(&self, param: ParamName) -> bool {
        matches!((self, param), (NnModule::Linear(_), ParamName::Weight))
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
