//! Programs: parsing and validating the JSON document into typed statements.
//!
//! Validation covers the document's structure (docs/format.md): format and version, unique ids
//! matching `^[A-Za-z_][A-Za-z0-9_]*$`, inputs that name earlier value statements, leaf data
//! whose length matches the shape, ranks 1 to 4 with dims >= 1, attributes and their types,
//! regions and cuts. Shape rules of ops are *not* checked here: burn checks them at run time.
//!
//! [`Program::check_bounds`] is the element budget a `run` checks before executing anything
//! (docs/format.md, "Bounds"): every tensor's shape is inferred from the statements (as burn
//! would compute it), and no tensor may exceed [`MAX_TENSOR_ELEMENTS`] elements, nor all of a
//! program's tensors together [`MAX_PROGRAM_ELEMENTS`].

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::floats::{kind_of, parse_f32};
use crate::ops::{self, NARY, Op, check_keys, check_shape};

pub const FORMAT: &str = "difftest-program";
pub const VERSION: u64 = 1;

/// The most elements one tensor of a program may have (values, leaves, inline tensors).
pub const MAX_TENSOR_ELEMENTS: u64 = 1_000_000;
/// The most elements a program's tensors may have together (every value statement's result,
/// module weights and biases, inline attribute tensors).
pub const MAX_PROGRAM_ELEMENTS: u64 = 4_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Plain,
    Autodiff,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    Grad,
    NoGrad,
    InferenceMode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    Detach,
    WithoutAutodiff,
    Autodiff,
}

/// A module transform (`kind: "transform"`), one of burn's `Module` methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transform {
    Valid,
    Train,
    NoGrad,
    Freeze,
    Unfreeze,
}

/// A parameter of a `linear` module (`kind: "param"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamName {
    Weight,
    Bias,
}

/// How a module is built (`kind: "module"`).
#[derive(Clone, Debug)]
pub enum ModuleSpec {
    /// `weight` is row-major in PyTorch's layout `[d_output, d_input]`; `bias` has `d_output`
    /// elements.
    Linear {
        d_input: usize,
        d_output: usize,
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
    },
    Dropout {
        p: f64,
    },
}

/// A statement; inputs are indices of earlier statements.
#[derive(Clone, Debug)]
pub enum Kind {
    Leaf {
        shape: Vec<usize>,
        data: Vec<f32>,
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
    Backward {
        input: usize,
    },
    /// A module handle (not a value).
    Module {
        spec: ModuleSpec,
    },
    /// A transformed module handle (not a value); `input` is a module or transform statement.
    Transform {
        transform: Transform,
        input: usize,
    },
    /// The forward of `module` (a module or transform statement) on the value `input`.
    Apply {
        module: usize,
        input: usize,
    },
    /// A parameter of the linear module `module`, reported in PyTorch's layout.
    Param {
        module: usize,
        param: ParamName,
    },
}

#[derive(Clone, Debug)]
pub struct Statement {
    pub id: String,
    pub kind: Kind,
}

impl Statement {
    /// Whether the statement defines a value (not `backward`, `module` or `transform`).
    pub fn is_value(&self) -> bool {
        !matches!(
            self.kind,
            Kind::Backward { .. } | Kind::Module { .. } | Kind::Transform { .. }
        )
    }

    /// Whether the statement defines a module handle (`module` or `transform`).
    pub fn is_module(&self) -> bool {
        matches!(self.kind, Kind::Module { .. } | Kind::Transform { .. })
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
        }
    }
}

