//! The program document as serde reads it (docs/format.md): the top-level object, then one
//! internally tagged enum per statement (tag `"kind"`), every field typed and unknown fields
//! rejected. References are still ids here and nothing is checked beyond the field types:
//! [`crate::program::Program::from_json`] resolves and validates the statements in one pass.
//!
//! Each statement is deserialized on its own (the document's `statements` is checked to be an
//! array of JSON values first), so that a serde error can name the statement's index and id.

use serde::de::{DeserializeOwned, Error, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::dtype::ProgramDType;
use crate::floats::{kind_of, parse_f64};
use crate::modules::ModuleDoc;

/// The top-level object. `statements` is only checked to be an array here: its elements are
/// deserialized one by one from the document ([`Statement`]), so that an error names the
/// statement (and nothing is copied).
///
/// A derived struct also accepts an array of its fields in order (and an internally tagged
/// enum an array starting with the tag): [`from_object`] reads only objects.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    pub format: String,
    pub version: u64,
    /// Checked (a string when present), not used.
    #[allow(dead_code)]
    #[serde(default, deserialize_with = "present")]
    pub name: Option<String>,
    /// The float dtype of the program (docs/format.md#dtypes); float32 when absent.
    #[serde(default)]
    pub dtype: ProgramDType,
    /// The autodiff device's gradient-checkpointing strategy; disabled when absent.
    #[serde(default)]
    pub gradient_checkpointing: crate::program::Checkpointing,
    #[allow(dead_code)]
    pub statements: AnArray,
}

/// Any JSON array, not kept.
#[derive(Debug)]
pub struct AnArray;

impl<'de> Deserialize<'de> for AnArray {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AnArrayVisitor;

        impl<'de> Visitor<'de> for AnArrayVisitor {
            type Value = AnArray;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of statements")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnArray, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(AnArray)
            }
        }

        d.deserialize_seq(AnArrayVisitor)
    }
}

/// One statement as written: `id` and the fields of its `kind`.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Statement {
    Leaf(Leaf),
    Op(OpCall),
    Cut(CutStmt),
    Backward(Backward),
    /// Its fields are the module kind's ([`crate::modules`]).
    Module(ModuleDoc),
    Transform(TransformStmt),
    Apply(Apply),
    Param(Param),
    Grad(Grad),
    ZeroGrad(ZeroGrad),
    Optimizer(OptimizerStmt),
    Step(Step),
}

impl Statement {
    pub fn id(&self) -> &str {
        match self {
            Statement::Leaf(s) => &s.id,
            Statement::Op(s) => &s.id,
            Statement::Cut(s) => &s.id,
            Statement::Backward(s) => &s.id,
            Statement::Module(m) => m.id(),
            Statement::Transform(s) => &s.id,
            Statement::Apply(s) => &s.id,
            Statement::Param(s) => &s.id,
            Statement::Grad(s) => &s.id,
            Statement::ZeroGrad(s) => &s.id,
            Statement::Optimizer(s) => &s.id,
            Statement::Step(s) => &s.id,
        }
    }

