//! Fault injection for measuring detection power: deliberately wrong behaviours selected at
//! startup with the environment variable `DIFFTEST_BURN_FAULT` (unset or empty: no fault).
//!
//! | spec | effect |
//! |---|---|
//! | `grad-scale:<op>:<eps>` | forward of `<op>` unchanged, its local gradient times `1 + eps` |
//! | `grad-scale-tail:<op>:<eps>:<t>` | like `grad-scale`, only at elements whose input (the op's first, of the result's shape) has `\|x\| > t`: a derivative wrong only in a saturated tail |
//! | `grad-scale-beside-constant:<op>:<eps>` | the gradient of `<op>`'s tracked inputs times `1 + eps` only when another of its inputs is untracked: a backward wrong only beside constants |
//! | `grad-sign:<op>` | gradient through `<op>` negated |
//! | `grad-drop:<op>` | no gradient through `<op>` (its tracked result is detached) |
//! | `flag-without-autodiff` | the `without_autodiff` cut behaves like `detach` |
//! | `detach-like-torch` | `detach` gives a tensor that does not require grad |
//! | `lowering:<op>=<other>` | the unary op `<other>` runs in place of `<op>`; attributes as a JSON object after the name: `lowering:relu=leaky_relu{"slope":0.01}` |
//! | `grad-drop-input:<op>:<i>` | operand `i` of `<op>` is detached when tracked (no gradient reaches it through `<op>`) |
//! | `wrong-dim:<op>` | `<op>` (one with a `dim` attribute) runs along the next dim `(d + k) % rank` of the first input with the same extent as `d`; inert when there is none |
//! | `promote-trailing:<op>` | the lower-rank operand of the binary `<op>` gets trailing size-1 dims instead of leading ones |
//! | `value-scale:<op>:<eps>` | the result of `<op>` times `1 + eps` (forward and gradient) |
//! | `hang:<op>` | `<op>` never returns (the worker sleeps until it is killed) |
//! | `abort:<op>` | the process aborts at `<op>` (a crash) |
//! | `value-shift:<op>:<delta>` | `delta` added to the result of `<op>` (its gradient unchanged): an error that is not relative, as a misplaced epsilon makes |
//! | `kink-grad:<op>:<g>` | `g` added to `<op>`'s derivative where its input is exactly 0, forward unchanged: a changed convention at a kink (`kink-grad:abs:1` gives abs'(0) = 1, a subgradient still) |
//! | `broadcast-grad-scale:<eps>` | the gradient of every operand an op broadcasts implicitly (a binary op's lower-rank or size-1 operand, matmul's batch dims) times `1 + eps`, the op's own derivative exact: a fault in the reduction of broadcast gradients that every broadcasting op shares |
//! | `broadcast-grad-scale:<op>:<eps>` | the same for `<op>`'s operands only: one op's own reduction of a broadcast operand's gradient wrong, every other op's right |
//! | `root-grad-scale:<eps>` | every gradient of a backward times `1 + eps` when its root is not a scalar (more than one element); backwards of scalar roots unchanged |
//! | `flag-after:<where>` | the reported `is_tracked` is negated for the values of a cut (`detach`, `without_autodiff`, `autodiff`), of ops in a region (`no_grad`, `inference_mode`), or of the forward of a module derived from `valid()` (`valid`) |
//! | `on:<backend>:<spec>` | the fault `<spec>` while a program runs on `<backend>` only (a bug in one backend's kernels); other backends run correctly |
//!
//! The gradient faults act on the op's result `y` only when it is tracked:
//! `y + (y - y.detach()) * eps` adds zero forward and scales the gradient by `1 + eps`
//! (`eps = -2` negates it). Two details keep the forward bit-exact: the zero term is added with
//! the sign that preserves `-0.0` (`y - (y.detach() - y) * eps` for `eps > 0`), and positions
//! where `y` is not finite keep `y` unchanged (`inf - inf` would be NaN) and an unscaled gradient.
//! `grad-drop-input` only detaches an operand, which keeps the forward bit-exact too.

use std::sync::OnceLock;

use burn::tensor::Tensor;

use crate::backend::{self, Backend};
use crate::map;
use crate::ops::Op;
use crate::program::Cut;
use crate::value::{DynTensor, Flags};

/// The environment variable that selects a fault.
pub const ENV: &str = "DIFFTEST_BURN_FAULT";

