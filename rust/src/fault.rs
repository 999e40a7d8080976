//! Fault injection for measuring detection power: deliberately wrong behaviours selected at
//! startup with the environment variable `DIFFTEST_BURN_FAULT` (unset or empty: no fault).
//!
//! | spec | effect |
//! |---|---|
//! | `grad-scale:<op>:<eps>` | forward of `<op>` unchanged, its local gradient times `1 + eps` |
//! | `grad-sign:<op>` | gradient through `<op>` negated |
//! | `grad-drop:<op>` | no gradient through `<op>` (its tracked result is detached) |
//! | `flag-without-autodiff` | the `without_autodiff` cut behaves like `detach` |
//! | `detach-like-torch` | `detach` gives a tensor that does not require grad |
//! | `lowering:<op>=<other>` | the unary op `<other>` runs in place of `<op>`; attributes as a JSON object after the name: `lowering:relu=leaky_relu{"slope":0.01}` |
//! | `grad-drop-input:<op>:<i>` | operand `i` of `<op>` is detached when tracked (no gradient reaches it through `<op>`) |
//! | `wrong-dim:<op>` | `<op>` (one with a `dim` attribute) runs along the next dim `(d + k) % rank` of the first input with the same extent as `d`; inert when there is none |
//! | `promote-trailing:<op>` | the lower-rank operand of the binary `<op>` gets trailing size-1 dims instead of leading ones |
//! | `value-scale:<op>:<eps>` | the result of `<op>` times `1 + eps` (forward and gradient) |
//! | `flag-after:<where>` | the reported `is_tracked` is negated for the values of a cut (`detach`, `without_autodiff`, `autodiff`), of ops in a region (`no_grad`, `inference_mode`), or of the forward of a module derived from `valid()` (`valid`) |
//!
//! The gradient faults act on the op's result `y` only when it is tracked:
//! `y + (y - y.detach()) * eps` adds zero forward and scales the gradient by `1 + eps`
//! (`eps = -2` negates it). Two details keep the forward bit-exact: the zero term is added with
//! the sign that preserves `-0.0` (`y - (y.detach() - y) * eps` for `eps > 0`), and positions
//! where `y` is not finite keep `y` unchanged (`inf - inf` would be NaN) and an unscaled gradient.
//! `grad-drop-input` only detaches an operand, which keeps the forward bit-exact too.

use std::sync::OnceLock;

use burn::tensor::Tensor;
use serde_json::{Map, Value};

use crate::map;
use crate::ops::{NARY, Op};
use crate::program::Cut;
use crate::value::{DynTensor, Flags};

/// The environment variable that selects a fault.
pub const ENV: &str = "DIFFTEST_BURN_FAULT";

/// The accepted spec forms, for error messages.
pub const FORMS: &str = "grad-scale:<op>:<eps>, grad-sign:<op>, grad-drop:<op>, \
flag-without-autodiff, detach-like-torch, lowering:<op>=<other>[{attrs}], \
grad-drop-input:<op>:<i>, wrong-dim:<op>, promote-trailing:<op>, value-scale:<op>:<eps>, \
flag-after:<detach|without_autodiff|autodiff|no_grad|inference_mode|valid>";

