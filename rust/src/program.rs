//! Programs: the JSON document parsed into typed, validated statements.
//!
//! serde reads the document and each statement ([`crate::document`]: fields, their types,
//! the accepted values of `kind`, `device`, `cut`, `region`, `transform`, `param` and
//! `module`, no unknown fields). One resolution pass ([`Program::from_json`]) then checks the
//! rest of the document's structure (docs/format.md): format and version, unique ids matching
//! `^[A-Za-z_][A-Za-z0-9_]*$`, inputs that name earlier value statements, leaf data whose
//! length matches the shape, ranks 1 to 4 with dims >= 1, op attributes and arities, module
//! weights and biases. Shape rules of ops are *not* checked here: burn checks them at run
//! time.
//!
//! [`Program::check_bounds`] is the element budget a `run` checks before executing anything
//! (docs/format.md, "Bounds"): every tensor's shape is inferred from the statements (as burn
//! would compute it), and no tensor may exceed [`MAX_TENSOR_ELEMENTS`] elements, nor all of a
//! program's tensors together [`MAX_PROGRAM_ELEMENTS`].

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

use crate::document::{self, Document};
pub use crate::document::{Cut, DeviceKind, ParamName, Region, Transform};
pub use crate::dtype::ProgramDType;
use crate::ops::{self, NARY, Op, check_shape};

pub const FORMAT: &str = "difftest-program";
/// The newest format version; version 1 (no sessions) still loads.
pub const VERSION: u64 = 2;

/// The most elements one tensor of a program may have (values, leaves, inline tensors).
pub const MAX_TENSOR_ELEMENTS: u64 = 1_000_000;
/// The most elements a program's tensors may have together (every value statement's result,
/// module weights and biases, inline attribute tensors).
pub const MAX_PROGRAM_ELEMENTS: u64 = 4_000_000;

/// How a module is built (`kind: "module"`).
#[derive(Clone, Debug)]
pub enum ModuleSpec {
    /// `weight` is row-major in PyTorch's layout `[d_output, d_input]`; `bias` has `d_output`
    /// elements.
    Linear {
        d_input: usize,
        d_output: usize,
        weight: Vec<f64>,
        bias: Option<Vec<f64>>,
    },
    Dropout {
        p: f64,
    },
    /// BatchNorm over channel dim 1: every tensor has `num_features` elements.
    BatchNorm {
        num_features: usize,
        epsilon: f64,
        momentum: f64,
        weight: Vec<f64>,
        bias: Vec<f64>,
        running_mean: Vec<f64>,
        running_var: Vec<f64>,
    },
    /// RmsNorm over the last dim (`d_model` weight elements).
    RmsNorm {
        d_model: usize,
        epsilon: f64,
        weight: Vec<f64>,
    },
    /// GroupNorm over channel dim 1 (`num_channels` elements per tensor; `affine` = `Some`).
    GroupNorm {
        num_groups: usize,
        num_channels: usize,
        epsilon: f64,
        affine: Option<(Vec<f64>, Vec<f64>)>,
    },
    /// Conv2d: `weight` row-major `[C_out, C_in / groups, kh, kw]` (`weight_shape`), `bias`
    /// `C_out` elements; padding symmetric per spatial dim.
    Conv2d {
        weight_shape: [usize; 4],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
        weight: Vec<f64>,
        bias: Option<Vec<f64>>,
    },
    /// Embedding: `weight` row-major `[rows, dim]`; its forward takes indices in `[0, rows)`.
    Embedding {
        rows: usize,
        dim: usize,
        weight: Vec<f64>,
    },
    /// LayerNorm over the last dim (`d_model` elements per tensor).
    LayerNorm {
        d_model: usize,
        epsilon: f64,
        weight: Vec<f64>,
        bias: Option<Vec<f64>>,
    },
}