/// The spec of the module that statement `index` (a module or transform) was derived from.
pub fn module_spec(statements: &[Statement], mut index: usize) -> &ModuleSpec {
    loop {
        match &statements[index].kind {
            Kind::Module { spec } => return spec,
            Kind::Transform { input, .. } => index = *input,
            _ => panic!("statement {index} is not a module"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Program {
    pub statements: Vec<Statement>,
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
    pub fn from_json(doc: &Value) -> Result<Program, ProgramError> {
        let obj = doc.as_object().ok_or_else(|| {
            doc_error(format!("a program must be an object, got {}", kind_of(doc)))
        })?;
        check_keys(obj, &["format", "version", "name", "statements"])
            .map_err(|e| doc_error(e.replace("attribute", "field")))?;
        match obj.get("format") {
            Some(Value::String(s)) if s == FORMAT => {}
            Some(v) => return Err(doc_error(format!("\"format\" must be {FORMAT:?}, got {v}"))),
            None => return Err(doc_error("missing field \"format\"")),
        }
        if let Some(v) = obj.get("name").filter(|v| !v.is_string()) {
            return Err(doc_error(format!(
                "\"name\" must be a string, got {}",
                kind_of(v)
            )));
        }
        match obj.get("version") {
            Some(v) if v.as_u64() == Some(VERSION) => {}
            Some(v) => {
                return Err(doc_error(format!(
                    "unsupported \"version\" {v} (expected {VERSION})"
                )));
            }
            None => return Err(doc_error("missing field \"version\"")),
        }
        let items = match obj.get("statements") {
            Some(Value::Array(items)) => items,
            Some(v) => {
                return Err(doc_error(format!(
                    "\"statements\" must be an array, got {}",
                    kind_of(v)
                )));
            }
            None => return Err(doc_error("missing field \"statements\"")),
        };

        let mut statements: Vec<Statement> = Vec::with_capacity(items.len());
        let mut ids: HashMap<String, usize> = HashMap::new();
        for (index, item) in items.iter().enumerate() {
            let id = item.get("id").and_then(Value::as_str).map(str::to_owned);
            let err = |message: String| ProgramError {
                index: Some(index),
                statement: id.clone(),
                message,
            };
            let stmt = parse_statement(item, &ids, &statements).map_err(err)?;
            ids.insert(stmt.id.clone(), index);
            statements.push(stmt);
        }
        Ok(Program { statements })
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
                    if let ModuleSpec::Linear {
                        d_input,
                        d_output,
                        bias,
                        ..
                    } = spec
                    {
                        tensors.push(("weight".into(), ops::numel(&[*d_output, *d_input])));
                        if bias.is_some() {
                            tensors.push(("bias".into(), *d_output as u64));
                        }
                    }
                    None
                }
                Kind::Transform { .. } | Kind::Backward { .. } => None,
                Kind::Apply { module, input } => match module_spec(&self.statements, *module) {
                    ModuleSpec::Linear {
                        d_input, d_output, ..
                    } => shape_of(*input)
                        .filter(|s| s.last() == Some(d_input))
                        .map(|mut s| {
                            s.pop();
                            s.push(*d_output);
                            s
                        }),
                    ModuleSpec::Dropout { .. } => shape_of(*input),
                },
                Kind::Param { module, param } => match module_spec(&self.statements, *module) {
                    ModuleSpec::Linear {
                        d_input, d_output, ..
                    } => Some(match param {
                        ParamName::Weight => vec![*d_output, *d_input],
                        ParamName::Bias => vec![*d_output],
                    }),
                    ModuleSpec::Dropout { .. } => None,
                },
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

fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a Value, String> {
    obj.get(key).ok_or_else(|| format!("missing field {key:?}"))
}

fn str_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    let v = field(obj, key)?;
    v.as_str()
        .ok_or_else(|| format!("field {key:?} must be a string, got {}", kind_of(v)))
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
    expected: "a module or transform",
};

/// Resolves a reference to the index of an earlier statement of the kind `kind` accepts.
fn resolve_ref(
    kind: &RefKind,
    name: &Value,
    ids: &HashMap<String, usize>,
    statements: &[Statement],
) -> Result<usize, String> {
    let what = kind.what;
    let name = name.as_str().ok_or_else(|| {
        format!(
            "{what} reference must be an id string, got {}",
            kind_of(name)
        )
    })?;
    let index = *ids
        .get(name)
        .ok_or_else(|| format!("{what} {name:?} is not the id of an earlier statement"))?;
    let stmt = &statements[index];
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
fn resolve(
    name: &Value,
    ids: &HashMap<String, usize>,
    statements: &[Statement],
) -> Result<usize, String> {
    resolve_ref(&INPUT, name, ids, statements)
}

/// Resolves a module reference to the index of an earlier module or transform statement.
fn resolve_module(
    name: &Value,
    ids: &HashMap<String, usize>,
    statements: &[Statement],
) -> Result<usize, String> {
    resolve_ref(&MODULE, name, ids, statements)
}

/// Reads float tensor data (a flat list) and checks its length against `shape`.
fn parse_data(v: &Value, shape: &[usize]) -> Result<Vec<f32>, String> {
    let data = v
        .as_array()
        .ok_or("field \"data\" must be an array")?
        .iter()
        .enumerate()
        .map(|(i, v)| parse_f32(v).map_err(|e| format!("data[{i}]: {e}")))
        .collect::<Result<Vec<f32>, String>>()?;
    let n: usize = shape.iter().product();
    if data.len() != n {
        return Err(format!(
            "data has {} elements but shape {shape:?} needs {n}",
            data.len()
        ));
    }
    Ok(data)
}

/// Reads an inline float tensor `{"shape": [...], "data": [...]}` of the given rank.
fn parse_tensor(v: &Value, what: &str, rank: usize) -> Result<(Vec<usize>, Vec<f32>), String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("{what} must be {{\"shape\", \"data\"}}, got {}", kind_of(v)))?;
    check_keys(obj, &["shape", "data"])
        .map_err(|e| format!("{what}: {}", e.replace("attribute", "field")))?;
    let shape: Vec<usize> = ops::get(obj, "shape")
        .map_err(|e| format!("{what}: {}", e.replace("attribute", "field")))?;
    check_shape(&shape).map_err(|e| format!("{what}: {e}"))?;
    if shape.len() != rank {
        return Err(format!("{what} must have rank {rank}, got shape {shape:?}"));
    }
    let data = parse_data(field(obj, "data")?, &shape).map_err(|e| format!("{what}: {e}"))?;
    Ok((shape, data))
}

fn parse_region(obj: &Map<String, Value>) -> Result<Region, String> {
    match obj.get("region") {
        None => Ok(Region::Grad),
        Some(v) => match v.as_str() {
            Some("grad") => Ok(Region::Grad),
            Some("no_grad") => Ok(Region::NoGrad),
            Some("inference_mode") => Ok(Region::InferenceMode),
            _ => Err(format!(
                "\"region\" must be \"grad\", \"no_grad\" or \"inference_mode\", got {v}"
            )),
        },
    }
}

fn parse_statement(
    item: &Value,
    ids: &HashMap<String, usize>,
    statements: &[Statement],
) -> Result<Statement, String> {
    let obj = item
        .as_object()
        .ok_or_else(|| format!("a statement must be an object, got {}", kind_of(item)))?;
    let id = str_field(obj, "id")?;
    if !valid_id(id) {
        return Err(format!("id {id:?} does not match ^[A-Za-z_][A-Za-z0-9_]*$"));
    }
    if let Some(&first) = ids.get(id) {
        return Err(format!(
            "duplicate id {id:?} (first used by statement {first})"
        ));
    }
    let kind = str_field(obj, "kind")?;
    let fields = |allowed: &[&str]| {
        check_keys(obj, allowed).map_err(|e| format!("{kind}: {}", e.replace("attribute", "field")))
    };
    let kind = match kind {
        "leaf" => {
            fields(&["id", "kind", "shape", "data", "device", "require_grad"])?;
            let shape: Vec<usize> =
                ops::get(obj, "shape").map_err(|e| e.replace("attribute", "field"))?;
            check_shape(&shape)?;
            let data = parse_data(field(obj, "data")?, &shape)?;
            let device = match str_field(obj, "device")? {
                "plain" => DeviceKind::Plain,
                "autodiff" => DeviceKind::Autodiff,
                other => {
                    return Err(format!(
                        "\"device\" must be \"plain\" or \"autodiff\", got {other:?}"
                    ));
                }
            };
            let require_grad = match field(obj, "require_grad")? {
                Value::Bool(b) => *b,
                v => return Err(format!("\"require_grad\" must be a boolean, got {v}")),
            };
            Kind::Leaf {
                shape,
                data,
                device,
                require_grad,
            }
        }
        "op" => {
            fields(&["id", "kind", "op", "inputs", "attrs", "region"])?;
            let name = str_field(obj, "op")?;
            let empty = Map::new();
            let attrs = match obj.get("attrs") {
                None => &empty,
                Some(Value::Object(m)) => m,
                Some(v) => return Err(format!("\"attrs\" must be an object, got {}", kind_of(v))),
            };
            let op = Op::parse(name, attrs).map_err(|e| {
                if e.starts_with("unknown op") {
                    e
                } else {
                    format!("op {name:?}: {e}")
                }
            })?;
            let inputs = field(obj, "inputs")?
                .as_array()
                .ok_or("field \"inputs\" must be an array")?
                .iter()
                .map(|v| resolve(v, ids, statements))
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
                region: parse_region(obj)?,
            }
        }
        "cut" => {
            fields(&["id", "kind", "cut", "input", "region"])?;
            let cut = match str_field(obj, "cut")? {
                "detach" => Cut::Detach,
                "without_autodiff" => Cut::WithoutAutodiff,
                "autodiff" => Cut::Autodiff,
                other => {
                    return Err(format!(
                        "\"cut\" must be \"detach\", \"without_autodiff\" or \"autodiff\", got {other:?}"
                    ));
                }
            };
            Kind::Cut {
                cut,
                input: resolve(field(obj, "input")?, ids, statements)?,
                region: parse_region(obj)?,
            }
        }
        "backward" => {
            fields(&["id", "kind", "input"])?;
            Kind::Backward {
                input: resolve(field(obj, "input")?, ids, statements)?,
            }
        }
        "module" => match str_field(obj, "module")? {
            "linear" => {
                fields(&["id", "kind", "module", "weight", "bias"])?;
                let (shape, weight) = parse_tensor(field(obj, "weight")?, "weight", 2)?;
                let (d_output, d_input) = (shape[0], shape[1]);
                let bias = match field(obj, "bias")? {
                    Value::Null => None,
                    v => {
                        let (bshape, bias) = parse_tensor(v, "bias", 1)?;
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
            "dropout" => {
                fields(&["id", "kind", "module", "p"])?;
                let p = match field(obj, "p")? {
                    Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
                    v => return Err(format!("\"p\" must be a number, got {}", kind_of(v))),
                };
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!("\"p\" must be in [0, 1], got {p}"));
                }
                Kind::Module {
                    spec: ModuleSpec::Dropout { p },
                }
            }
            other => {
                return Err(format!(
                    "unknown module {other:?} (expected \"linear\" or \"dropout\")"
                ));
            }
        },
        "transform" => {
            fields(&["id", "kind", "transform", "input"])?;
            let transform = match str_field(obj, "transform")? {
                "valid" => Transform::Valid,
                "train" => Transform::Train,
                "no_grad" => Transform::NoGrad,
                "freeze" => Transform::Freeze,
                "unfreeze" => Transform::Unfreeze,
                other => {
                    return Err(format!(
                        "\"transform\" must be \"valid\", \"train\", \"no_grad\", \"freeze\" or \"unfreeze\", got {other:?}"
                    ));
                }
            };
            Kind::Transform {
                transform,
                input: resolve_module(field(obj, "input")?, ids, statements)?,
            }
        }
        "apply" => {
            fields(&["id", "kind", "module", "input"])?;
            Kind::Apply {
                module: resolve_module(field(obj, "module")?, ids, statements)?,
                input: resolve(field(obj, "input")?, ids, statements)?,
            }
        }
        "param" => {
            fields(&["id", "kind", "module", "param"])?;
            let module = resolve_module(field(obj, "module")?, ids, statements)?;
            let param = match str_field(obj, "param")? {
                "weight" => ParamName::Weight,
                "bias" => ParamName::Bias,
                other => {
                    return Err(format!(
                        "\"param\" must be \"weight\" or \"bias\", got {other:?}"
                    ));
                }
            };
            match module_spec(statements, module) {
                ModuleSpec::Dropout { .. } => {
                    return Err("param: a dropout module has no parameters".to_string());
                }
                ModuleSpec::Linear { bias: None, .. } if param == ParamName::Bias => {
                    return Err("param: the linear module has no bias".to_string());
                }
                ModuleSpec::Linear { .. } => {}
            }
            Kind::Param { module, param }
        }
        other => {
            return Err(format!(
                "unknown kind {other:?} (expected \"leaf\", \"op\", \"cut\", \"backward\", \"module\", \"transform\", \"apply\" or \"param\")"
            ));
        }
    };
    Ok(Statement {
        id: id.to_owned(),
        kind,
    })
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
            "\"transform\"",
        );
        bad(
            json!({"id": "bad", "kind": "param", "module": "fc", "param": "bias"}),
            "no bias",
        );
        bad(
            json!({"id": "bad", "kind": "param", "module": "dr", "param": "weight"}),
            "no parameters",
        );
        bad(
            json!({"id": "bad", "kind": "module", "module": "dropout", "p": 1.5}),
            "[0, 1]",
        );
        bad(
            json!({"id": "bad", "kind": "module", "module": "conv", "p": 1.5}),
            "unknown module",
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
            "\"bias\"",
        );
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