#[derive(Clone, Debug)]
pub enum Fault {
    GradScale { op: &'static str, eps: f64 },
    GradSign { op: &'static str },
    GradDrop { op: &'static str },
    FlagWithoutAutodiff,
    DetachLikeTorch,
    Lowering { op: &'static str, other: Op },
    GradDropInput { op: &'static str, index: usize },
    WrongDim { op: &'static str },
    PromoteTrailing { op: &'static str },
    ValueScale { op: &'static str, eps: f64 },
    FlagAfter { site: FlagSite },
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
}

static ACTIVE: OnceLock<Option<Active>> = OnceLock::new();

/// The catalog name of `name`, or an error naming the spec part.
fn catalog_op(name: &str, what: &str) -> Result<&'static str, String> {
    Op::ALL
        .iter()
        .find(|d| d.name == name)
        .map(|d| d.name)
        .ok_or_else(|| format!("{what} {name:?} is not a catalog op"))
}

/// The module kinds a `grad-scale` fault can target (the forward of a module of that kind).
pub const MODULE_KINDS: [&str; 8] = [
    "linear",
    "dropout",
    "batch_norm",
    "layer_norm",
    "rms_norm",
    "group_norm",
    "conv2d",
    "embedding", // also a catalog op: the fault then targets both
];

/// The catalog name of `name` or a module kind's, or an error naming the spec part.
fn catalog_op_or_module(name: &str, what: &str) -> Result<&'static str, String> {
    catalog_op(name, what).or_else(|e| {
        MODULE_KINDS
            .iter()
            .find(|k| **k == name)
            .copied()
            .ok_or_else(|| format!("{e} or module kind"))
    })
}

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

/// The arity of the catalog op `op` (`NARY` for n-ary ops).
fn arity_of(op: &str) -> i32 {
    Op::ALL.iter().find(|d| d.name == op).map_or(0, |d| d.arity)
}

/// A finite float (the `eps` of `grad-scale` and `value-scale`).
fn finite_eps(eps: &str, what: &str) -> Result<f64, String> {
    let x: f64 = eps
        .parse()
        .map_err(|_| format!("{what} eps {eps:?} is not a number"))?;
    if x.is_finite() {
        Ok(x)
    } else {
        Err(format!("{what} eps {x} is not finite"))
    }
}

/// Parses `<op>=<other>` or `<op>=<other>{attrs}` (a JSON object of `<other>`'s attributes).
fn parse_lowering(pair: &str) -> Result<Fault, String> {
    let (op, other) = pair
        .split_once('=')
        .ok_or_else(|| format!("lowering needs <op>=<other>, got {pair:?}"))?;
    let op = catalog_op(op, "lowering op")?;
    if arity_of(op) != 1 {
        return Err(format!("lowering op {op:?} is not unary"));
    }
    let (name, attrs) = match other.find('{') {
        None => (other, Map::new()),
        Some(i) => {
            let attrs: Value = serde_json::from_str(&other[i..])
                .map_err(|e| format!("lowering attributes {:?}: {e}", &other[i..]))?;
            match attrs {
                Value::Object(m) => (&other[..i], m),
                _ => unreachable!("the text starts with '{{'"),
            }
        }
    };
    let other =
        Op::parse(name, &attrs).map_err(|e| format!("lowering replacement {name:?}: {e}"))?;
    if other.arity() != 1 {
        return Err(format!(
            "lowering replacement {:?} is not unary",
            other.name()
        ));
    }
    Ok(Fault::Lowering { op, other })
}

/// Parses a fault spec (see the module documentation).
pub fn parse(spec: &str) -> Result<Fault, String> {
    if let Some(pair) = spec.strip_prefix("lowering:") {
        return parse_lowering(pair);
    }
    let parts: Vec<&str> = spec.split(':').collect();
    match parts.as_slice() {
        ["grad-scale", op, eps] => Ok(Fault::GradScale {
            op: catalog_op_or_module(op, "grad-scale op")?,
            eps: finite_eps(eps, "grad-scale")?,
        }),
        ["value-scale", op, eps] => Ok(Fault::ValueScale {
            op: catalog_op(op, "value-scale op")?,
            eps: finite_eps(eps, "value-scale")?,
        }),
        ["grad-drop-input", op, index] => {
            let op = catalog_op(op, "grad-drop-input op")?;
            let index: usize = index
                .parse()
                .map_err(|_| format!("grad-drop-input index {index:?} is not an integer >= 0"))?;
            let arity = arity_of(op);
            if arity != NARY && index >= arity as usize {
                return Err(format!(
                    "grad-drop-input index {index} is out of range: {op:?} takes {arity} input(s)"
                ));
            }
            Ok(Fault::GradDropInput { op, index })
        }
        ["wrong-dim", op] => {
            let op = catalog_op(op, "wrong-dim op")?;
            if !Op::attr_names(op).is_some_and(|names| names.contains(&"dim")) {
                return Err(format!("wrong-dim op {op:?} has no \"dim\" attribute"));
            }
            Ok(Fault::WrongDim { op })
        }
        ["promote-trailing", op] => {
            let op = catalog_op(op, "promote-trailing op")?;
            if arity_of(op) != 2 {
                return Err(format!("promote-trailing op {op:?} is not binary"));
            }
            Ok(Fault::PromoteTrailing { op })
        }
        ["flag-after", site] => Ok(Fault::FlagAfter {
            site: FlagSite::parse(site)?,
        }),
        ["grad-sign", op] => Ok(Fault::GradSign {
            op: catalog_op(op, "grad-sign op")?,
        }),
        ["grad-drop", op] => Ok(Fault::GradDrop {
            op: catalog_op(op, "grad-drop op")?,
        }),
        ["flag-without-autodiff"] => Ok(Fault::FlagWithoutAutodiff),
        ["detach-like-torch"] => Ok(Fault::DetachLikeTorch),
        _ => Err(format!(
            "unknown fault spec {spec:?} (expected one of: {FORMS})"
        )),
    }
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
            let fault = parse(&spec).map_err(|e| format!("{ENV}: {e}"))?;
            Some(Active { spec, fault })
        }
    };
    ACTIVE
        .set(active)
        .map_err(|_| "the fault was already initialised".to_string())
}

/// The active fault, if any (none when [`init_from_env`] was not called, as in unit tests).
pub fn active() -> Option<&'static Active> {
    ACTIVE.get().and_then(Option::as_ref)
}

/// The active spec, for the version reports.
pub fn spec() -> Option<&'static str> {
    active().map(|a| a.spec.as_str())
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
        Some(Fault::GradScale { op: target, eps }) if *target == name => Some(*eps),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply;
    use burn::tensor::Device;

    #[test]
    fn parses_every_form() {
        assert!(matches!(
            parse("grad-scale:tanh:1e-3"),
            Ok(Fault::GradScale { op: "tanh", eps }) if eps == 1e-3
        ));
        assert!(matches!(
            parse("grad-sign:matmul"),
            Ok(Fault::GradSign { op: "matmul" })
        ));
        assert!(matches!(
            parse("grad-drop:exp"),
            Ok(Fault::GradDrop { op: "exp" })
        ));
        assert!(matches!(
            parse("flag-without-autodiff"),
            Ok(Fault::FlagWithoutAutodiff)
        ));
        assert!(matches!(
            parse("detach-like-torch"),
            Ok(Fault::DetachLikeTorch)
        ));
        match parse("lowering:tanh=sigmoid") {
            Ok(Fault::Lowering { op: "tanh", other }) => assert_eq!(other.name(), "sigmoid"),
            other => panic!("{other:?}"),
        }
        match parse(r#"lowering:relu=leaky_relu{"slope":0.01}"#) {
            Ok(Fault::Lowering {
                op: "relu",
                other: Op::LeakyRelu { slope },
            }) => assert_eq!(slope, 0.01),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse("grad-drop-input:matmul:1"),
            Ok(Fault::GradDropInput {
                op: "matmul",
                index: 1
            })
        ));
        assert!(matches!(
            parse("grad-drop-input:cat:7"),
            Ok(Fault::GradDropInput {
                op: "cat",
                index: 7
            })
        ));
        assert!(matches!(
            parse("wrong-dim:softmax"),
            Ok(Fault::WrongDim { op: "softmax" })
        ));
        assert!(matches!(
            parse("promote-trailing:add"),
            Ok(Fault::PromoteTrailing { op: "add" })
        ));
        assert!(matches!(
            parse("value-scale:mean:-0.25"),
            Ok(Fault::ValueScale { op: "mean", eps }) if eps == -0.25
        ));
        for (name, site) in FlagSite::NAMES {
            assert!(
                matches!(parse(&format!("flag-after:{name}")), Ok(Fault::FlagAfter { site: s }) if s == site),
                "{name}"
            );
        }
    }

    #[test]
    fn rejects_bad_specs() {
        for spec in [
            "",
            "nope",
            "grad-scale:tanh",
            "grad-scale:tanh:abc",
            "grad-scale:tanh:inf",
            "grad-scale:frob:1e-3",
            "grad-sign",
            "grad-sign:tanh:1",
            "grad-drop:frob",
            "flag-without-autodiff:x",
            "lowering:tanh",
            "lowering:tanh=frob",
            "lowering:add=sigmoid",
            "lowering:tanh=add",
            "lowering:tanh=leaky_relu",
            "lowering:tanh=leaky_relu{",
            r#"lowering:tanh=leaky_relu{"slope":"x"}"#,
            r#"lowering:tanh=leaky_relu{"slope":0.1,"extra":1}"#,
            r#"lowering:tanh=leaky_relu{"slope":0.1}x"#,
            r#"lowering:tanh=leaky_relu[1]"#,
            "lowering:tanh=sigmoid{}x",
            "grad-drop-input:matmul",
            "grad-drop-input:matmul:2",
            "grad-drop-input:exp:1",
            "grad-drop-input:matmul:-1",
            "grad-drop-input:matmul:x",
            "grad-drop-input:frob:0",
            "wrong-dim:exp",
            "wrong-dim:swap_dims",
            "wrong-dim:frob",
            "wrong-dim",
            "promote-trailing:exp",
            "promote-trailing:cat",
            "promote-trailing:add:1",
            "value-scale:mean",
            "value-scale:mean:x",
            "value-scale:mean:nan",
            "value-scale:frob:0.1",
            "flag-after",
            "flag-after:grad",
            "flag-after:detach:x",
        ] {
            assert!(parse(spec).is_err(), "{spec:?} parsed");
        }
        let e = parse("nope").unwrap_err();
        assert!(e.contains("grad-scale:<op>:<eps>"), "{e}");
    }

    fn leaf(data: Vec<f32>) -> DynTensor {
        let device = Device::flex().autodiff();
        let n = data.len();
        DynTensor::from_f32(data, &[n], &device).require_grad()
    }

    fn grad(x: &DynTensor, y: DynTensor) -> Vec<f32> {
        let DynTensor::R1(y) = y else { panic!() };
        let DynTensor::R1(x) = x else { panic!() };
        let grads = y.sum().backward();
        x.grad(&grads).unwrap().try_to_vec_as::<f32>().unwrap()
    }

    #[test]
    fn grad_faults_keep_the_forward() {
        let tanh = Op::parse("tanh", &Map::new()).unwrap();
        let data = vec![-0.0, 0.5, -2.0];
        let x = leaf(data.clone());
        let clean = execute_with(None, &tanh, vec![x.clone()]);
        let g_clean = grad(&x, clean.clone());
        for (spec, factor) in [("grad-scale:tanh:1e-3", 1.001f32), ("grad-sign:tanh", -1.0)] {
            let fault = parse(spec).unwrap();
            let x = leaf(data.clone());
            let y = execute_with(Some(&fault), &tanh, vec![x.clone()]);
            let (_, a) = y.read();
            let (_, b) = clean.read();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "{spec}: forward changed");
            assert_eq!(y.flags(), clean.flags(), "{spec}");
            let g = grad(&x, y);
            for (g, c) in g.iter().zip(&g_clean) {
                assert!(
                    (g - c * factor).abs() <= 1e-6 * c.abs(),
                    "{spec}: {g} vs {c}"
                );
            }
        }
        let drop = parse("grad-drop:tanh").unwrap();
        let y = execute_with(Some(&drop), &tanh, vec![leaf(data)]);
        assert!(!y.flags().is_tracked);
    }

