//! Parsing `DIFFTEST_BURN_FAULT` specs into [`Fault`]s (the forms are listed in the parent
//! module's documentation and in [`FORMS`](super::FORMS)).

use serde_json::{Map, Value};

use super::{FORMS, Fault, FlagSite};
use crate::backend::Backend;
use crate::ops::{NARY, Op};

/// The catalog name of `name`, or an error naming the spec part.
fn catalog_op(name: &str, what: &str) -> Result<&'static str, String> {
    Op::ALL
        .iter()
        .find(|d| d.name == name)
        .map(|d| d.name)
        .ok_or_else(|| format!("{what} {name:?} is not a catalog op"))
}

/// The catalog name of `name` or a module kind's (the registry's, [`crate::modules::KINDS`]),
/// or an error naming the spec part. A `grad-scale` fault on a module kind targets the forward
/// of every module of that kind; a name that is both a catalog op and a module kind (`conv2d`,
/// `embedding`, `prelu`) targets both.
fn catalog_op_or_module(name: &str, what: &str) -> Result<&'static str, String> {
    catalog_op(name, what).or_else(|e| {
        crate::modules::KINDS
            .iter()
            .find(|k| **k == name)
            .copied()
            .ok_or_else(|| format!("{e} or module kind"))
    })
}

/// The arity of the catalog op `op` (`NARY` for n-ary ops).
fn arity_of(op: &str) -> i32 {
    Op::ALL.iter().find(|d| d.name == op).map_or(0, |d| d.arity)
}

/// A finite float (the `eps` of `grad-scale` and `value-scale`, the `delta` of `value-shift`).
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
        ["grad-scale-beside-constant", op, eps] => Ok(Fault::GradScaleBesideConstant {
            op: catalog_op(op, "grad-scale-beside-constant")?,
            eps: finite_eps(eps, "grad-scale-beside-constant")?,
        }),
        ["grad-scale-tail", op, eps, t] => Ok(Fault::GradScaleTail {
            op: catalog_op(op, "grad-scale-tail op")?,
            eps: finite_eps(eps, "grad-scale-tail")?,
            t: finite_eps(t, "grad-scale-tail threshold")?,
        }),
        ["hang", op] => Ok(Fault::Hang {
            op: catalog_op(op, "hang op")?,
        }),
        ["abort", op] => Ok(Fault::Abort {
            op: catalog_op(op, "abort op")?,
        }),
        ["value-shift", op, delta] => Ok(Fault::ValueShift {
            op: catalog_op(op, "value-shift op")?,
            delta: finite_eps(delta, "value-shift")?,
        }),
        ["kink-grad", op, g] => Ok(Fault::KinkGrad {
            op: catalog_op(op, "kink-grad op")?,
            g: finite_eps(g, "kink-grad")?,
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
        ["broadcast-grad-scale", eps] => Ok(Fault::BroadcastGradScale {
            op: None,
            eps: finite_eps(eps, "broadcast-grad-scale")?,
        }),
        ["broadcast-grad-scale", op, eps] => Ok(Fault::BroadcastGradScale {
            op: Some(catalog_op(op, "broadcast-grad-scale op")?),
            eps: finite_eps(eps, "broadcast-grad-scale")?,
        }),
        ["root-grad-scale", eps] => Ok(Fault::RootGradScale {
            eps: finite_eps(eps, "root-grad-scale")?,
        }),
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

/// Parses a spec that may be scoped to one backend (`on:<backend>:<spec>`): the backend, if
/// any, and the fault. The backend must be one difftest-burn knows (compiled in or not: a
/// fault scoped to a backend the binary lacks never acts).
pub fn parse_scoped(spec: &str) -> Result<(Option<Backend>, Fault), String> {
    let Some(rest) = spec.strip_prefix("on:") else {
        return Ok((None, parse(spec)?));
    };
    let (name, inner) = rest
        .split_once(':')
        .ok_or_else(|| format!("on:<backend>:<spec> needs a backend and a spec, got {spec:?}"))?;
    let backend = Backend::named(name).ok_or_else(|| {
        let known: Vec<_> = Backend::ALL.iter().map(|b| b.name()).collect();
        format!("on: unknown backend {name:?} (known: {})", known.join(", "))
    })?;
    if inner.starts_with("on:") {
        return Err(format!("on: {spec:?} scopes a fault twice"));
    }
    Ok((Some(backend), parse(inner)?))
}
