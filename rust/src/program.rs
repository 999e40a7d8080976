//! Programs: parsing and validating the JSON document into typed statements.
//!
//! Validation covers the document's structure (docs/format.md): format and version, unique ids
//! matching `^[A-Za-z_][A-Za-z0-9_]*$`, inputs that name earlier value statements, leaf data
//! whose length matches the shape, ranks 1 to 4 with dims >= 1, attributes and their types,
//! regions and cuts. Shape rules of ops are *not* checked here: burn checks them at run time.

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::floats::{kind_of, parse_f32};
use crate::ops::{self, NARY, Op, check_keys, check_shape};

pub const FORMAT: &str = "difftest-program";
pub const VERSION: u64 = 1;

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
}

#[derive(Clone, Debug)]
pub struct Statement {
    pub id: String,
    pub kind: Kind,
}

impl Statement {
    /// Whether the statement defines a value (everything but `backward`).
    pub fn is_value(&self) -> bool {
        !matches!(self.kind, Kind::Backward { .. })
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
        check_keys(obj, &["format", "version", "statements"])
            .map_err(|e| doc_error(e.replace("attribute", "field")))?;
        match obj.get("format") {
            Some(Value::String(s)) if s == FORMAT => {}
            Some(v) => return Err(doc_error(format!("\"format\" must be {FORMAT:?}, got {v}"))),
            None => return Err(doc_error("missing field \"format\"")),
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

fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a Value, String> {
    obj.get(key).ok_or_else(|| format!("missing field {key:?}"))
}

fn str_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    let v = field(obj, key)?;
    v.as_str()
        .ok_or_else(|| format!("field {key:?} must be a string, got {}", kind_of(v)))
}

/// Resolves an input id to the index of an earlier value statement.
fn resolve(
    name: &Value,
    ids: &HashMap<String, usize>,
    statements: &[Statement],
) -> Result<usize, String> {
    let name = name
        .as_str()
        .ok_or_else(|| format!("an input must be an id string, got {}", kind_of(name)))?;
    let index = *ids
        .get(name)
        .ok_or_else(|| format!("input {name:?} is not the id of an earlier statement"))?;
    if !statements[index].is_value() {
        return Err(format!(
            "input {name:?} is a backward statement, not a value"
        ));
    }
    Ok(index)
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
            let data = field(obj, "data")?
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
            let device = match str_field(obj, "device")? {
                "plain" => DeviceKind::Plain,
                "autodiff" => DeviceKind::Autodiff,
                other => {
                    return Err(format!(
                        "\"device\" must be \"plain\" or \"autodiff\", got {other:?}"
                    ));
                }
            };
            let require_grad = match obj.get("require_grad") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => return Err(format!("\"require_grad\" must be a boolean, got {v}")),
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
        other => {
            return Err(format!(
                "unknown kind {other:?} (expected \"leaf\", \"op\", \"cut\" or \"backward\")"
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
            {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "plain"},
            {"id": "v1", "kind": "op", "op": "foo", "inputs": ["x"]}
        ]))
        .unwrap_err();
        assert_eq!(e.to_string(), "statement 1 (id \"v1\"): unknown op \"foo\"");
        let e = parse(json!([
            {"id": "x", "kind": "leaf", "shape": [3], "data": [1.0, 2.0], "device": "plain"}
        ]))
        .unwrap_err();
        assert_eq!(e.index, Some(0));
        let e = parse(json!([
            {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "plain"},
            {"id": "y", "kind": "op", "op": "add", "inputs": ["x", "z"]}
        ]))
        .unwrap_err();
        assert!(e.message.contains("\"z\""), "{e}");
        let e = parse(json!([
            {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "plain"},
            {"id": "y", "kind": "op", "op": "sum_dim", "inputs": ["x"], "attrs": {"dim": -1}}
        ]))
        .unwrap_err();
        assert!(e.message.contains("dim"), "{e}");
    }
}
