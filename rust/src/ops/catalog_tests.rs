//! Unit tests of the `ops!` table: declared attribute types, `dim` attributes.

use serde_json::{Map, json};

use super::*;

/// Every attribute is declared with a catalog type (difftest/ops/spec.py `ATTR_TYPES`).
#[test]
fn declared_attribute_types() {
    const TYPES: &[&str] = &[
        "float",
        "int",
        "dim",
        "dims",
        "ints",
        "shape",
        "ranges",
        "int_tensor",
        "bool_tensor",
        "dtype",
    ];
    for decl in Op::ALL {
        for (name, ty) in decl.attrs {
            assert!(TYPES.contains(ty), "{}: {name} has type {ty}", decl.name);
        }
    }
    let gather = Op::ALL.iter().find(|d| d.name == "gather").unwrap();
    assert_eq!(gather.attrs, &[("dim", "dim"), ("indices", "int_tensor")]);
    let repeat = Op::ALL.iter().find(|d| d.name == "repeat_dim").unwrap();
    assert_eq!(repeat.attrs, &[("dim", "dim"), ("times", "int")]);
}

#[test]
fn dim_attributes() {
    let attrs = json!({"dim": 1, "times": 3});
    let op = Op::parse("repeat_dim", attrs.as_object().unwrap()).unwrap();
    assert_eq!(op.dim(), Some(1));
    let other = op.with_dim(0).unwrap();
    assert!(matches!(
        other,
        Op::RepeatDim {
            dim: 0,
            times: Positive(3)
        }
    ));
    let exp = Op::parse("exp", &Map::new()).unwrap();
    assert!(exp.dim().is_none() && exp.with_dim(0).is_none());
    assert_eq!(Op::attr_names("clamp"), Some(&["min", "max"][..]));
    assert_eq!(Op::attr_names("frob"), None);
    let with_dim: Vec<&str> = Op::ALL
        .iter()
        .map(|d| d.name)
        .filter(|n| Op::attr_names(n).unwrap().contains(&"dim"))
        .collect();
    assert!(
        with_dim.contains(&"gather") && !with_dim.contains(&"swap_dims"),
        "{with_dim:?}"
    );
}