impl ModuleSpec {
    /// The kind's name in the format.
    pub fn name(&self) -> &'static str {
        match self {
            ModuleSpec::Linear { .. } => "linear",
            ModuleSpec::Dropout { .. } => "dropout",
            ModuleSpec::BatchNorm { .. } => "batch_norm",
            ModuleSpec::LayerNorm { .. } => "layer_norm",
            ModuleSpec::RmsNorm { .. } => "rms_norm",
            ModuleSpec::GroupNorm { .. } => "group_norm",
            ModuleSpec::Conv2d { .. } => "conv2d",
            ModuleSpec::Embedding { .. } => "embedding",
        }
    }

    /// The shape of a parameter or buffer in PyTorch's layout; `None` when the module has none
    /// of that name.
    pub fn param_shape(&self, param: ParamName) -> Option<Vec<usize>> {
        match (self, param) {
            (
                ModuleSpec::Linear {
                    d_input, d_output, ..
                },
                ParamName::Weight,
            ) => Some(vec![*d_output, *d_input]),
            (
                ModuleSpec::Linear {
                    d_output,
                    bias: Some(_),
                    ..
                },
                ParamName::Bias,
            ) => Some(vec![*d_output]),
            (ModuleSpec::BatchNorm { num_features, .. }, _) => Some(vec![*num_features]),
            (ModuleSpec::LayerNorm { d_model, .. }, ParamName::Weight) => Some(vec![*d_model]),
            (ModuleSpec::RmsNorm { d_model, .. }, ParamName::Weight) => Some(vec![*d_model]),
            (ModuleSpec::Embedding { rows, dim, .. }, ParamName::Weight) => Some(vec![*rows, *dim]),
            (ModuleSpec::Conv2d { weight_shape, .. }, ParamName::Weight) => {
                Some(weight_shape.to_vec())
            }
            (
                ModuleSpec::Conv2d {
                    weight_shape,
                    bias: Some(_),
                    ..
                },
                ParamName::Bias,
            ) => Some(vec![weight_shape[0]]),
            (
                ModuleSpec::GroupNorm {
                    num_channels,
                    affine: Some(_),
                    ..
                },
                ParamName::Weight | ParamName::Bias,
            ) => Some(vec![*num_channels]),
            (
                ModuleSpec::LayerNorm {
                    d_model,
                    bias: Some(_),
                    ..
                },
                ParamName::Bias,
            ) => Some(vec![*d_model]),
            _ => None,
        }
    }

    /// (name, elements) of the tensors the module holds.
    pub fn tensors(&self) -> Vec<(String, u64)> {
        [
            ParamName::Weight,
            ParamName::Bias,
            ParamName::RunningMean,
            ParamName::RunningVar,
        ]
        .into_iter()
        .filter_map(|p| {
            self.param_shape(p)
                .map(|s| (format!("{p:?}").to_lowercase(), ops::numel(&s)))
        })
        .collect()
    }

    /// The forward's output shape for an input shape; `None` when the input does not fit.
    pub fn apply_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        match self {
            ModuleSpec::Linear {
                d_input, d_output, ..
            } => (x.last() == Some(d_input)).then(|| {
                let mut s = x.to_vec();
                s.pop();
                s.push(*d_output);
                s
            }),
            ModuleSpec::Dropout { .. } => Some(x.to_vec()),
            ModuleSpec::Embedding { dim, .. } => (x.len() == 2).then(|| vec![x[0], x[1], *dim]),
            ModuleSpec::BatchNorm { num_features, .. } => {
                ((2..=4).contains(&x.len()) && x[1] == *num_features).then(|| x.to_vec())
            }
            ModuleSpec::Conv2d {
                weight_shape,
                stride,
                padding,
                dilation,
                groups,
                bias,
                ..
            } => {
                let mut inputs = vec![x.to_vec(), weight_shape.to_vec()];
                if bias.is_some() {
                    inputs.push(vec![weight_shape[0]]);
                }
                let conv = crate::ops_nn::Conv {
                    stride,
                    padding,
                    dilation,
                    groups: *groups,
                };
                if x.len() != 4 {
                    return None;
                }
                crate::ops_nn::conv_shape(&inputs, &conv, None)
            }
            // burn's group_norm panics when the input has at most 2 elements
            ModuleSpec::GroupNorm { num_channels, .. } => {
                ((2..=4).contains(&x.len()) && x[1] == *num_channels && ops::numel(x) > 2)
                    .then(|| x.to_vec())
            }
            ModuleSpec::LayerNorm { d_model, .. } | ModuleSpec::RmsNorm { d_model, .. } => {
                (x.last() == Some(d_model)).then(|| x.to_vec())
            }
        }
    }
}

/// The input of an index-taking module's forward (embedding): a leaf that does not require grad,
/// of integral entries in `[0, rows)` (burn's `.int()` truncates; the leaf is data, as token ids are).
fn check_indices(statements: &[Statement], module: usize, input: usize) -> Result<(), String> {
    let ModuleSpec::Embedding { rows, .. } = module_spec(statements, module) else {
        return Ok(());
    };
    let Kind::Leaf {
        data, require_grad, ..
    } = &statements[input].kind
    else {
        return Err(
            "embedding takes indices: its input must be a leaf (of integral entries), not a computed value"
                .to_string(),
        );
    };
    if *require_grad {
        return Err("embedding takes indices: its input leaf must not require grad".to_string());
    }
    match data
        .iter()
        .position(|v| !(v.fract() == 0.0 && *v >= 0.0 && *v < *rows as f64))
    {
        Some(k) => Err(format!(
            "embedding takes indices in [0, {rows}): element {k} of its input is {}",
            data[k]
        )),
        None => Ok(()),
    }
}

/// A statement; inputs are indices of earlier statements.
#[derive(Clone, Debug)]
pub enum Kind {
    Leaf {
        shape: Vec<usize>,
        data: Vec<f64>,
        device: DeviceKind,
        require_grad: bool,
    },
    Op {
        op: Op,
        inputs: Vec<usize>,
        region: Region,
    },
    Cut {
        cut: Cut,
        input: usize,
        region: Region,
    },
    /// Defines a gradients handle (`retain_graph` is accepted and ignored: burn has none).
    Backward { input: usize },
    /// A module handle (not a value).
    Module { spec: ModuleSpec },
    /// A transformed module handle (not a value); `input` is a module or transform statement.
    Transform { transform: Transform, input: usize },
    /// The forward of `module` (a module or transform statement) on the value `input`.
    Apply { module: usize, input: usize },
    /// A parameter of the linear module `module`, reported in PyTorch's layout.
    Param { module: usize, param: ParamName },
    /// The gradient of the value `of` in the gradients handle `grads` (a backward), in
    /// PyTorch's layout when `of` is a parameter.
    Grad { grads: usize, of: usize },
    /// Nothing to do in burn (each backward returns fresh gradients).
    ZeroGrad,
    /// An optimizer handle (not a value).
    Optimizer { spec: SgdSpec },
    /// A module handle: `module` after one step of `optimizer` with the gradients of `grads`.
    Step {
        optimizer: usize,
        module: usize,
        grads: usize,
        lr: f64,
    },
}

/// An SGD optimizer's hyper-parameters (PyTorch's names and defaults), validated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdSpec {
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
}

#[derive(Clone, Debug)]
pub struct Statement {
    pub id: String,
    pub kind: Kind,
}

impl Statement {
    /// Whether the statement defines a value (leaf, op, cut, apply, param, grad).
    pub fn is_value(&self) -> bool {
        matches!(
            self.kind,
            Kind::Leaf { .. }
                | Kind::Op { .. }
                | Kind::Cut { .. }
                | Kind::Apply { .. }
                | Kind::Param { .. }
                | Kind::Grad { .. }
        )
    }

    /// Whether the statement defines a module handle (`module`, `transform` or `step`).
    pub fn is_module(&self) -> bool {
        matches!(
            self.kind,
            Kind::Module { .. } | Kind::Transform { .. } | Kind::Step { .. }
        )
    }

    /// Whether the statement defines a gradients handle (`backward`).
    pub fn is_grads(&self) -> bool {
        matches!(self.kind, Kind::Backward { .. })
    }

    /// Whether the statement defines an optimizer handle.
    pub fn is_optimizer(&self) -> bool {
        matches!(self.kind, Kind::Optimizer { .. })
    }

