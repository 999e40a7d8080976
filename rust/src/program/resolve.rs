//! The resolution pass: a program document parsed with serde ([`crate::document`]), then its
//! statements validated in order and their references resolved to earlier statements.

use std::collections::HashMap;

use serde_json::Value;

use super::{
    FORMAT, Kind, Program, ProgramDType, ProgramError, SgdSpec, Statement, VERSION, module_root,
    module_spec, valid_id,
};
use crate::document::{self, Document};
use crate::modules::ModuleSpec;
use crate::ops::{NARY, Op, check_data, check_shape};

fn doc_error(message: impl Into<String>) -> ProgramError {
    ProgramError {
        index: None,
        statement: None,
        message: message.into(),
    }
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
            checkpointing: header.gradient_checkpointing,
        })
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
            document::Statement::Module(doc) => Kind::Module {
                spec: ModuleSpec::parse(doc, self.dtype)?,
            },
            document::Statement::Transform(s) => Kind::Transform {
                transform: s.transform,
                input: self.module(&s.input)?,
            },
            document::Statement::Apply(s) => {
                let (module, input) = (self.module(&s.module)?, self.input(&s.input)?);
                module_spec(&self.statements, module)
                    .check_input(&self.statements[input].kind)
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
        if let Some(why) = module_spec(&self.statements, module).not_stepped() {
            return Err(why.to_string());
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

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