/// The accepted spec forms, for error messages.
pub const FORMS: &str = "grad-scale:<op>:<eps>, grad-scale-tail:<op>:<eps>:<t>, grad-scale-beside-constant:<op>:<eps>, \
grad-sign:<op>, grad-drop:<op>, \
flag-without-autodiff, detach-like-torch, lowering:<op>=<other>[{attrs}], \
grad-drop-input:<op>:<i>, wrong-dim:<op>, promote-trailing:<op>, value-scale:<op>:<eps>, value-shift:<op>:<delta>, kink-grad:<op>:<g>, hang:<op>, abort:<op>, \
broadcast-grad-scale:[<op>:]<eps>, root-grad-scale:<eps>, flag-after:<detach|without_autodiff|autodiff|no_grad|inference_mode|valid>, \
on:<backend>:<any of these>";

#[derive(Clone, Debug)]
pub enum Fault {
    GradScale {
        op: &'static str,
        eps: f64,
    },
    GradScaleTail {
        op: &'static str,
        eps: f64,
        t: f64,
    },
    /// The gradient of an op's tracked inputs scaled by 1 + eps only when another of its
    /// inputs is a constant (untracked): a backward wrong only beside constant inputs.
    GradScaleBesideConstant {
        op: &'static str,
        eps: f64,
    },
    GradSign {
        op: &'static str,
    },
    GradDrop {
        op: &'static str,
    },
    FlagWithoutAutodiff,
    DetachLikeTorch,
    Lowering {
        op: &'static str,
        other: Op,
    },
    GradDropInput {
        op: &'static str,
        index: usize,
    },
    WrongDim {
        op: &'static str,
    },
    PromoteTrailing {
        op: &'static str,
    },
    ValueScale {
        op: &'static str,
        eps: f64,
    },
    ValueShift {
        op: &'static str,
        delta: f64,
    },
    KinkGrad {
        op: &'static str,
        g: f64,
    },
    Hang {
        op: &'static str,
    },
    Abort {
        op: &'static str,
    },
    BroadcastGradScale {
        op: Option<&'static str>,
        eps: f64,
    },
    RootGradScale {
        eps: f64,
    },
    FlagAfter {
        site: FlagSite,
    },
}

/// Where a value comes from, for `flag-after`: a cut, an op in a region, or the forward of a
/// module derived from `valid()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagSite {
    Detach,
    WithoutAutodiff,
    Autodiff,
    NoGrad,
    InferenceMode,
    Valid,
}

impl FlagSite {
    const NAMES: [(&'static str, FlagSite); 6] = [
        ("detach", FlagSite::Detach),
        ("without_autodiff", FlagSite::WithoutAutodiff),
        ("autodiff", FlagSite::Autodiff),
        ("no_grad", FlagSite::NoGrad),
        ("inference_mode", FlagSite::InferenceMode),
        ("valid", FlagSite::Valid),
    ];

    fn parse(name: &str) -> Result<FlagSite, String> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, site)| site)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                format!("flag-after {name:?} is not one of {}", names.join(", "))
            })
    }

    /// The site of a cut's result.
    pub fn of_cut(cut: Cut) -> FlagSite {
        match cut {
            Cut::Detach => FlagSite::Detach,
            Cut::WithoutAutodiff => FlagSite::WithoutAutodiff,
            Cut::Autodiff => FlagSite::Autodiff,
        }
    }
}

/// The active fault and the spec it was parsed from.
#[derive(Clone, Debug)]
pub struct Active {
    pub spec: String,
    pub fault: Fault,
    /// `on:<backend>:`: the only backend the fault acts on (None: every backend).
    pub backend: Option<Backend>,
}

static ACTIVE: OnceLock<Option<Active>> = OnceLock::new();

/// A module forward's output under the active fault: `grad-scale:<kind>:<eps>` scales the
/// gradient through the forward of every module of that kind (its whole backward path: the
/// input's and the parameters' gradients), keeping the forward bit-exact.
pub fn module_forward(kind: &str, y: DynTensor) -> DynTensor {
    match active().map(|a| &a.fault) {
        Some(Fault::GradScale { op, eps }) if *op == kind && y.flags().is_tracked => {
            map!(y, t => scale_grad(t, *eps))
        }
        _ => y,
    }
}

/// The root a backward starts from under `fault`: `root-grad-scale:<eps>` puts a node that
/// scales the gradient by `1 + eps` on a tracked root of more than one element, so every
/// gradient the backward reports (the root's own included) is scaled; a scalar root, and
/// every root under other faults, is unchanged. Only root probes and programs whose backward
/// is rooted at a non-scalar value see this fault.
pub fn backward_root_with(fault: Option<&Fault>, root: DynTensor) -> DynTensor {
    match fault {
        Some(Fault::RootGradScale { eps })
            if root.flags().is_tracked && root.dims().iter().product::<usize>() > 1 =>
        {
            map!(root, t => scale_grad(t, *eps))
        }
        _ => root,
    }
}

