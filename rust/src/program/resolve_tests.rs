//! Unit tests of the resolution pass (`resolve.rs`): malformed documents and statements,
//! references, module statements, defaults.

use super::*;
use crate::modules::{DropoutSpec, LinearSpec};
use crate::program::{Checkpointing, Cut, DeviceKind, Region};
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
        {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "plain", "require_grad": false},
        {"id": "v1", "kind": "op", "op": "foo", "inputs": ["x"]}
    ]))
    .unwrap_err();
    assert_eq!(e.to_string(), "statement 1 (id \"v1\"): unknown op \"foo\"");
    let e = parse(json!([
        {"id": "x", "kind": "leaf", "shape": [3], "data": [1.0, 2.0], "device": "plain", "require_grad": false}
    ]))
    .unwrap_err();
    assert_eq!(e.index, Some(0));
    let e = parse(json!([
        {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "plain", "require_grad": false},
        {"id": "y", "kind": "op", "op": "add", "inputs": ["x", "z"]}
    ]))
    .unwrap_err();
    assert!(e.message.contains("\"z\""), "{e}");
    let e = parse(json!([
        {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "plain", "require_grad": false},
        {"id": "y", "kind": "op", "op": "sum_dim", "inputs": ["x"], "attrs": {"dim": -1}}
    ]))
    .unwrap_err();
    assert!(e.message.contains("dim"), "{e}");
}

