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
//! | `lowering:<op>=<other>` | the unary op `<other>` (no attributes) runs in place of `<op>` |
//!
//! The gradient faults act on the op's result `y` only when it is tracked:
//! `y + (y - y.detach()) * eps` adds zero forward and scales the gradient by `1 + eps`
//! (`eps = -2` negates it). Two details keep the forward bit-exact: the zero term is added with
//! the sign that preserves `-0.0` (`y - (y.detach() - y) * eps` for `eps > 0`), and positions
//! where `y` is not finite keep `y` unchanged (`inf - inf` would be NaN) and an unscaled gradient.

use std::sync::OnceLock;

use burn::tensor::Tensor;
use serde_json::Map;

use crate::map;
use crate::ops::Op;
use crate::program::Cut;
use crate::value::DynTensor;

/// The environment variable that selects a fault.
pub const ENV: &str = "DIFFTEST_BURN_FAULT";

/// The accepted spec forms, for error messages.
pub const FORMS: &str = "grad-scale:<op>:<eps>, grad-sign:<op>, grad-drop:<op>, \
flag-without-autodiff, detach-like-torch, lowering:<op>=<other>";

#[derive(Clone, Debug)]
pub enum Fault {
    GradScale { op: &'static str, eps: f64 },
    GradSign { op: &'static str },
    GradDrop { op: &'static str },
    FlagWithoutAutodiff,
    DetachLikeTorch,
    Lowering { op: &'static str, other: Op },
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
        .find(|(n, _)| *n == name)
        .map(|(n, _)| *n)
        .ok_or_else(|| format!("{what} {name:?} is not a catalog op"))
}

/// Parses a fault spec (see the module documentation).
pub fn parse(spec: &str) -> Result<Fault, String> {
    let parts: Vec<&str> = spec.split(':').collect();
    match parts.as_slice() {
        ["grad-scale", op, eps] => {
            let op = catalog_op(op, "grad-scale op")?;
            let eps: f64 = eps
                .parse()
                .map_err(|_| format!("grad-scale eps {eps:?} is not a number"))?;
            if !eps.is_finite() {
                return Err(format!("grad-scale eps {eps} is not finite"));
            }
            Ok(Fault::GradScale { op, eps })
        }
        ["grad-sign", op] => Ok(Fault::GradSign {
            op: catalog_op(op, "grad-sign op")?,
        }),
        ["grad-drop", op] => Ok(Fault::GradDrop {
            op: catalog_op(op, "grad-drop op")?,
        }),
        ["flag-without-autodiff"] => Ok(Fault::FlagWithoutAutodiff),
        ["detach-like-torch"] => Ok(Fault::DetachLikeTorch),
        ["lowering", pair] => {
            let (op, other) = pair
                .split_once('=')
                .ok_or_else(|| format!("lowering needs <op>=<other>, got {pair:?}"))?;
            let op = catalog_op(op, "lowering op")?;
            if Op::ALL.iter().any(|&(n, a)| n == op && a != 1) {
                return Err(format!("lowering op {op:?} is not unary"));
            }
            let other = Op::parse(other, &Map::new())
                .map_err(|e| format!("lowering replacement {other:?}: {e}"))?;
            if other.arity() != 1 {
                return Err(format!(
                    "lowering replacement {:?} is not unary",
                    other.name()
                ));
            }
            Ok(Fault::Lowering { op, other })
        }
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

/// Runs `op` under `fault`: the hook around an op's execution.
pub fn execute_with(fault: Option<&Fault>, op: &Op, inputs: Vec<DynTensor>) -> DynTensor {
    let name = op.name();
    let grad_eps = match fault {
        Some(Fault::Lowering { op: target, other }) if *target == name => {
            return other.execute(inputs);
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