    /// The statement's kind as written in the document.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Leaf { .. } => "leaf",
            Kind::Op { .. } => "op",
            Kind::Cut { .. } => "cut",
            Kind::Backward { .. } => "backward",
            Kind::Module { .. } => "module",
            Kind::Transform { .. } => "transform",
            Kind::Apply { .. } => "apply",
            Kind::Param { .. } => "param",
            Kind::Grad { .. } => "grad",
            Kind::ZeroGrad => "zero_grad",
            Kind::Optimizer { .. } => "optimizer",
            Kind::Step { .. } => "step",
        }
    }
}

/// The `module` statement that the module handle at `index` (a module, transform or step) was
/// derived from, through transforms and steps.
pub fn module_root(statements: &[Statement], mut index: usize) -> usize {
    loop {
        match &statements[index].kind {
            Kind::Module { .. } => return index,
            Kind::Transform { input, .. } => index = *input,
            Kind::Step { module, .. } => index = *module,
            _ => panic!("statement {index} is not a module"),
        }
    }
}

/// The spec of the module that statement `index` (a module, transform or step) was derived
/// from.
pub fn module_spec(statements: &[Statement], index: usize) -> &ModuleSpec {
    match &statements[module_root(statements, index)].kind {
        Kind::Module { spec } => spec,
        _ => unreachable!("module_root returns a module statement"),
    }
}

#[derive(Clone, Debug)]
pub struct Program {
    pub statements: Vec<Statement>,
    /// Every leaf, module parameter and float value is created in it.
    pub dtype: ProgramDType,
}