    /// The kinds format version 1 does not have (and the `retain_graph` field of a v1
    /// backward): the name of the first such thing this statement uses.
    pub fn version_2_feature(&self) -> Option<&'static str> {
        match self {
            Statement::Grad(_) => Some("kind \"grad\""),
            Statement::ZeroGrad(_) => Some("kind \"zero_grad\""),
            Statement::Optimizer(_) => Some("kind \"optimizer\""),
            Statement::Step(_) => Some("kind \"step\""),
            Statement::Backward(Backward {
                retain_graph: Some(_),
                ..
            }) => Some("field \"retain_graph\" of a backward"),
            _ => None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leaf {
    pub id: String,
    pub shape: Vec<usize>,
    pub data: F32s,
    pub device: DeviceKind,
    pub require_grad: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpCall {
    pub id: String,
    pub op: String,
    pub inputs: Vec<String>,
    /// Handed to [`crate::ops::Op::parse`] as is; omitted means none.
    #[serde(default)]
    pub attrs: Map<String, Value>,
    #[serde(default)]
    pub region: Region,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CutStmt {
    pub id: String,
    pub cut: Cut,
    pub input: String,
    #[serde(default)]
    pub region: Region,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backward {
    pub id: String,
    pub input: String,
    /// Version 2; accepted and ignored (burn has no retain_graph). `None` when omitted.
    #[serde(default, deserialize_with = "present")]
    pub retain_graph: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformStmt {
    pub id: String,
    pub transform: Transform,
    pub input: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Apply {
    pub id: String,
    pub module: String,
    pub input: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    pub id: String,
    pub module: String,
    pub param: ParamName,
}

/// `grad`: the gradient of value `of` in the gradients handle `grads` (a backward).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grad {
    pub id: String,
    pub grads: String,
    pub of: String,
}

/// `zero_grad`: clears PyTorch's `.grad`; nothing to do in burn.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZeroGrad {
    pub id: String,
}

/// `optimizer`: an optimizer handle. Omitted hyper-parameters take PyTorch's defaults.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerStmt {
    pub id: String,
    pub optimizer: OptimizerKind,
    #[serde(default)]
    pub momentum: f64,
    #[serde(default)]
    pub dampening: f64,
    #[serde(default)]
    pub nesterov: bool,
    #[serde(default)]
    pub weight_decay: f64,
}

/// `step`: one step of `optimizer` on the module handle `module` with the gradients of the
/// handle `grads`, defining a new module handle.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub id: String,
    pub optimizer: String,
    pub module: String,
    pub grads: String,
    pub lr: f64,
}

// The values of the fields that name a choice, as written (snake_case). The typed program
// uses them as they are.

/// `device` of a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Plain,
    Autodiff,
}

/// `region` of an op or cut (default `grad`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Region {
    #[default]
    Grad,
    NoGrad,
    InferenceMode,
}

/// `cut` of a cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    Detach,
    WithoutAutodiff,
    Autodiff,
}

/// A module transform (`kind: "transform"`), one of burn's `Module` methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transform {
    Valid,
    Train,
    NoGrad,
    Freeze,
    Unfreeze,
}

/// A parameter or buffer of a module (`kind: "param"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamName {
    Weight,
    Bias,
    RunningMean,
    RunningVar,
}

impl ParamName {
    /// The name as programs spell it (PyTorch's).
    pub fn name(self) -> &'static str {
        match self {
            ParamName::Weight => "weight",
            ParamName::Bias => "bias",
            ParamName::RunningMean => "running_mean",
            ParamName::RunningVar => "running_var",
        }
    }
}

/// `optimizer` of an optimizer statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    Sgd,
}

/// An inline float tensor `{"shape": [...], "data": [...]}` (module weights and biases).
/// The module kinds' fields read it with [`object`] or [`nullable_object`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: F32s,
}

/// Float tensor data: a flat list of numbers and `"NaN"`, `"Infinity"`, `"-Infinity"`, read
/// exactly as f64 ([`parse_f64`]; the program's dtype narrows or checks them when the program
/// is resolved: [`ProgramDType::fit`]); an element's error names its position (`data[3]: ...`).
#[derive(Debug)]
pub struct F32s(pub Vec<f64>);

impl<'de> Deserialize<'de> for F32s {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct F32sVisitor;

        impl<'de> Visitor<'de> for F32sVisitor {
            type Value = F32s;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of floats")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<F32s, A::Error> {
                let mut data = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(v) = seq.next_element::<Value>()? {
                    let x = parse_f64(&v)
                        .map_err(|e| A::Error::custom(format!("data[{}]: {e}", data.len())))?;
                    data.push(x);
                }
                Ok(F32s(data))
            }
        }

        d.deserialize_seq(F32sVisitor)
    }
}

/// Deserializes `T` from `value` when it is an object; `what` names the value otherwise.
pub fn from_object<T: DeserializeOwned>(value: &Value, what: &str) -> Result<T, String> {
    if !value.is_object() {
        return Err(format!("{what} must be an object, got {}", kind_of(value)));
    }
    T::deserialize(value).map_err(|e| e.to_string())
}

/// A struct field read only from an object (see [`Document`]).
pub(crate) fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    let map = Map::<String, Value>::deserialize(d)?;
    T::deserialize(Value::Object(map)).map_err(D::Error::custom)
}

/// A struct field read only from an object, that must be present but may be `null` (serde
/// would default a missing `Option`).
pub(crate) fn nullable_object<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    match Option::<Map<String, Value>>::deserialize(d)? {
        None => Ok(None),
        Some(map) => T::deserialize(Value::Object(map))
            .map(Some)
            .map_err(D::Error::custom),
    }
}

/// A field that may be omitted but not `null` (with `#[serde(default)]`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}