/// The backward-root hook under the active fault.
pub fn backward_root(root: DynTensor) -> DynTensor {
    backward_root_with(active().map(|a| &a.fault), root)
}

/// Reads `DIFFTEST_BURN_FAULT` once; an unknown spec is an error (the caller exits).
pub fn init_from_env() -> Result<(), String> {
    let active = match std::env::var(ENV) {
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(v)) => {
            return Err(format!("{ENV}={v:?} is not valid UTF-8"));
        }
        Ok(spec) if spec.is_empty() => None,
        Ok(spec) => {
            let (backend, fault) = parse_scoped(&spec).map_err(|e| format!("{ENV}: {e}"))?;
            Some(Active {
                spec,
                fault,
                backend,
            })
        }
    };
    ACTIVE
        .set(active)
        .map_err(|_| "the fault was already initialised".to_string())
}

/// The active fault, if any (none when [`init_from_env`] was not called, as in unit tests, and
/// none while running on another backend than the one a scoped fault names).
pub fn active() -> Option<&'static Active> {
    ACTIVE
        .get()
        .and_then(Option::as_ref)
        .filter(|a| a.acts_on(backend::current()))
}

impl Active {
    /// Whether the fault acts on `backend` (a scoped fault on its backend alone).
    pub fn acts_on(&self, backend: Backend) -> bool {
        self.backend.is_none_or(|b| b == backend)
    }
}

/// The spec the process was started with (scoped or not), for the version reports.
pub fn spec() -> Option<&'static str> {
    ACTIVE
        .get()
        .and_then(Option::as_ref)
        .map(|a| a.spec.as_str())
}

/// `y` with its forward unchanged and its gradient multiplied by `1 + eps` (when tracked).
fn scale_grad<const D: usize>(y: Tensor<D>, eps: f64) -> Tensor<D> {
    let d = y.clone().detach();
    let finite = d.clone().is_finite();
    // `x - x` is +0.0: subtracting +0.0 (eps > 0) or adding -0.0 (eps < 0) keeps every y,
    // -0.0 included.
    let scaled = if eps > 0.0 {
        y.clone() - (d - y.clone()).mul_scalar(eps)
    } else {
        y.clone() + (y.clone() - d).mul_scalar(eps)
    };
    y.mask_where(finite, scaled)
}

/// `y` with its gradient times `1 + eps` where `|x| > t` (`x` detached, of `y`'s shape;
/// otherwise `y` unchanged), the forward bit-exact as in [`scale_grad`].
fn scale_grad_tail(y: DynTensor, x: &DynTensor, eps: f64, t: f64) -> DynTensor {
    fn masked<const D: usize>(y: Tensor<D>, x: Tensor<D>, eps: f64, t: f64) -> Tensor<D> {
        if x.dims() != y.dims() {
            return y;
        }
        let d = y.clone().detach();
        let keep = x
            .detach()
            .abs()
            .greater_elem(t)
            .bool_and(d.clone().is_finite());
        let delta = if eps > 0.0 {
            (d - y.clone()).mul_scalar(-eps)
        } else {
            (y.clone() - d).mul_scalar(eps)
        };
        // `delta` is -0.0 forward in both branches, and so is the fill outside the tail:
        // adding -0.0 keeps every y, +0.0 and -0.0 included
        y + delta.mask_fill(keep.bool_not(), -0.0)
    }
    match (y, x) {
        (DynTensor::R1(y), DynTensor::R1(x)) => DynTensor::R1(masked(y, x.clone(), eps, t)),
        (DynTensor::R2(y), DynTensor::R2(x)) => DynTensor::R2(masked(y, x.clone(), eps, t)),
        (DynTensor::R3(y), DynTensor::R3(x)) => DynTensor::R3(masked(y, x.clone(), eps, t)),
        (DynTensor::R4(y), DynTensor::R4(x)) => DynTensor::R4(masked(y, x.clone(), eps, t)),
        (y, _) => y,
    }
}