/// Why a document is not a valid program; `index`/`statement` locate the offending statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramError {
    pub index: Option<usize>,
    pub statement: Option<String>,
    pub message: String,
}

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.index, &self.statement) {
            (Some(i), Some(id)) => write!(f, "statement {i} (id {id:?}): {}", self.message),
            (Some(i), None) => write!(f, "statement {i}: {}", self.message),
            _ => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for ProgramError {}

fn doc_error(message: impl Into<String>) -> ProgramError {
    ProgramError {
        index: None,
        statement: None,
        message: message.into(),
    }
}

/// Whether `id` matches `^[A-Za-z_][A-Za-z0-9_]*$`.
pub fn valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Program {
    /// Parses a program document: the document and then each statement with serde
    /// ([`document`]), then one pass that validates the statements in order and resolves their
    /// references. An error names the statement at fault (index, and id when it has one).
    pub fn from_json(doc: &Value) -> Result<Program, ProgramError> {
        let header: Document = document::from_object(doc, "a program").map_err(doc_error)?;
        if header.format != FORMAT {
            return Err(doc_error(format!(
                "\"format\" must be {FORMAT:?}, got {:?}",
                header.format
            )));
        }
        if !(1..=VERSION).contains(&header.version) {
            return Err(doc_error(format!(
                "unsupported \"version\" {} (expected 1 or {VERSION})",
                header.version
            )));
        }
        let items = doc["statements"].as_array().expect("checked by Document");
        let parsed = items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                document::from_object::<document::Statement>(item, "a statement").map_err(
                    |message| ProgramError {
                        index: Some(index),
                        statement: item.get("id").and_then(Value::as_str).map(str::to_owned),
                        message,
                    },
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        if header.version == 1
            && let Some((index, feature)) = parsed
                .iter()
                .enumerate()
                .find_map(|(i, s)| s.version_2_feature().map(|f| (i, f)))
        {
            return Err(ProgramError {
                index: Some(index),
                statement: Some(parsed[index].id().to_owned()),
                message: format!("{feature} needs \"version\" 2 (the document has version 1)"),
            });
        }
        let mut resolver = Resolver {
            statements: Vec::with_capacity(parsed.len()),
            ids: HashMap::new(),
            dtype: header.dtype,
        };
        for (index, raw) in parsed.into_iter().enumerate() {
            let id = raw.id().to_owned();
            let stmt = resolver.statement(raw).map_err(|message| ProgramError {
                index: Some(index),
                statement: Some(id.clone()),
                message,
            })?;
            resolver.ids.insert(id, index);
            resolver.statements.push(stmt);
        }
        Ok(Program {
            statements: resolver.statements,
            dtype: header.dtype,
        })
    }
}

impl Program {
    /// Checks the element budget before anything runs; the error names the first statement
    /// whose tensor exceeds [`MAX_TENSOR_ELEMENTS`], or at which the running total exceeds
    /// [`MAX_PROGRAM_ELEMENTS`]. Shapes are inferred as burn computes them
    /// ([`Op::infer_shape`]); a statement burn would reject (it panics when run, and nothing
    /// after it runs) has no shape, and neither have the statements that depend on it.
    pub fn check_bounds(&self) -> Result<(), ProgramError> {
        let mut shapes: Vec<Option<Vec<usize>>> = Vec::with_capacity(self.statements.len());
        let mut total: u64 = 0;
        for (index, stmt) in self.statements.iter().enumerate() {
            let err = |message: String| ProgramError {
                index: Some(index),
                statement: Some(stmt.id.clone()),
                message,
            };
            let shape_of = |i: usize| shapes[i].clone();
            // (what, elements) of every tensor the statement holds.
            let mut tensors: Vec<(String, u64)> = Vec::new();
            let shape = match &stmt.kind {
                Kind::Leaf { shape, .. } => Some(shape.clone()),
                Kind::Op { op, inputs, .. } => {
                    for (name, shape) in op.tensor_attrs() {
                        tensors.push((format!("attribute {name:?}"), ops::numel(shape)));
                    }
                    let ins: Option<Vec<Vec<usize>>> =
                        inputs.iter().map(|&i| shape_of(i)).collect();
                    ins.and_then(|ins| op.infer_shape(&ins))
                }
                Kind::Cut { input, .. } => shape_of(*input),
                Kind::Module { spec } => {
                    tensors.extend(spec.tensors());
                    None
                }
                Kind::Transform { .. }
                | Kind::Backward { .. }
                | Kind::ZeroGrad
                | Kind::Optimizer { .. } => None,
                Kind::Grad { of, .. } => shape_of(*of),
                Kind::Step { module, .. } => {
                    // The stepped module's new parameters.
                    tensors.extend(module_spec(&self.statements, *module).tensors());
                    None
                }
                Kind::Apply { module, input } => shape_of(*input)
                    .and_then(|x| module_spec(&self.statements, *module).apply_shape(&x)),
                Kind::Param { module, param } => {
                    module_spec(&self.statements, *module).param_shape(*param)
                }
            };
            if let Some(s) = &shape {
                let what = match &stmt.kind {
                    Kind::Op { op, .. } => op.name(),
                    _ => stmt.kind_name(),
                };
                tensors.push((what.to_string(), ops::numel(s)));
            }
            for (what, n) in tensors {
                if n > MAX_TENSOR_ELEMENTS {
                    return Err(err(format!(
                        "{what} would make {n} elements; the limit is {MAX_TENSOR_ELEMENTS} per tensor"
                    )));
                }
                total = total.saturating_add(n);
            }
            if total > MAX_PROGRAM_ELEMENTS {
                return Err(err(format!(
                    "the program's tensors would total {total} elements here; the limit is \
                     {MAX_PROGRAM_ELEMENTS} per program"
                )));
            }
            shapes.push(shape);
        }
        Ok(())
    }
}

/// What a reference must point at: its name in messages, the statement kinds it accepts, and
/// how those kinds are described.
struct RefKind {
    what: &'static str,
    accepts: fn(&Statement) -> bool,
    expected: &'static str,
}

const INPUT: RefKind = RefKind {
    what: "input",
    accepts: Statement::is_value,
    expected: "a value",
};

const MODULE: RefKind = RefKind {
    what: "module",
    accepts: Statement::is_module,
    expected: "a module, transform or step",
};

const GRADS: RefKind = RefKind {
    what: "grads",
    accepts: Statement::is_grads,
    expected: "a backward",
};

const OPTIMIZER: RefKind = RefKind {
    what: "optimizer",
    accepts: Statement::is_optimizer,
    expected: "an optimizer",
};

/// The statements resolved so far, which references may name.
struct Resolver {
    statements: Vec<Statement>,
    ids: HashMap<String, usize>,
    dtype: ProgramDType,
}

impl Resolver {
    /// Resolves a reference to the index of an earlier statement of the kind `kind` accepts.
    fn reference(&self, kind: &RefKind, name: &str) -> Result<usize, String> {
        let what = kind.what;
        let index = *self
            .ids
            .get(name)
            .ok_or_else(|| format!("{what} {name:?} is not the id of an earlier statement"))?;
        let stmt = &self.statements[index];
        if !(kind.accepts)(stmt) {
            return Err(format!(
                "{what} {name:?} is a {} statement, not {}",
                stmt.kind_name(),
                kind.expected
            ));
        }
        Ok(index)
    }

    /// Resolves an input id to the index of an earlier value statement.
    fn input(&self, name: &str) -> Result<usize, String> {
        self.reference(&INPUT, name)
    }

    /// Resolves a module reference to the index of an earlier module or transform statement.
    fn module(&self, name: &str) -> Result<usize, String> {
        self.reference(&MODULE, name)
    }

    /// Validates one parsed statement against the earlier ones and resolves its references.
    fn statement(&self, raw: document::Statement) -> Result<Statement, String> {
        let id = raw.id();
        if !valid_id(id) {
            return Err(format!("id {id:?} does not match ^[A-Za-z_][A-Za-z0-9_]*$"));
        }
        if let Some(&first) = self.ids.get(id) {
            return Err(format!(
                "duplicate id {id:?} (first used by statement {first})"
            ));
        }
        let id = id.to_owned();
        let kind = match raw {
            document::Statement::Leaf(s) => {
                check_shape(&s.shape)?;
                check_data(&s.data.0, &s.shape)?;
                let mut data = s.data.0;
                self.dtype.fit_all(&mut data)?;
                Kind::Leaf {
                    shape: s.shape,
                    data,
                    device: s.device,
                    require_grad: s.require_grad,
                }
            }
            document::Statement::Op(s) => {
                let name = s.op.as_str();
                let op = Op::parse(name, &s.attrs).map_err(|e| {
                    if e.starts_with("unknown op") {
                        e
                    } else {
                        format!("op {name:?}: {e}")
                    }
                })?;
                let inputs = s
                    .inputs
                    .iter()
                    .map(|i| self.input(i))
                    .collect::<Result<Vec<usize>, String>>()?;
                let arity = op.arity();
                let ok = if arity == NARY {
                    !inputs.is_empty()
                } else {
                    inputs.len() == arity as usize
                };
                if !ok {
                    let want = if arity == NARY {
                        "at least 1".to_string()
                    } else {
                        arity.to_string()
                    };
                    return Err(format!(
                        "op {name:?} takes {want} input(s), got {}",
                        inputs.len()
                    ));
                }
                Kind::Op {
                    op,
                    inputs,
                    region: s.region,
                }
            }
            document::Statement::Cut(s) => Kind::Cut {
                cut: s.cut,
                input: self.input(&s.input)?,
                region: s.region,
            },
            document::Statement::Backward(s) => Kind::Backward {
                input: self.input(&s.input)?,
            },
            document::Statement::Grad(s) => Kind::Grad {
                grads: self.reference(&GRADS, &s.grads)?,
                of: self.input(&s.of)?,
            },
            document::Statement::ZeroGrad(_) => Kind::ZeroGrad,
            document::Statement::Optimizer(s) => Kind::Optimizer {
                spec: sgd_spec(&s)?,
            },
            document::Statement::Step(s) => self.step(&s)?,
            document::Statement::Module(document::Module::Linear(s)) => {
                let (shape, mut weight) = inline_tensor(s.weight, "weight", 2)?;
                self.dtype
                    .fit_all(&mut weight)
                    .map_err(|e| format!("weight: {e}"))?;
                let (d_output, d_input) = (shape[0], shape[1]);
                let bias = match s.bias {
                    None => None,
                    Some(b) => {
                        let (bshape, mut bias) = inline_tensor(b, "bias", 1)?;
                        self.dtype
                            .fit_all(&mut bias)
                            .map_err(|e| format!("bias: {e}"))?;
                        if bshape != [d_output] {
                            return Err(format!(
                                "bias has shape {bshape:?} but the weight [out, in] = {shape:?} needs [{d_output}]"
                            ));
                        }
                        Some(bias)
                    }
                };
                Kind::Module {
                    spec: ModuleSpec::Linear {
                        d_input,
                        d_output,
                        weight,
                        bias,
                    },
                }
            }
            document::Statement::Module(document::Module::Dropout(s)) => {
                if !(0.0..=1.0).contains(&s.p) {
                    return Err(format!("\"p\" must be in [0, 1], got {}", s.p));
                }
                Kind::Module {
                    spec: ModuleSpec::Dropout { p: s.p },
                }
            }
            document::Statement::Module(document::Module::BatchNorm(s)) => Kind::Module {
                spec: crate::nn::batch_norm_spec(s, self.dtype)?,
            },
            document::Statement::Module(document::Module::LayerNorm(s)) => Kind::Module {
                spec: crate::nn::layer_norm_spec(s, self.dtype)?,
            },
            document::Statement::Module(document::Module::RmsNorm(s)) => Kind::Module {
                spec: crate::nn::rms_norm_spec(s, self.dtype)?,
            },
            document::Statement::Module(document::Module::GroupNorm(s)) => Kind::Module {
                spec: crate::nn::group_norm_spec(s, self.dtype)?,
            },
            document::Statement::Module(document::Module::Conv2d(s)) => Kind::Module {
                spec: crate::nn::conv2d_spec(s, self.dtype)?,
            },
            document::Statement::Module(document::Module::Embedding(s)) => Kind::Module {
                spec: crate::nn::embedding_spec(s, self.dtype)?,
            },
            document::Statement::Transform(s) => Kind::Transform {
                transform: s.transform,
                input: self.module(&s.input)?,
            },
            document::Statement::Apply(s) => {
                let (module, input) = (self.module(&s.module)?, self.input(&s.input)?);
                check_indices(&self.statements, module, input)
                    .map_err(|e| format!("input {:?}: {e}", s.input))?;
                Kind::Apply { module, input }
            }
            document::Statement::Param(s) => {
                let module = self.module(&s.module)?;
                let spec = module_spec(&self.statements, module);
                if spec.param_shape(s.param).is_none() {
                    return Err(format!(
                        "param: the {} module has no {:?}",
                        spec.name(),
                        s.param.name()
                    ));
                }
                Kind::Param {
                    module,
                    param: s.param,
                }
            }
        };
        Ok(Statement { id, kind })
    }
}

impl Resolver {
    /// Resolves and validates a `step`: its references, `lr`, and that every step of its
    /// optimizer acts on a module derived from the same `module` statement.
    fn step(&self, s: &document::Step) -> Result<Kind, String> {
        let optimizer = self.reference(&OPTIMIZER, &s.optimizer)?;
        let module = self.module(&s.module)?;
        let grads = self.reference(&GRADS, &s.grads)?;
        if !(s.lr.is_finite() && s.lr > 0.0) {
            return Err(format!("\"lr\" must be finite and > 0, got {}", s.lr));
        }
        if let ModuleSpec::BatchNorm { .. } = module_spec(&self.statements, module) {
            return Err(
                "step: a batch_norm module is not stepped (its running state is not modelled \
                 across optimizer steps)"
                    .to_string(),
            );
        }
        let root = module_root(&self.statements, module);
        let earlier = self.statements.iter().find_map(|st| match st.kind {
            Kind::Step {
                optimizer: o,
                module: m,
                ..
            } if o == optimizer => Some((st, module_root(&self.statements, m))),
            _ => None,
        });
        if let Some((first, first_root)) = earlier
            && first_root != root
        {
            let name = |i: usize| &self.statements[i].id;
            return Err(format!(
                "optimizer {:?} steps module {:?} (derived from {:?}), but its earlier step {:?} \
                 stepped a module derived from {:?}: one optimizer steps one module",
                s.optimizer,
                s.module,
                name(root),
                first.id,
                name(first_root)
            ));
        }
        Ok(Kind::Step {
            optimizer,
            module,
            grads,
            lr: s.lr,
        })
    }
}

/// Validates an optimizer statement's hyper-parameters (as PyTorch's SGD does).
fn sgd_spec(s: &document::OptimizerStmt) -> Result<SgdSpec, String> {
    match s.optimizer {
        document::OptimizerKind::Sgd => {}
    }
    for (name, v) in [
        ("momentum", s.momentum),
        ("dampening", s.dampening),
        ("weight_decay", s.weight_decay),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("\"{name}\" must be finite and >= 0, got {v}"));
        }
    }
    if s.nesterov && (s.momentum <= 0.0 || s.dampening != 0.0) {
        return Err(format!(
            "nesterov needs \"momentum\" > 0 and \"dampening\" 0, got momentum {} and \
             dampening {}",
            s.momentum, s.dampening
        ));
    }
    Ok(SgdSpec {
        momentum: s.momentum,
        dampening: s.dampening,
        nesterov: s.nesterov,
        weight_decay: s.weight_decay,
    })
}

