//! Running a program on burn and recording what it reports. Leaves, ops and cuts execute as
//! in the memory experiment ([`crate::step`]); modules, parameters, backwards, gradient reads
//! and optimizer steps only here.
//!
//! A backward leaves its `Gradients` in the environment (a gradients handle) for the `grad`
//! and `step` statements after it; an optimizer statement leaves its optimizer, whose state
//! persists across the steps that use it.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::optim::ModuleOptimizer;
use burn::tensor::Gradients;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use crate::apply;
use crate::fault;
use crate::floats::serialize_f64s;
use crate::modules::{NnModule, transpose_data};
use crate::optim;
use crate::program::{Kind, Program, Region, Statement, Transform};
use crate::step::{self, Devices, panic_message};
use crate::value::{DynTensor, Flags};

/// Shape and row-major data of a tensor.
#[derive(Clone, Debug, Serialize)]
pub struct TensorObs {
    pub shape: Vec<usize>,
    #[serde(serialize_with = "serialize_f64s")]
    pub data: Vec<f64>,
    /// The tensor's dtype as burn reports it (PyTorch's names).
    pub dtype: &'static str,
}

impl TensorObs {
    fn of(t: &DynTensor) -> Self {
        let (shape, data) = t.read_f64();
        TensorObs {
            shape,
            data,
            dtype: t.dtype_name(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ValueObs {
    pub id: String,
    pub shape: Vec<usize>,
    #[serde(serialize_with = "serialize_f64s")]
    pub data: Vec<f64>,
    pub dtype: &'static str,
    pub flags: Flags,
}

/// Gradients of every value defined before a backward, in definition order.
#[derive(Clone, Debug, Default)]
pub struct Grads(pub Vec<(String, Option<TensorObs>)>);

impl Serialize for Grads {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (id, g) in &self.0 {
            map.serialize_entry(id, g)?;
        }
        map.end()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct BackwardObs {
    pub id: String,
    pub grads: Grads,
}

/// The statement that failed: `kind` is `"panic"` (burn panicked; `message` is its message,
/// `location` the `file:line:column` the panic was raised at) or `"missing-gradient"` (a `grad`
/// statement found no gradient).
#[derive(Clone, Debug, Serialize)]
pub struct RunError {
    pub index: usize,
    pub statement: String,
    pub kind: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Observation {
    pub values: Vec<ValueObs>,
    pub backwards: Vec<BackwardObs>,
    pub error: Option<RunError>,
}

/// What a statement left for later statements.
enum Slot {
    /// A value (leaf, op, cut, apply).
    Value(DynTensor),
    /// A module parameter (or a parameter's gradient) as burn stores it; `transposed` when its
    /// PyTorch layout is the transpose (a linear weight). Flags and gradients are read from
    /// `raw`; data is reported, and later statements see it, in PyTorch's layout.
    Param { raw: DynTensor, transposed: bool },
    /// A module handle (module, transform, step).
    Module(Box<NnModule>),
    /// A gradients handle (backward); `step` removes the module's gradients from it.
    Grads(RefCell<Gradients>),
    /// An optimizer handle and its state.
    Optimizer(RefCell<ModuleOptimizer>),
    /// Nothing (zero_grad).
    Empty,
}

impl Slot {
    /// The value as later statements see it (PyTorch layout).
    fn value(&self) -> DynTensor {
        match self {
            Slot::Value(t) => t.clone(),
            Slot::Param {
                raw,
                transposed: false,
            } => raw.clone(),
            Slot::Param {
                raw,
                transposed: true,
            } => match raw {
                DynTensor::R2(t) => DynTensor::R2(t.clone().transpose()),
                _ => unreachable!("only rank-2 parameters are transposed"),
            },
            Slot::Module(_) | Slot::Grads(_) | Slot::Optimizer(_) | Slot::Empty => {
                unreachable!("inputs are earlier value statements")
            }
        }
    }

    fn module(&self) -> &NnModule {
        match self {
            Slot::Module(m) => m,
            _ => unreachable!("module references are earlier module statements"),
        }
    }

    fn grads(&self) -> &RefCell<Gradients> {
        match self {
            Slot::Grads(g) => g,
            _ => unreachable!("grads references are earlier backward statements"),
        }
    }

    fn optimizer(&self) -> &RefCell<ModuleOptimizer> {
        match self {
            Slot::Optimizer(o) => o,
            _ => unreachable!("optimizer references are earlier optimizer statements"),
        }
    }

    /// The gradient of this value in `grads`, in PyTorch's layout, or `None` when there is
    /// none (and for handles, which have no gradient).
    fn grad_obs(&self, grads: &Gradients) -> Option<Option<TensorObs>> {
        match self {
            Slot::Value(v) => Some(grad_of(v, grads).map(|g| TensorObs::of(&g))),
            Slot::Param { raw, transposed } => {
                Some(grad_of(raw, grads).map(|g| untranspose(TensorObs::of(&g), *transposed)))
            }
            Slot::Module(_) | Slot::Grads(_) | Slot::Optimizer(_) | Slot::Empty => None,
        }
    }
}

/// `obs` in PyTorch's layout when it is a transposed parameter (or its gradient).
fn untranspose(obs: TensorObs, transposed: bool) -> TensorObs {
    match (transposed, obs.shape.as_slice()) {
        (true, &[rows, cols]) => TensorObs {
            shape: vec![cols, rows],
            data: transpose_data(rows, cols, &obs.data),
            dtype: obs.dtype,
        },
        _ => obs,
    }
}

enum Outcome {
    Slot(Box<Slot>, Option<ValueObs>),
    Backward(Box<Slot>, BackwardObs),
    /// The statement failed without a panic.
    Failed {
        kind: &'static str,
        message: String,
    },
}

fn grad_of(v: &DynTensor, grads: &Gradients) -> Option<DynTensor> {
    match v {
        DynTensor::R1(t) => t.grad(grads).map(DynTensor::R1),
        DynTensor::R2(t) => t.grad(grads).map(DynTensor::R2),
        DynTensor::R3(t) => t.grad(grads).map(DynTensor::R3),
        DynTensor::R4(t) => t.grad(grads).map(DynTensor::R4),
    }
}

/// Whether the module handle at `index` was derived (through transforms and steps) from a
/// `valid()`.
fn derived_from_valid(statements: &[Statement], mut index: usize) -> bool {
    loop {
        match &statements[index].kind {
            Kind::Transform {
                transform: Transform::Valid,
                ..
            } => return true,
            Kind::Transform { input, .. } => index = *input,
            Kind::Step { module, .. } => index = *module,
            _ => return false,
        }
    }
}

/// Where a value statement's result comes from, for the `flag-after` fault.
fn flag_site(stmt: &Statement, statements: &[Statement]) -> Option<fault::FlagSite> {
    match &stmt.kind {
        Kind::Cut { cut, .. } => Some(fault::FlagSite::of_cut(*cut)),
        Kind::Op {
            region: Region::NoGrad,
            ..
        } => Some(fault::FlagSite::NoGrad),
        Kind::Op {
            region: Region::InferenceMode,
            ..
        } => Some(fault::FlagSite::InferenceMode),
        Kind::Apply { module, .. } if derived_from_valid(statements, *module) => {
            Some(fault::FlagSite::Valid)
        }
        _ => None,
    }
}

/// A tensor kept as burn stores it (a parameter or a parameter's gradient): reported, and seen
/// by later statements, in PyTorch's layout; its flags are those of `raw`.
fn param_outcome(stmt: &Statement, raw: DynTensor, transposed: bool, observe: bool) -> Outcome {
    if !observe {
        return Outcome::Slot(Box::new(Slot::Param { raw, transposed }), None);
    }
    let obs = untranspose(TensorObs::of(&raw), transposed);
    let obs = ValueObs {
        id: stmt.id.clone(),
        shape: obs.shape,
        data: obs.data,
        dtype: obs.dtype,
        flags: raw.flags(),
    };
    Outcome::Slot(Box::new(Slot::Param { raw, transposed }), Some(obs))
}

/// Runs one statement on the slots of the statements before it; `observe`: report what it
/// left (its value, or its backward's gradient entries), which only costs reads when not.
fn run_statement(
    stmt: &Statement,
    env: &[Slot],
    program: &Program,
    devices: &Devices,
    observe: bool,
) -> Outcome {
    let get = |i: usize| env[i].value();
    let value = match &stmt.kind {
        Kind::Leaf { .. } | Kind::Op { .. } | Kind::Cut { .. } => {
            step::tensor(&stmt.kind, devices, get).expect("leaf, op and cut are tensors")
        }
        Kind::Module { spec } => {
            let m = NnModule::build(spec, &devices.autodiff, devices.dtype);
            return Outcome::Slot(Box::new(Slot::Module(Box::new(m))), None);
        }
        Kind::Transform { transform, input } => {
            let m = env[*input].module().transform(*transform);
            return Outcome::Slot(Box::new(Slot::Module(Box::new(m))), None);
        }
        Kind::Apply { module, input } => {
            let kind = crate::program::module_spec(&program.statements, *module).name();
            crate::fault::module_forward(kind, env[*module].module().forward(get(*input)))
        }
        Kind::Param { module, param } => {
            let m = env[*module].module();
            return param_outcome(stmt, m.param(*param), m.transposed(*param), observe);
        }
        Kind::Grad { grads, of } => {
            let handle = env[*grads].grads().borrow();
            let (raw, transposed) = match &env[*of] {
                Slot::Value(v) => (grad_of(v, &handle), false),
                Slot::Param { raw, transposed } => (grad_of(raw, &handle), *transposed),
                _ => unreachable!("`of` is an earlier value statement"),
            };
            return match raw {
                Some(raw) => param_outcome(stmt, raw, transposed, observe),
                None => Outcome::Failed {
                    kind: "missing-gradient",
                    message: format!(
                        "the gradients of {:?} hold no gradient of {:?}",
                        program.statements[*grads].id, program.statements[*of].id
                    ),
                },
            };
        }
        Kind::Backward { input } => {
            let grads = apply!(fault::backward_root(get(*input)), t => t.backward());
            let obs = if observe {
                program
                    .statements
                    .iter()
                    .zip(env)
                    .filter_map(|(s, slot)| Some((s.id.clone(), slot.grad_obs(&grads)?)))
                    .collect()
            } else {
                Vec::new()
            };
            let obs = BackwardObs {
                id: stmt.id.clone(),
                grads: Grads(obs),
            };
            return Outcome::Backward(Box::new(Slot::Grads(RefCell::new(grads))), obs);
        }
        Kind::ZeroGrad => return Outcome::Slot(Box::new(Slot::Empty), None),
        Kind::Optimizer { spec } => {
            let o = Slot::Optimizer(RefCell::new(optim::sgd(spec)));
            return Outcome::Slot(Box::new(o), None);
        }
        Kind::Step {
            optimizer,
            module,
            grads,
            lr,
        } => {
            let m = env[*module].module().step(
                &mut env[*optimizer].optimizer().borrow_mut(),
                &mut env[*grads].grads().borrow_mut(),
                *lr,
            );
            return Outcome::Slot(Box::new(Slot::Module(Box::new(m))), None);
        }
    };
    if !observe {
        return Outcome::Slot(Box::new(Slot::Value(value)), None);
    }
    let TensorObs { shape, data, dtype } = TensorObs::of(&value);
    let obs = ValueObs {
        id: stmt.id.clone(),
        shape,
        data,
        dtype,
        flags: fault::reported_flags(flag_site(stmt, &program.statements), value.flags()),
    };
    Outcome::Slot(Box::new(Slot::Value(value)), Some(obs))
}

/// Runs a valid program. A panic in a statement stops the run and becomes `error`.
pub fn run(program: &Program) -> Observation {
    run_observing(program, Observe::All)
}

/// What a run reports besides how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observe {
    /// Every value and every backward's gradient entries (a program's run).
    All,
    /// Only the last statement's (a root probe: its re-rooted backward; the statements before
    /// it are the program's own, whose values and gradients its run already reported).
    Last,
}

/// Runs a valid program, reporting what `observe` asks for. Reading a value or a gradient back
/// changes nothing in burn's state, so both modes run the same statements the same way.
pub fn run_observing(program: &Program, observe: Observe) -> Observation {
    let mut obs = Observation::default();
    let devices = match catch_unwind(|| Devices::with_checkpointing(program.checkpointing)) {
        Ok(mut d) => {
            d.dtype = program.dtype.float();
            d
        }
        Err(p) => {
            obs.error = Some(RunError {
                index: 0,
                statement: program
                    .statements
                    .first()
                    .map(|s| s.id.clone())
                    .unwrap_or_default(),
                kind: "panic",
                message: format!("creating the devices failed: {}", panic_message(&*p)),
                location: step::take_panic_location(),
            });
            return obs;
        }
    };
    let mut env: Vec<Slot> = Vec::with_capacity(program.statements.len());
    for (index, stmt) in program.statements.iter().enumerate() {
        step::take_panic_location(); // a panic caught before this statement is not its
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let observed = observe == Observe::All || index + 1 == program.statements.len();
            run_statement(stmt, &env, program, &devices, observed)
        }));
        match outcome {
            Ok(Outcome::Slot(slot, v)) => {
                env.push(*slot);
                obs.values.extend(v);
            }
            Ok(Outcome::Backward(slot, b)) => {
                env.push(*slot);
                obs.backwards.push(b);
            }
            Ok(Outcome::Failed { kind, message }) => {
                obs.error = Some(RunError {
                    index,
                    statement: stmt.id.clone(),
                    kind,
                    message,
                    location: None,
                });
                break;
            }
            Err(payload) => {
                obs.error = Some(RunError {
                    index,
                    statement: stmt.id.clone(),
                    kind: "panic",
                    message: panic_message(&*payload),
                    location: step::take_panic_location(),
                });
                break;
            }
        }
    }
    obs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FlagSite;

    #[test]
    fn flag_sites() {
        let doc = serde_json::json!({"format": "difftest-program", "version": 1, "statements": [
            {"id": "fc", "kind": "module", "module": "linear",
             "weight": {"shape": [1, 2], "data": [0.5, -1.0]}, "bias": null},
            {"id": "x", "kind": "leaf", "shape": [1, 2], "data": [1.0, 2.0], "device": "autodiff",
             "require_grad": true},
            {"id": "fv", "kind": "transform", "transform": "valid", "input": "fc"},
            {"id": "ft", "kind": "transform", "transform": "train", "input": "fv"},
            {"id": "y1", "kind": "apply", "module": "fc", "input": "x"},
            {"id": "y2", "kind": "apply", "module": "ft", "input": "x"},
            {"id": "d", "kind": "cut", "cut": "detach", "input": "x", "region": "no_grad"},
            {"id": "w", "kind": "cut", "cut": "without_autodiff", "input": "x"},
            {"id": "a", "kind": "cut", "cut": "autodiff", "input": "w"},
            {"id": "e1", "kind": "op", "op": "exp", "inputs": ["x"], "region": "no_grad"},
            {"id": "e2", "kind": "op", "op": "exp", "inputs": ["x"], "region": "inference_mode"},
            {"id": "e3", "kind": "op", "op": "exp", "inputs": ["x"]}
        ]});
        let program = Program::from_json(&doc).unwrap();
        let sites: Vec<Option<FlagSite>> = program
            .statements
            .iter()
            .map(|s| flag_site(s, &program.statements))
            .collect();
        use FlagSite::*;
        assert_eq!(
            sites,
            vec![
                None,
                None,
                None,
                None,
                None,
                Some(Valid),
                Some(Detach),
                Some(WithoutAutodiff),
                Some(Autodiff),
                Some(NoGrad),
                Some(InferenceMode),
                None
            ]
        );
    }

    /// A run observing only its last statement runs the same statements: the same outcome and
    /// the same gradient entries of its last backward, and no values.
    #[test]
    fn observing_the_last_statement_only() {
        let doc = serde_json::json!({"format": "difftest-program", "version": 2, "statements": [
            {"id": "x", "kind": "leaf", "shape": [2], "data": [0.5, -1.5], "device": "autodiff",
             "require_grad": true},
            {"id": "e", "kind": "op", "op": "exp", "inputs": ["x"]},
            {"id": "s", "kind": "op", "op": "sum", "inputs": ["e"]},
            {"id": "bw", "kind": "backward", "input": "s"},
            {"id": "y", "kind": "leaf", "shape": [2], "data": [2.0, 0.25], "device": "autodiff",
             "require_grad": true},
            {"id": "m", "kind": "op", "op": "mul", "inputs": ["y", "y"]},
            {"id": "bw1", "kind": "backward", "input": "m"}
        ]});
        let program = Program::from_json(&doc).unwrap();
        let all = run(&program);
        let last = run_observing(&program, Observe::Last);
        assert!(all.error.is_none() && last.error.is_none());
        assert!(last.values.is_empty(), "{:?}", last.values);
        assert_eq!(all.backwards.len(), 2);
        assert!(last.backwards[0].grads.0.is_empty());
        let json =
            |o: &Observation| serde_json::to_string(&o.backwards.last().unwrap().grads).unwrap();
        assert_eq!(json(&all), json(&last));
    }

    /// A module stepped from a `valid()` handle is still derived from it (the step keeps the
    /// module off autodiff); a step of a plain module is not.
    #[test]
    fn flag_sites_through_steps() {
        let doc = serde_json::json!({"format": "difftest-program", "version": 2, "statements": [
            {"id": "fc", "kind": "module", "module": "linear",
             "weight": {"shape": [1, 2], "data": [0.5, -1.0]}, "bias": null},
            {"id": "x", "kind": "leaf", "shape": [1, 2], "data": [1.0, 2.0], "device": "autodiff",
             "require_grad": true},
            {"id": "s", "kind": "op", "op": "sum", "inputs": ["x"]},
            {"id": "bw", "kind": "backward", "input": "s"},
            {"id": "fv", "kind": "transform", "transform": "valid", "input": "fc"},
            {"id": "o1", "kind": "optimizer", "optimizer": "sgd"},
            {"id": "o2", "kind": "optimizer", "optimizer": "sgd"},
            {"id": "mv", "kind": "step", "optimizer": "o1", "module": "fv", "grads": "bw", "lr": 0.1},
            {"id": "mt", "kind": "step", "optimizer": "o2", "module": "fc", "grads": "bw", "lr": 0.1},
            {"id": "yv", "kind": "apply", "module": "mv", "input": "x"},
            {"id": "yt", "kind": "apply", "module": "mt", "input": "x"},
            {"id": "g", "kind": "grad", "grads": "bw", "of": "x"},
            {"id": "wv", "kind": "param", "module": "mv", "param": "weight"},
            {"id": "wt", "kind": "param", "module": "mt", "param": "weight"}
        ]});
        let program = Program::from_json(&doc).unwrap();
        let site = |id: &str| {
            let s = program.statements.iter().find(|s| s.id == id).unwrap();
            flag_site(s, &program.statements)
        };
        assert_eq!(site("yv"), Some(FlagSite::Valid));
        assert_eq!((site("yt"), site("g")), (None, None));
        let obs = run(&program);
        assert!(obs.error.is_none(), "{:?}", obs.error);
        let flags = |id: &str| obs.values.iter().find(|v| v.id == id).unwrap().flags;
        // The stepped valid() module's weight is still off autodiff; the other's requires grad.
        assert!(!flags("wv").is_autodiff, "{:?}", obs.values);
        assert!(flags("wt").is_require_grad, "{:?}", obs.values);
    }
}