/// `y` with `g` added to its derivative with respect to `x` (tracked, of `y`'s shape) where `x`
/// is exactly 0; the forward bit-exact: the added term is -0.0 everywhere, as in
/// [`scale_grad_tail`].
fn kink_grad(y: DynTensor, x: &DynTensor, g: f64) -> DynTensor {
    fn at_zero<const D: usize>(y: Tensor<D>, x: Tensor<D>, g: f64) -> Tensor<D> {
        if x.dims() != y.dims() {
            return y;
        }
        let d = x.clone().detach();
        let elsewhere = d.clone().not_equal_elem(0.0);
        let delta = if g > 0.0 {
            (d - x).mul_scalar(-g)
        } else {
            (x - d).mul_scalar(g)
        };
        y + delta.mask_fill(elsewhere, -0.0)
    }
    match (y, x) {
        (DynTensor::R1(y), DynTensor::R1(x)) => DynTensor::R1(at_zero(y, x.clone(), g)),
        (DynTensor::R2(y), DynTensor::R2(x)) => DynTensor::R2(at_zero(y, x.clone(), g)),
        (DynTensor::R3(y), DynTensor::R3(x)) => DynTensor::R3(at_zero(y, x.clone(), g)),
        (DynTensor::R4(y), DynTensor::R4(x)) => DynTensor::R4(at_zero(y, x.clone(), g)),
        (y, _) => y,
    }
}

/// `op` along the next dim of the same extent: the first `e` of `(d + 1) % rank`,
/// `(d + 2) % rank`, … with `x[e] == x[d]` (`x` the first input's shape), or `None` (inert).
/// Same-shape ops (softmax, cumsum, …) and gather keep their output shape; for the others the
/// output shape follows the dim (a keepdim reduction's size-1 dim moves).
fn wrong_dim(op: &Op, inputs: &[DynTensor]) -> Option<Op> {
    let d = op.dim()?;
    let x = inputs.first()?.dims();
    let rank = x.len();
    let extent = *x.get(d)?;
    let e = (1..rank)
        .map(|k| (d + k) % rank)
        .find(|&e| x[e] == extent)?;
    op.with_dim(e)
}

/// Two operands of different ranks at the same rank, the lower-rank one with *trailing*
/// size-1 dims (burn adds leading ones).
fn promote_trailing(mut inputs: Vec<DynTensor>) -> Vec<DynTensor> {
    let rank = inputs.iter().map(DynTensor::rank).max().unwrap_or(0);
    for x in &mut inputs {
        if x.rank() < rank {
            let mut dims = x.dims();
            dims.resize(rank, 1);
            *x = x.clone().reshape(&dims);
        }
    }
    inputs
}

/// The ops that broadcast their operands elementwise (the catalog's `BROADCASTING` partners,
/// difftest/ops/sampling.py): the `broadcast-grad-scale` fault acts on their operands.
const ELEMENTWISE_BROADCASTING: [&str; 10] = [
    "add",
    "sub",
    "mul",
    "div",
    "powf",
    "maximum",
    "minimum",
    "atan2",
    "hypot",
    "remainder",
];

/// Which of `op`'s operands it broadcasts implicitly: for the elementwise binary ops, those whose
/// shape (rank included) is not the result's; for matmul, those whose batch dims are not the
/// broadcast of both. All false for every other op.
fn broadcast_operands(op: &Op, inputs: &[DynTensor]) -> Vec<bool> {
    let dims: Vec<Vec<usize>> = inputs.iter().map(DynTensor::dims).collect();
    let explicit = |own: &dyn Fn(&[usize]) -> &[usize]| -> Vec<bool> {
        let out = dims.iter().try_fold(Vec::new(), |acc, d| {
            crate::ops::shape::broadcast_shapes(&acc, own(d))
        });
        dims.iter()
            .map(|d| out.as_deref().is_some_and(|o| o != own(d)))
            .collect()
    };
    match op {
        Op::Matmul {} => explicit(&|d| &d[..d.len().saturating_sub(2)]),
        _ if ELEMENTWISE_BROADCASTING.contains(&op.name()) => explicit(&|d| d),
        _ => vec![false; inputs.len()],
    }
}