/// Checks float tensor data's length against `shape`.
fn check_data(data: &[f64], shape: &[usize]) -> Result<(), String> {
    let n: usize = shape.iter().product();
    if data.len() != n {
        return Err(format!(
            "data has {} elements but shape {shape:?} needs {n}",
            data.len()
        ));
    }
    Ok(())
}

/// Checks an inline float tensor (`what`: its field) of the given rank.
pub fn inline_tensor(
    t: document::Tensor,
    what: &str,
    rank: usize,
) -> Result<(Vec<usize>, Vec<f64>), String> {
    check_shape(&t.shape).map_err(|e| format!("{what}: {e}"))?;
    if t.shape.len() != rank {
        return Err(format!(
            "{what} must have rank {rank}, got shape {:?}",
            t.shape
        ));
    }
    check_data(&t.data.0, &t.shape).map_err(|e| format!("{what}: {e}"))?;
    Ok((t.shape, t.data.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(statements: Value) -> Result<Program, ProgramError> {
        Program::from_json(&json!({"format": FORMAT, "version": 1, "statements": statements}))
    }

    #[test]
    fn ids() {
        assert!(valid_id("_a1"));
        assert!(valid_id("v3"));
        assert!(!valid_id("3v"));
        assert!(!valid_id(""));
        assert!(!valid_id("a-b"));
    }

    #[test]
    fn errors_name_the_statement() {
        let e = parse(json!([
            {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "plain", "require_grad": false},
            {"id": "v1", "kind": "op", "op": "foo", "inputs": ["x"]}
        ]))
        .unwrap_err();
        assert_eq!(e.to_string(), "statement 1 (id \"v1\"): unknown op \"foo\"");
        let e = parse(json!([
            {"id": "x", "kind": "leaf", "shape": [3], "data": [1.0, 2.0], "device": "plain", "require_grad": false}
        ]))
        .unwrap_err();
        assert_eq!(e.index, Some(0));
        let e = parse(json!([
            {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "plain", "require_grad": false},
            {"id": "y", "kind": "op", "op": "add", "inputs": ["x", "z"]}
        ]))
        .unwrap_err();
        assert!(e.message.contains("\"z\""), "{e}");
        let e = parse(json!([
            {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "plain", "require_grad": false},
            {"id": "y", "kind": "op", "op": "sum_dim", "inputs": ["x"], "attrs": {"dim": -1}}
        ]))
        .unwrap_err();
        assert!(e.message.contains("dim"), "{e}");
    }

    #[test]
    fn module_statements() {
        let x = json!({"id": "x", "kind": "leaf", "shape": [1, 2], "data": [1.0, 2.0], "device": "autodiff", "require_grad": false});
        let fc = json!({"id": "fc", "kind": "module", "module": "linear",
            "weight": {"shape": [3, 2], "data": [1, 2, 3, 4, 5, 6]}, "bias": null});
        let dr = json!({"id": "dr", "kind": "module", "module": "dropout", "p": 0.5});
        let p = parse(json!([
            x, fc, dr,
            {"id": "fv", "kind": "transform", "transform": "valid", "input": "fc"},
            {"id": "y", "kind": "apply", "module": "fv", "input": "x"},
            {"id": "z", "kind": "apply", "module": "dr", "input": "y"},
            {"id": "w", "kind": "param", "module": "fv", "param": "weight"},
            {"id": "s", "kind": "op", "op": "sum", "inputs": ["w"]}
        ]))
        .unwrap();
        assert!(!p.statements[1].is_value() && p.statements[3].is_module());
        assert!(p.statements[4].is_value() && p.statements[6].is_value());
        match module_spec(&p.statements, 3) {
            ModuleSpec::Linear {
                d_input: 2,
                d_output: 3,
                bias: None,
                ..
            } => {}
            other => panic!("{other:?}"),
        }

        let bad = |stmt: Value, needle: &str| {
            let e = parse(json!([x, fc, dr, stmt])).unwrap_err();
            assert_eq!(
                (e.index, e.statement.as_deref()),
                (Some(3), Some("bad")),
                "{e}"
            );
            assert!(e.message.contains(needle), "{e}");
        };
        bad(
            json!({"id": "bad", "kind": "apply", "module": "x", "input": "x"}),
            "is a leaf statement, not a module",
        );
        bad(
            json!({"id": "bad", "kind": "apply", "module": "fc", "input": "fc"}),
            "is a module statement, not a value",
        );
        bad(
            json!({"id": "bad", "kind": "apply", "module": "nope", "input": "x"}),
            "\"nope\"",
        );
        bad(
            json!({"id": "bad", "kind": "op", "op": "exp", "inputs": ["dr"]}),
            "not a value",
        );
        bad(
            json!({"id": "bad", "kind": "transform", "transform": "eval", "input": "fc"}),
            "unknown variant `eval`, expected one of `valid`, `train`",
        );
        bad(
            json!({"id": "bad", "kind": "param", "module": "fc", "param": "bias"}),
            "no \"bias\"",
        );
        bad(
            json!({"id": "bad", "kind": "param", "module": "dr", "param": "weight"}),
            "the dropout module has no \"weight\"",
        );
        bad(
            json!({"id": "bad", "kind": "module", "module": "dropout", "p": 1.5}),
            "[0, 1]",
        );
        bad(
            json!({"id": "bad", "kind": "module", "module": "conv", "p": 1.5}),
            "unknown variant `conv`, expected one of `linear`, `dropout`",
        );
        bad(
            json!({"id": "bad", "kind": "module", "module": "linear",
            "weight": {"shape": [2], "data": [1, 2]}, "bias": null}),
            "rank 2",
        );
        bad(
            json!({"id": "bad", "kind": "module", "module": "linear",
            "weight": {"shape": [1, 2], "data": [1, 2]}, "bias": {"shape": [2], "data": [1, 2]}}),
            "needs [1]",
        );
        bad(
            json!({"id": "bad", "kind": "module", "module": "linear",
            "weight": {"shape": [1, 2], "data": [1]}, "bias": null}),
            "needs 2",
        );
        bad(
            json!({"id": "bad", "kind": "module", "module": "linear",
            "weight": {"shape": [1, 2], "data": [1, 2]}}),
            "missing field `bias`",
        );
    }

    /// A malformed statement (serde's part) is an error naming the statement's index, and its
    /// id when the statement has a string `id`.
    #[test]
    fn malformed_statements_name_the_statement() {
        let x = json!({"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0],
                       "device": "plain", "require_grad": false});
        let bad = |stmt: Value, id: Option<&str>, message: &str| {
            let e = parse(json!([x, stmt])).unwrap_err();
            assert_eq!((e.index, e.statement.as_deref()), (Some(1), id), "{e}");
            assert_eq!(e.message, message, "{e}");
            let shown = match id {
                Some(id) => format!("statement 1 (id {id:?}): {message}"),
                None => format!("statement 1: {message}"),
            };
            assert_eq!(e.to_string(), shown);
        };
        // Unknown fields, per kind.
        bad(
            json!({"id": "y", "kind": "op", "op": "exp", "inputs": ["x"], "atrs": {}}),
            Some("y"),
            "unknown field `atrs`, expected one of `id`, `op`, `inputs`, `attrs`, `region`",
        );
        bad(
            json!({"id": "y", "kind": "backward", "input": "x", "region": "grad"}),
            Some("y"),
            "unknown field `region`, expected one of `id`, `input`, `retain_graph`",
        );
        bad(
            json!({"id": "fc", "kind": "module", "module": "dropout", "p": 0.5, "bias": null}),
            Some("fc"),
            "unknown field `bias`, expected `id` or `p`",
        );
        bad(
            json!({"id": "fc", "kind": "module", "module": "linear",
                   "weight": {"shape": [1, 1], "data": [1], "dtype": "f32"}, "bias": null}),
            Some("fc"),
            "unknown field `dtype`, expected `shape` or `data`",
        );
        // Wrong types.
        bad(
            json!({"id": "y", "kind": "leaf", "shape": [2], "data": [1.0, 2.0],
                   "device": "plain", "require_grad": "no"}),
            Some("y"),
            "invalid type: string \"no\", expected a boolean",
        );
        bad(
            json!({"id": "y", "kind": "op", "op": "exp", "inputs": "x"}),
            Some("y"),
            "invalid type: string \"x\", expected a sequence",
        );
        bad(
            json!({"id": "y", "kind": "op", "op": "exp", "inputs": ["x"], "attrs": []}),
            Some("y"),
            "invalid type: sequence, expected a map",
        );
        bad(
            json!({"id": "y", "kind": "leaf", "shape": [-2], "data": [1.0, 2.0],
                   "device": "plain", "require_grad": false}),
            Some("y"),
            "invalid value: integer `-2`, expected usize",
        );
        bad(
            json!({"id": "y", "kind": "leaf", "shape": [2], "data": [1.0, "nan"],
                   "device": "plain", "require_grad": false}),
            Some("y"),
            "data[1]: string \"nan\" is not a float (only \"NaN\", \"Infinity\", \"-Infinity\")",
        );
        bad(
            json!({"id": "y", "kind": "leaf", "shape": [2], "data": [1.0, 1e39],
                   "device": "plain", "require_grad": false}),
            Some("y"),
            "data[1]: 1000000000000000000000000000000000000000 overflows float32",
        );
        bad(
            json!({"id": "y", "kind": "module", "module": "dropout", "p": "0.5"}),
            Some("y"),
            "invalid type: string \"0.5\", expected f64",
        );
        bad(
            json!({"id": 3, "kind": "backward", "input": "x"}),
            None,
            "invalid type: integer `3`, expected a string",
        );
        bad(
            json!("y"),
            None,
            "a statement must be an object, got a string",
        );
        bad(
            json!(["backward", "y", "x"]),
            None,
            "a statement must be an object, got an array",
        );
        bad(
            json!({"id": "fc", "kind": "module", "module": "linear",
                   "weight": [[1, 1], [1]], "bias": null}),
            Some("fc"),
            "invalid type: sequence, expected a map",
        );
        bad(
            json!({"id": "fc", "kind": "module", "module": "linear",
                   "weight": {"shape": [1, 1], "data": [1]}, "bias": [[1], [1]]}),
            Some("fc"),
            "invalid type: sequence, expected a map",
        );
        // Unknown or missing kind and values.
        bad(
            json!({"id": "y", "kind": "opp", "op": "exp", "inputs": ["x"]}),
            Some("y"),
            "unknown variant `opp`, expected one of `leaf`, `op`, `cut`, `backward`, `module`, \
             `transform`, `apply`, `param`, `grad`, `zero_grad`, `optimizer`, `step`",
        );
        bad(
            json!({"id": "y", "op": "exp", "inputs": ["x"]}),
            Some("y"),
            "missing field `kind`",
        );
        bad(
            json!({"id": "y", "kind": "leaf", "shape": [2], "data": [1.0, 2.0],
                   "device": "gpu", "require_grad": false}),
            Some("y"),
            "unknown variant `gpu`, expected `plain` or `autodiff`",
        );
        bad(
            json!({"id": "y", "kind": "cut", "cut": "stop", "input": "x"}),
            Some("y"),
            "unknown variant `stop`, expected one of `detach`, `without_autodiff`, `autodiff`",
        );
        bad(
            json!({"id": "y", "kind": "op", "op": "exp", "inputs": ["x"], "region": "grads"}),
            Some("y"),
            "unknown variant `grads`, expected one of `grad`, `no_grad`, `inference_mode`",
        );
        bad(
            json!({"id": "y", "kind": "cut", "cut": "detach"}),
            Some("y"),
            "missing field `input`",
        );
        // The first malformed statement is reported, before any resolution error.
        let e = parse(json!([
            x,
            {"id": "y", "kind": "op", "op": "exp", "inputs": ["nope"]},
            {"id": "z", "kind": "op", "op": "exp", "inputs": ["x"], "colour": 1}
        ]))
        .unwrap_err();
        assert_eq!(
            (e.index, e.statement.as_deref()),
            (Some(2), Some("z")),
            "{e}"
        );
    }

    #[test]
    fn defaults_and_nullable_fields() {
        let p = parse(json!([
            {"id": "x", "kind": "leaf", "shape": [2], "data": [1, "-Infinity"],
             "device": "autodiff", "require_grad": true},
            {"id": "y", "kind": "op", "op": "exp", "inputs": ["x"]},
            {"id": "c", "kind": "cut", "cut": "without_autodiff", "input": "y",
             "region": "inference_mode"},
            {"id": "d", "kind": "module", "module": "dropout", "p": 1},
            {"id": "fc", "kind": "module", "module": "linear",
             "weight": {"shape": [1, 2], "data": [1, 2]}, "bias": {"shape": [1], "data": [0]}}
        ]))
        .unwrap();
        match &p.statements[0].kind {
            Kind::Leaf {
                data,
                device: DeviceKind::Autodiff,
                require_grad: true,
                ..
            } => assert_eq!(data, &[1.0, f64::NEG_INFINITY]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            p.statements[1].kind,
            Kind::Op {
                region: Region::Grad,
                ..
            }
        ));
        assert!(matches!(
            p.statements[2].kind,
            Kind::Cut {
                cut: Cut::WithoutAutodiff,
                input: 1,
                region: Region::InferenceMode
            }
        ));
        assert!(matches!(
            p.statements[3].kind,
            Kind::Module {
                spec: ModuleSpec::Dropout { p }
            } if p == 1.0
        ));
        assert!(matches!(
            &p.statements[4].kind,
            Kind::Module {
                spec: ModuleSpec::Linear { bias: Some(b), .. }
            } if b == &[0.0]
        ));
    }

    #[test]
    fn malformed_documents() {
        let doc_err = |doc: Value, message: &str| {
            let e = Program::from_json(&doc).unwrap_err();
            assert_eq!((e.index, e.statement.as_deref()), (None, None), "{e}");
            assert_eq!(e.message, message);
        };
        doc_err(json!([]), "a program must be an object, got an array");
        doc_err(
            json!([FORMAT, 1, null, []]),
            "a program must be an object, got an array",
        );
        doc_err(
            json!({"format": FORMAT, "version": 1, "statements": [], "extra": 1}),
            "unknown field `extra`, expected one of `format`, `version`, `name`, `dtype`, `statements`",
        );
        doc_err(
            json!({"format": "other", "version": 1, "statements": []}),
            "\"format\" must be \"difftest-program\", got \"other\"",
        );
        doc_err(
            json!({"format": FORMAT, "version": 0, "statements": []}),
            "unsupported \"version\" 0 (expected 1 or 2)",
        );
        doc_err(
            json!({"format": FORMAT, "version": 1}),
            "missing field `statements`",
        );
        doc_err(
            json!({"format": FORMAT, "version": 1, "statements": {}}),
            "invalid type: map, expected an array of statements",
        );
        doc_err(
            json!({"format": FORMAT, "version": 1, "name": null, "statements": []}),
            "invalid type: null, expected a string",
        );
        Program::from_json(&json!({"format": FORMAT, "version": 1, "name": "n", "statements": []}))
            .unwrap();
    }

    fn leaf(id: &str, shape: &[usize]) -> Value {
        let n: usize = shape.iter().product();
        json!({"id": id, "kind": "leaf", "shape": shape, "data": vec![0.5; n],
               "device": "autodiff", "require_grad": false})
    }

    fn op(id: &str, op: &str, inputs: &[&str], attrs: Value) -> Value {
        json!({"id": id, "kind": "op", "op": op, "inputs": inputs, "attrs": attrs})
    }

    fn bounds(statements: Value) -> Result<(), ProgramError> {
        parse(statements).unwrap().check_bounds()
    }

    #[test]
    fn element_budget() {
        let x = leaf("x", &[2, 2]);
        let e = bounds(json!([
            x,
            op("s", "sum", &["x"], json!({})),
            op(
                "v2",
                "repeat_dim",
                &["x"],
                json!({"dim": 0, "times": 4_000_000_000u64})
            )
        ]))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "statement 2 (id \"v2\"): repeat_dim would make 16000000000 elements; the limit is \
             1000000 per tensor"
        );
        let e = bounds(json!([
            x,
            op(
                "big",
                "expand",
                &["x"],
                json!({"shape": [1000, 1000, 2, 2]})
            )
        ]))
        .unwrap_err();
        assert_eq!((e.index, e.statement.as_deref()), (Some(1), Some("big")));
        assert!(
            e.message.contains("expand would make 4000000 elements"),
            "{e}"
        );
        // Through reshape and matmul: the inferred shapes carry the size along.
        let e = bounds(json!([
            leaf("a", &[2000, 1]),
            leaf("b", &[1, 2000]),
            op("r", "reshape", &["b"], json!({"shape": [1, 2000]})),
            op("m", "matmul", &["a", "r"], json!({}))
        ]))
        .unwrap_err();
        assert_eq!(e.index, Some(3), "{e}");
        // Exactly at the limit is fine; the program total counts every value.
        let ok = json!([leaf("a", &[1000, 1000])]);
        bounds(ok).unwrap();
        let e = bounds(
            json!([leaf("a", &[1000, 1000]), op("b", "exp", &["a"], json!({})),
            op("c", "exp", &["b"], json!({})), op("d", "exp", &["c"], json!({})),
            {"id": "e", "kind": "cut", "cut": "detach", "input": "d"}]),
        )
        .unwrap_err();
        assert_eq!(e.index, Some(4), "{e}");
        assert!(
            e.message.contains("total 5000000 elements")
                && e.message.contains("4000000 per program"),
            "{e}"
        );
        // A statement burn rejects (here: mismatched inner dims) has no shape: burn panics
        // there at run time, so nothing after it is counted.
        bounds(json!([
            x,
            leaf("y", &[3, 3]),
            op("m", "matmul", &["x", "y"], json!({})),
            op(
                "r",
                "repeat_dim",
                &["m"],
                json!({"dim": 0, "times": 4_000_000_000u64})
            )
        ]))
        .unwrap();
        // Module weights and applying them.
        let e = bounds(json!([{"id": "fc", "kind": "module", "module": "linear",
            "weight": {"shape": [1, 2], "data": [1, 2]}, "bias": null},
            leaf("x", &[2]), op("w", "expand", &["x"], json!({"shape": [600000, 2]})),
            {"id": "y", "kind": "apply", "module": "fc", "input": "w"}]))
        .unwrap_err();
        assert_eq!(e.index, Some(2), "{e}");
        let e = bounds(json!([
            leaf("x", &[3]),
            op(
                "g",
                "gather",
                &["x"],
                json!({"dim": 0, "indices": {"shape": [1_000_001], "data": vec![0; 1_000_001]}})
            )
        ]))
        .unwrap_err();
        assert!(
            e.message
                .starts_with("attribute \"indices\" would make 1000001"),
            "{e}"
        );
    }
}
