//! The element budget a `run` checks before executing anything (docs/format.md, "Bounds").

use super::{Kind, Program, ProgramError, module_spec};
use crate::ops;

/// The most elements one tensor of a program may have (values, leaves, inline tensors).
pub const MAX_TENSOR_ELEMENTS: u64 = 1_000_000;
/// The most elements a program's tensors may have together (every value statement's result,
/// module weights and biases, inline attribute tensors).
pub const MAX_PROGRAM_ELEMENTS: u64 = 4_000_000;

impl Program {
    /// Checks the element budget before anything runs; the error names the first statement
    /// whose tensor exceeds [`MAX_TENSOR_ELEMENTS`], or at which the running total exceeds
    /// [`MAX_PROGRAM_ELEMENTS`]. Shapes are inferred as burn computes them
    /// ([`crate::ops::Op::infer_shape`]); a statement burn would reject (it panics when run, and nothing
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

#[cfg(test)]
#[path = "bounds_tests.rs"]
mod tests;