#[test]
fn module_statements() {
    let x = json!({"id": "x", "kind": "leaf", "shape": [1, 2], "data": [1.0, 2.0], "device": "autodiff", "require_grad": false});
    let fc = json!({"id": "fc", "kind": "module", "module": "linear",
        "weight": {"shape": [3, 2], "data": [1, 2, 3, 4, 5, 6]}, "bias": null});
    let dr = json!({"id": "dr", "kind": "module", "module": "dropout", "p": 0.5});
    let p = parse(json!([
        x, fc, dr,
        {"id": "fv", "kind": "transform", "transform": "valid", "input": "fc"},
        {"id": "y", "kind": "apply", "module": "fv", "input": "x"},
        {"id": "z", "kind": "apply", "module": "dr", "input": "y"},
        {"id": "w", "kind": "param", "module": "fv", "param": "weight"},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["w"]}
    ]))
    .unwrap();
    assert!(!p.statements[1].is_value() && p.statements[3].is_module());
    assert!(p.statements[4].is_value() && p.statements[6].is_value());
    match module_spec(&p.statements, 3) {
        ModuleSpec::Linear(LinearSpec {
            d_input: 2,
            d_output: 3,
            bias: None,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }

    let bad = |stmt: Value, needle: &str| {
        let e = parse(json!([x, fc, dr, stmt])).unwrap_err();
        assert_eq!(
            (e.index, e.statement.as_deref()),
            (Some(3), Some("bad")),
            "{e}"
        );
        assert!(e.message.contains(needle), "{e}");
    };
    bad(
        json!({"id": "bad", "kind": "apply", "module": "x", "input": "x"}),
        "is a leaf statement, not a module",
    );
    bad(
        json!({"id": "bad", "kind": "apply", "module": "fc", "input": "fc"}),
        "is a module statement, not a value",
    );
    bad(
        json!({"id": "bad", "kind": "apply", "module": "nope", "input": "x"}),
        "\"nope\"",
    );
    bad(
        json!({"id": "bad", "kind": "op", "op": "exp", "inputs": ["dr"]}),
        "not a value",
    );
    bad(
        json!({"id": "bad", "kind": "transform", "transform": "eval", "input": "fc"}),
        "unknown variant `eval`, expected one of `valid`, `train`",
    );
    bad(
        json!({"id": "bad", "kind": "param", "module": "fc", "param": "bias"}),
        "no \"bias\"",
    );
    bad(
        json!({"id": "bad", "kind": "param", "module": "dr", "param": "weight"}),
        "the dropout module has no \"weight\"",
    );
    bad(
        json!({"id": "bad", "kind": "module", "module": "dropout", "p": 1.5}),
        "[0, 1]",
    );
    bad(
        json!({"id": "bad", "kind": "module", "module": "conv", "p": 1.5}),
        "unknown variant `conv`, expected one of `linear`, `dropout`",
    );
    bad(
        json!({"id": "bad", "kind": "module", "module": "linear",
        "weight": {"shape": [2], "data": [1, 2]}, "bias": null}),
        "rank 2",
    );
    bad(
        json!({"id": "bad", "kind": "module", "module": "linear",
        "weight": {"shape": [1, 2], "data": [1, 2]}, "bias": {"shape": [2], "data": [1, 2]}}),
        "needs [1]",
    );
    bad(
        json!({"id": "bad", "kind": "module", "module": "linear",
        "weight": {"shape": [1, 2], "data": [1]}, "bias": null}),
        "needs 2",
    );
    bad(
        json!({"id": "bad", "kind": "module", "module": "linear",
        "weight": {"shape": [1, 2], "data": [1, 2]}}),
        "missing field `bias`",
    );
}

/// A malformed statement (serde's part) is an error naming the statement's index, and its
/// id when the statement has a string `id`.
#[test]
fn malformed_statements_name_the_statement() {
    let x = json!({"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0],
                   "device": "plain", "require_grad": false});
    let bad = |stmt: Value, id: Option<&str>, message: &str| {
        let e = parse(json!([x, stmt])).unwrap_err();
        assert_eq!((e.index, e.statement.as_deref()), (Some(1), id), "{e}");
        assert_eq!(e.message, message, "{e}");
        let shown = match id {
            Some(id) => format!("statement 1 (id {id:?}): {message}"),
            None => format!("statement 1: {message}"),
        };
        assert_eq!(e.to_string(), shown);
    };
    // Unknown fields, per kind.
    bad(
        json!({"id": "y", "kind": "op", "op": "exp", "inputs": ["x"], "atrs": {}}),
        Some("y"),
        "unknown field `atrs`, expected one of `id`, `op`, `inputs`, `attrs`, `region`",
    );
    bad(
        json!({"id": "y", "kind": "backward", "input": "x", "region": "grad"}),
        Some("y"),
        "unknown field `region`, expected one of `id`, `input`, `retain_graph`",
    );
    bad(
        json!({"id": "fc", "kind": "module", "module": "dropout", "p": 0.5, "bias": null}),
        Some("fc"),
        "unknown field `bias`, expected `id` or `p`",
    );
    bad(
        json!({"id": "fc", "kind": "module", "module": "linear",
               "weight": {"shape": [1, 1], "data": [1], "dtype": "f32"}, "bias": null}),
        Some("fc"),
        "unknown field `dtype`, expected `shape` or `data`",
    );
    // Wrong types.
    bad(
        json!({"id": "y", "kind": "leaf", "shape": [2], "data": [1.0, 2.0],
               "device": "plain", "require_grad": "no"}),
        Some("y"),
        "invalid type: string \"no\", expected a boolean",
    );
    bad(
        json!({"id": "y", "kind": "op", "op": "exp", "inputs": "x"}),
        Some("y"),
        "invalid type: string \"x\", expected a sequence",
    );
    bad(
        json!({"id": "y", "kind": "op", "op": "exp", "inputs": ["x"], "attrs": []}),
        Some("y"),
        "invalid type: sequence, expected a map",
    );
    bad(
        json!({"id": "y", "kind": "leaf", "shape": [-2], "data": [1.0, 2.0],
               "device": "plain", "require_grad": false}),
        Some("y"),
        "invalid value: integer `-2`, expected usize",
    );
    bad(
        json!({"id": "y", "kind": "leaf", "shape": [2], "data": [1.0, "nan"],
               "device": "plain", "require_grad": false}),
        Some("y"),
        "data[1]: string \"nan\" is not a float (only \"NaN\", \"Infinity\", \"-Infinity\")",
    );
    bad(
        json!({"id": "y", "kind": "leaf", "shape": [2], "data": [1.0, 1e39],
               "device": "plain", "require_grad": false}),
        Some("y"),
        "data[1]: 1000000000000000000000000000000000000000 overflows float32",
    );
    bad(
        json!({"id": "y", "kind": "module", "module": "dropout", "p": "0.5"}),
        Some("y"),
        "invalid type: string \"0.5\", expected f64",
    );
    bad(
        json!({"id": 3, "kind": "backward", "input": "x"}),
        None,
        "invalid type: integer `3`, expected a string",
    );
    bad(
        json!("y"),
        None,
        "a statement must be an object, got a string",
    );
    bad(
        json!(["backward", "y", "x"]),
        None,
        "a statement must be an object, got an array",
    );
    bad(
        json!({"id": "fc", "kind": "module", "module": "linear",
               "weight": [[1, 1], [1]], "bias": null}),
        Some("fc"),
        "invalid type: sequence, expected a map",
    );
    bad(
        json!({"id": "fc", "kind": "module", "module": "linear",
               "weight": {"shape": [1, 1], "data": [1]}, "bias": [[1], [1]]}),
        Some("fc"),
        "invalid type: sequence, expected a map",
    );
    // Unknown or missing kind and values.
    bad(
        json!({"id": "y", "kind": "opp", "op": "exp", "inputs": ["x"]}),
        Some("y"),
        "unknown variant `opp`, expected one of `leaf`, `op`, `cut`, `backward`, `module`, \
         `transform`, `apply`, `param`, `grad`, `zero_grad`, `optimizer`, `step`",
    );
    bad(
        json!({"id": "y", "op": "exp", "inputs": ["x"]}),
        Some("y"),
        "missing field `kind`",
    );
    bad(
        json!({"id": "y", "kind": "leaf", "shape": [2], "data": [1.0, 2.0],
               "device": "gpu", "require_grad": false}),
        Some("y"),
        "unknown variant `gpu`, expected `plain` or `autodiff`",
    );
    bad(
        json!({"id": "y", "kind": "cut", "cut": "stop", "input": "x"}),
        Some("y"),
        "unknown variant `stop`, expected one of `detach`, `without_autodiff`, `autodiff`",
    );
    bad(
        json!({"id": "y", "kind": "op", "op": "exp", "inputs": ["x"], "region": "grads"}),
        Some("y"),
        "unknown variant `grads`, expected one of `grad`, `no_grad`, `inference_mode`",
    );
    bad(
        json!({"id": "y", "kind": "cut", "cut": "detach"}),
        Some("y"),
        "missing field `input`",
    );
    // The first malformed statement is reported, before any resolution error.
    let e = parse(json!([
        x,
        {"id": "y", "kind": "op", "op": "exp", "inputs": ["nope"]},
        {"id": "z", "kind": "op", "op": "exp", "inputs": ["x"], "colour": 1}
    ]))
    .unwrap_err();
    assert_eq!(
        (e.index, e.statement.as_deref()),
        (Some(2), Some("z")),
        "{e}"
    );
}

#[test]
fn defaults_and_nullable_fields() {
    let p = parse(json!([
        {"id": "x", "kind": "leaf", "shape": [2], "data": [1, "-Infinity"],
         "device": "autodiff", "require_grad": true},
        {"id": "y", "kind": "op", "op": "exp", "inputs": ["x"]},
        {"id": "c", "kind": "cut", "cut": "without_autodiff", "input": "y",
         "region": "inference_mode"},
        {"id": "d", "kind": "module", "module": "dropout", "p": 1},
        {"id": "fc", "kind": "module", "module": "linear",
         "weight": {"shape": [1, 2], "data": [1, 2]}, "bias": {"shape": [1], "data": [0]}}
    ]))
    .unwrap();
    match &p.statements[0].kind {
        Kind::Leaf {
            data,
            device: DeviceKind::Autodiff,
            require_grad: true,
            ..
        } => assert_eq!(data, &[1.0, f64::NEG_INFINITY]),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        p.statements[1].kind,
        Kind::Op {
            region: Region::Grad,
            ..
        }
    ));
    assert!(matches!(
        p.statements[2].kind,
        Kind::Cut {
            cut: Cut::WithoutAutodiff,
            input: 1,
            region: Region::InferenceMode
        }
    ));
    assert!(matches!(
        p.statements[3].kind,
        Kind::Module {
            spec: ModuleSpec::Dropout(DropoutSpec { p })
        } if p == 1.0
    ));
    assert!(matches!(
        &p.statements[4].kind,
        Kind::Module {
            spec: ModuleSpec::Linear(LinearSpec { bias: Some(b), .. })
        } if b == &[0.0]
    ));
}