/// Runs `op` under `fault`: the hook around an op's execution.
pub fn execute_with(fault: Option<&Fault>, op: &Op, mut inputs: Vec<DynTensor>) -> DynTensor {
    let name = op.name();
    let grad_eps = match fault {
        Some(Fault::Lowering { op: target, other }) if *target == name => {
            return other.execute(inputs);
        }
        Some(Fault::GradDropInput { op: target, index }) if *target == name => {
            if let Some(x) = inputs.get_mut(*index).filter(|x| x.flags().is_tracked) {
                *x = x.clone().detach();
            }
            return op.execute(inputs);
        }
        Some(Fault::WrongDim { op: target }) if *target == name => {
            return match wrong_dim(op, &inputs) {
                Some(other) => other.execute(inputs),
                None => op.execute(inputs),
            };
        }
        Some(Fault::PromoteTrailing { op: target }) if *target == name => {
            return op.execute(promote_trailing(inputs));
        }
        Some(Fault::ValueScale { op: target, eps }) if *target == name => {
            return map!(op.execute(inputs), t => t.mul_scalar(1.0 + eps));
        }
        Some(Fault::Hang { op: target }) if *target == name => loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        },
        Some(Fault::Abort { op: target }) if *target == name => std::process::abort(),
        Some(Fault::ValueShift { op: target, delta }) if *target == name => {
            return map!(op.execute(inputs), t => t.add_scalar(*delta));
        }
        Some(Fault::BroadcastGradScale { op: target, eps }) if target.is_none_or(|t| t == name) => {
            let broadcast = broadcast_operands(op, &inputs);
            for (x, _) in inputs
                .iter_mut()
                .zip(broadcast)
                .filter(|(x, b)| *b && x.flags().is_tracked)
            {
                *x = map!(x.clone(), t => scale_grad(t, *eps));
            }
            return op.execute(inputs);
        }
        Some(Fault::GradScaleBesideConstant { op: target, eps }) if *target == name => {
            if inputs.iter().any(|x| !x.flags().is_tracked) {
                for x in inputs.iter_mut().filter(|x| x.flags().is_tracked) {
                    *x = map!(x.clone(), t => scale_grad(t, *eps));
                }
            }
            return op.execute(inputs);
        }
        Some(Fault::GradScale { op: target, eps }) if *target == name => Some(*eps),
        Some(Fault::GradScaleTail { op: target, eps, t }) if *target == name => {
            let x = inputs.first().cloned();
            let y = op.execute(inputs);
            return match x {
                Some(x) if y.flags().is_tracked => scale_grad_tail(y, &x, *eps, *t),
                _ => y,
            };
        }
        Some(Fault::KinkGrad { op: target, g }) if *target == name => {
            let x = inputs.first().cloned();
            let y = op.execute(inputs);
            return match x {
                Some(x) if x.flags().is_tracked => kink_grad(y, &x, *g),
                _ => y,
            };
        }
        Some(Fault::GradSign { op: target }) if *target == name => Some(-2.0),
        Some(Fault::GradDrop { op: target }) if *target == name => {
            let y = op.execute(inputs);
            return if y.flags().is_tracked { y.detach() } else { y };
        }
        _ => None,
    };
    let y = op.execute(inputs);
    match grad_eps {
        Some(eps) if y.flags().is_tracked => map!(y, t => scale_grad(t, eps)),
        _ => y,
    }
}

/// Runs `op` under the active fault.
pub fn execute(op: &Op, inputs: Vec<DynTensor>) -> DynTensor {
    execute_with(active().map(|a| &a.fault), op, inputs)
}

/// The cut hook: the faulty result of `cut` on `t`, or `None` to run the cut normally.
pub fn cut_with(fault: Option<&Fault>, cut: Cut, t: &DynTensor) -> Option<DynTensor> {
    match (fault, cut) {
        (Some(Fault::FlagWithoutAutodiff), Cut::WithoutAutodiff) => Some(t.clone().detach()),
        (Some(Fault::DetachLikeTorch), Cut::Detach) => {
            Some(map!(t.clone(), x => x.detach().set_require_grad(false)))
        }
        _ => None,
    }
}

/// The cut hook under the active fault.
pub fn cut(cut: Cut, t: &DynTensor) -> Option<DynTensor> {
    cut_with(active().map(|a| &a.fault), cut, t)
}

/// The flags reported for a value from `site` under `fault` (`flag-after` negates
/// `is_tracked`; the tensor itself is unchanged).
pub fn reported_flags_with(fault: Option<&Fault>, site: Option<FlagSite>, flags: Flags) -> Flags {
    match fault {
        Some(Fault::FlagAfter { site: at }) if Some(*at) == site => Flags {
            is_tracked: !flags.is_tracked,
            ..flags
        },
        _ => flags,
    }
}

/// The reported-flags hook under the active fault.
pub fn reported_flags(site: Option<FlagSite>, flags: Flags) -> Flags {
    reported_flags_with(active().map(|a| &a.fault), site, flags)
}

#[path = "fault_spec.rs"]
mod parsing;
#[cfg(test)]
use parsing::parse;
use parsing::parse_scoped;

#[cfg(test)]
#[path = "fault_tests.rs"]
mod tests;