    #[test]
    fn cut_faults() {
        let x = leaf(vec![1.0, 2.0]);
        assert!(cut_with(None, Cut::Detach, &x).is_none());
        let f = parse("detach-like-torch").unwrap();
        let d = cut_with(Some(&f), Cut::Detach, &x).unwrap();
        assert!(d.flags().is_autodiff && !d.flags().is_tracked && !d.flags().is_require_grad);
        let f = parse("flag-without-autodiff").unwrap();
        let w = cut_with(Some(&f), Cut::WithoutAutodiff, &x).unwrap();
        assert!(w.flags().is_autodiff);
        assert!(cut_with(Some(&f), Cut::Detach, &x).is_none());
    }

    fn leaf_nd(data: Vec<f32>, shape: &[usize]) -> DynTensor {
        DynTensor::from_f32(data, shape, &Device::flex().autodiff()).require_grad()
    }

    /// The gradients of `sum(y)` at each of `xs` (any ranks), or `None`.
    fn grads_nd(xs: &[&DynTensor], y: &DynTensor) -> Vec<Option<Vec<f32>>> {
        let grads = apply!(y.clone(), t => t.sum().backward());
        xs.iter()
            .map(|x| apply!(x, t => t.grad(&grads).map(|g| g.try_to_vec_as::<f32>().unwrap())))
            .collect()
    }