#[test]
fn malformed_documents() {
    let doc_err = |doc: Value, message: &str| {
        let e = Program::from_json(&doc).unwrap_err();
        assert_eq!((e.index, e.statement.as_deref()), (None, None), "{e}");
        assert_eq!(e.message, message);
    };
    doc_err(json!([]), "a program must be an object, got an array");
    doc_err(
        json!([FORMAT, 1, null, []]),
        "a program must be an object, got an array",
    );
    doc_err(
        json!({"format": FORMAT, "version": 1, "statements": [], "extra": 1}),
        "unknown field `extra`, expected one of `format`, `version`, `name`, `dtype`, \
         `gradient_checkpointing`, `statements`",
    );
    doc_err(
        json!({"format": "other", "version": 1, "statements": []}),
        "\"format\" must be \"difftest-program\", got \"other\"",
    );
    doc_err(
        json!({"format": FORMAT, "version": 0, "statements": []}),
        "unsupported \"version\" 0 (expected 1 or 2)",
    );
    doc_err(
        json!({"format": FORMAT, "version": 1}),
        "missing field `statements`",
    );
    doc_err(
        json!({"format": FORMAT, "version": 1, "statements": {}}),
        "invalid type: map, expected an array of statements",
    );
    doc_err(
        json!({"format": FORMAT, "version": 1, "name": null, "statements": []}),
        "invalid type: null, expected a string",
    );
    Program::from_json(&json!({"format": FORMAT, "version": 1, "name": "n", "statements": []}))
        .unwrap();
    doc_err(
        json!({"format": FORMAT, "version": 1, "gradient_checkpointing": "always", "statements": []}),
        "unknown variant `always`, expected `disabled` or `balanced`",
    );
}

#[test]
fn gradient_checkpointing() {
    let doc = |extra: Value| {
        let mut d = json!({"format": FORMAT, "version": 1, "statements": []});
        d.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        Program::from_json(&d).unwrap().checkpointing
    };
    assert_eq!(doc(json!({})), Checkpointing::Disabled);
    assert_eq!(
        doc(json!({"gradient_checkpointing": "balanced"})),
        Checkpointing::Balanced
    );
    assert_eq!(
        doc(json!({"gradient_checkpointing": "disabled"})),
        Checkpointing::Disabled
    );
}
