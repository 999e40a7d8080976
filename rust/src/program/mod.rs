//! Programs: the JSON document parsed into typed, validated statements.
//!
//! serde reads the document and each statement ([`crate::document`]: fields, their types,
//! the accepted values of `kind`, `device`, `cut`, `region`, `transform`, `param` and
//! `module`, no unknown fields). One resolution pass ([`Program::from_json`], in `resolve.rs`)
//! then checks the rest of the document's structure (docs/format.md): format and version,
//! unique ids matching `^[A-Za-z_][A-Za-z0-9_]*$`, inputs that name earlier value statements,
//! leaf data whose length matches the shape, ranks 1 to 4 with dims >= 1, op attributes and
//! arities, module weights and biases (each module kind's own checks: [`crate::modules`]).
//! Shape rules of ops are *not* checked here: burn checks them at run time.
//!
//! [`Program::check_bounds`] (`bounds.rs`) is the element budget a `run` checks before
//! executing anything (docs/format.md, "Bounds"): every tensor's shape is inferred from the
//! statements (as burn would compute it), and no tensor may exceed
//! [`bounds::MAX_TENSOR_ELEMENTS`] elements, nor all of a program's tensors together
//! [`bounds::MAX_PROGRAM_ELEMENTS`].

mod bounds;
mod resolve;

use std::fmt;

pub use crate::document::{Cut, DeviceKind, ParamName, Region, Transform};
pub use crate::dtype::ProgramDType;
use crate::modules::ModuleSpec;
use crate::ops::Op;

pub const FORMAT: &str = "difftest-program";
/// The newest format version; version 1 (no sessions) still loads.
pub const VERSION: u64 = 2;

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
    /// A parameter or buffer of the module `module`, reported in PyTorch's layout.
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
    /// The autodiff device's gradient-checkpointing strategy.
    pub checkpointing: Checkpointing,
}

/// burn's gradient-checkpointing strategy for the program's autodiff device
/// (docs/format.md#gradient-checkpointing): `balanced` recomputes the outputs of the ops burn
/// marks memory-bound during the backward instead of keeping them. Gradients must not depend
/// on it. `disabled` (burn's default) when absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Checkpointing {
    #[default]
    Disabled,
    Balanced,
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

/// Whether `id` matches `^[A-Za-z_][A-Za-z0-9_]*$`.
pub fn valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