    fn grad_nd(x: &DynTensor, y: &DynTensor) -> Option<Vec<f32>> {
        grads_nd(&[x], y).remove(0)
    }

    fn data(t: &DynTensor) -> Vec<f32> {
        t.read().1
    }

    #[test]
    fn grad_drop_input() {
        let matmul = Op::parse("matmul", &Map::new()).unwrap();
        let fault = parse("grad-drop-input:matmul:1").unwrap();
        let leaves = || {
            (
                leaf_nd(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]),
                leaf_nd(vec![0.5, -1.0, 2.0, 0.25], &[2, 2]),
            )
        };
        let (a0, b0) = leaves();
        let clean = execute_with(None, &matmul, vec![a0.clone(), b0.clone()]);
        let (a, b) = leaves();
        let y = execute_with(Some(&fault), &matmul, vec![a.clone(), b.clone()]);
        assert_eq!(data(&y), data(&clean));
        assert_eq!(y.flags(), clean.flags());
        let g_clean = grads_nd(&[&a0, &b0], &clean);
        assert!(g_clean.iter().all(Option::is_some));
        let g = grads_nd(&[&a, &b], &y);
        assert_eq!(g[0], g_clean[0]);
        assert_eq!(g[1], None);
        // Variadic: an index past the inputs is inert.
        let cat = Op::parse(
            "cat",
            &serde_json::json!({"dim": 0}).as_object().unwrap().clone(),
        )
        .unwrap();
        let fault = parse("grad-drop-input:cat:3").unwrap();
        let y = execute_with(Some(&fault), &cat, vec![a.clone()]);
        assert!(grad_nd(&a, &y).is_some());
    }

    fn with_dim(name: &str, dim: usize) -> Op {
        let attrs = serde_json::json!({"dim": dim});
        Op::parse(name, attrs.as_object().unwrap()).unwrap()
    }

    #[test]
    fn wrong_dim_keeps_the_shape() {
        let fault = parse("wrong-dim:softmax").unwrap();
        let x = leaf_nd(vec![1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 0.0, -1.0, 2.0], &[3, 3]);
        let y = execute_with(Some(&fault), &with_dim("softmax", 0), vec![x.clone()]);
        let along_1 = execute_with(None, &with_dim("softmax", 1), vec![x.clone()]);
        assert_eq!(data(&y), data(&along_1));
        // [2, 3, 2]: dim 0 has extent 2 and so has dim 2 (the next one of that extent).
        let x = leaf_nd((0..12).map(|i| i as f32).collect(), &[2, 3, 2]);
        let fault = parse("wrong-dim:sum_dim").unwrap();
        let y = execute_with(Some(&fault), &with_dim("sum_dim", 0), vec![x.clone()]);
        assert_eq!(y.dims(), vec![2, 3, 1]); // summed along dim 2 instead
        let y = execute_with(Some(&fault), &with_dim("sum_dim", 1), vec![x.clone()]);
        assert_eq!(y.dims(), vec![2, 1, 2], "no other dim of extent 3: inert");
        let fault = parse("wrong-dim:cumsum").unwrap();
        let y = execute_with(Some(&fault), &with_dim("cumsum", 0), vec![x.clone()]);
        let clean = execute_with(None, &with_dim("cumsum", 2), vec![x.clone()]);
        assert_eq!(data(&y), data(&clean));
        // unsqueeze at the end (dim = rank) has no extent: inert.
        let fault = parse("wrong-dim:unsqueeze").unwrap();
        let x = leaf_nd(vec![1.0; 4], &[2, 2]);
        let y = execute_with(Some(&fault), &with_dim("unsqueeze", 2), vec![x.clone()]);
        assert_eq!(y.dims(), vec![2, 2, 1]);
        let y = execute_with(Some(&fault), &with_dim("unsqueeze", 0), vec![x]);
        assert_eq!(y.dims(), vec![2, 1, 2]);
    }

    #[test]
    fn promote_trailing() {
        let add = Op::parse("add", &Map::new()).unwrap();
        let fault = parse("promote-trailing:add").unwrap();
        let a = leaf_nd(vec![10.0, 20.0], &[2]);
        let b = leaf_nd(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let y = execute_with(Some(&fault), &add, vec![a.clone(), b.clone()]);
        assert_eq!(y.dims(), vec![2, 3]);
        assert_eq!(data(&y), vec![11.0, 12.0, 13.0, 24.0, 25.0, 26.0]);
        assert_eq!(grad_nd(&a, &y), Some(vec![3.0, 3.0]));
        // Equal ranks: unchanged.
        let c = leaf_nd(vec![1.0, 2.0, 3.0], &[3]);
        let y = execute_with(Some(&fault), &add, vec![c.clone(), c.clone()]);
        assert_eq!(data(&y), vec![2.0, 4.0, 6.0]);
    }

    #[test]
    fn value_scale() {
        let mean = Op::parse("mean", &Map::new()).unwrap();
        let fault = parse("value-scale:mean:-0.25").unwrap();
        let x = leaf_nd(vec![1.0, 2.0, 3.0, 6.0], &[4]);
        let y = execute_with(Some(&fault), &mean, vec![x.clone()]);
        assert_eq!(data(&y), vec![2.25]);
        assert_eq!(grad_nd(&x, &y), Some(vec![0.1875; 4]));
        let lowering = parse(r#"lowering:relu=leaky_relu{"slope":0.5}"#).unwrap();
        let relu = Op::parse("relu", &Map::new()).unwrap();
        let y = execute_with(Some(&lowering), &relu, vec![leaf_nd(vec![-2.0, 3.0], &[2])]);
        assert_eq!(data(&y), vec![-1.0, 3.0]);
    }

    #[test]
    fn flag_after_changes_only_the_report() {
        let flags = Flags {
            is_autodiff: true,
            is_tracked: false,
            is_require_grad: false,
        };
        let f = parse("flag-after:detach").unwrap();
        let flipped = reported_flags_with(Some(&f), Some(FlagSite::Detach), flags);
        assert_eq!(
            flipped,
            Flags {
                is_tracked: true,
                ..flags
            }
        );
        assert_eq!(
            reported_flags_with(Some(&f), Some(FlagSite::Valid), flags),
            flags
        );
        assert_eq!(reported_flags_with(Some(&f), None, flags), flags);
        assert_eq!(
            reported_flags_with(None, Some(FlagSite::Detach), flags),
            flags
        );
    }
}
