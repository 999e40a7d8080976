//! Unit tests of the element budget (`bounds.rs`).

use serde_json::{Value, json};

use crate::program::{FORMAT, Program, ProgramError};

fn parse(statements: Value) -> Result<Program, ProgramError> {
    Program::from_json(&json!({"format": FORMAT, "version": 1, "statements": statements}))
}

fn leaf(id: &str, shape: &[usize]) -> Value {
    let n: usize = shape.iter().product();
    json!({"id": id, "kind": "leaf", "shape": shape, "data": vec![0.5; n],
           "device": "autodiff", "require_grad": false})
}

fn op(id: &str, op: &str, inputs: &[&str], attrs: Value) -> Value {
    json!({"id": id, "kind": "op", "op": op, "inputs": inputs, "attrs": attrs})
}

fn bounds(statements: Value) -> Result<(), ProgramError> {
    parse(statements).unwrap().check_bounds()
}

#[test]
fn element_budget() {
    let x = leaf("x", &[2, 2]);
    let e = bounds(json!([
        x,
        op("s", "sum", &["x"], json!({})),
        op(
            "v2",
            "repeat_dim",
            &["x"],
            json!({"dim": 0, "times": 4_000_000_000u64})
        )
    ]))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "statement 2 (id \"v2\"): repeat_dim would make 16000000000 elements; the limit is \
         1000000 per tensor"
    );
    let e = bounds(json!([
        x,
        op(
            "big",
            "expand",
            &["x"],
            json!({"shape": [1000, 1000, 2, 2]})
        )
    ]))
    .unwrap_err();
    assert_eq!((e.index, e.statement.as_deref()), (Some(1), Some("big")));
    assert!(
        e.message.contains("expand would make 4000000 elements"),
        "{e}"
    );
    // Through reshape and matmul: the inferred shapes carry the size along.
    let e = bounds(json!([
        leaf("a", &[2000, 1]),
        leaf("b", &[1, 2000]),
        op("r", "reshape", &["b"], json!({"shape": [1, 2000]})),
        op("m", "matmul", &["a", "r"], json!({}))
    ]))
    .unwrap_err();
    assert_eq!(e.index, Some(3), "{e}");
    // Exactly at the limit is fine; the program total counts every value.
    let ok = json!([leaf("a", &[1000, 1000])]);
    bounds(ok).unwrap();
    let e = bounds(
        json!([leaf("a", &[1000, 1000]), op("b", "exp", &["a"], json!({})),
        op("c", "exp", &["b"], json!({})), op("d", "exp", &["c"], json!({})),
        {"id": "e", "kind": "cut", "cut": "detach", "input": "d"}]),
    )
    .unwrap_err();
    assert_eq!(e.index, Some(4), "{e}");
    assert!(
        e.message.contains("total 5000000 elements") && e.message.contains("4000000 per program"),
        "{e}"
    );
    // A statement burn rejects (here: mismatched inner dims) has no shape: burn panics
    // there at run time, so nothing after it is counted.
    bounds(json!([
        x,
        leaf("y", &[3, 3]),
        op("m", "matmul", &["x", "y"], json!({})),
        op(
            "r",
            "repeat_dim",
            &["m"],
            json!({"dim": 0, "times": 4_000_000_000u64})
        )
    ]))
    .unwrap();
    // Module weights and applying them.
    let e = bounds(json!([{"id": "fc", "kind": "module", "module": "linear",
        "weight": {"shape": [1, 2], "data": [1, 2]}, "bias": null},
        leaf("x", &[2]), op("w", "expand", &["x"], json!({"shape": [600000, 2]})),
        {"id": "y", "kind": "apply", "module": "fc", "input": "w"}]))
    .unwrap_err();
    assert_eq!(e.index, Some(2), "{e}");
    let e = bounds(json!([
        leaf("x", &[3]),
        op(
            "g",
            "gather",
            &["x"],
            json!({"dim": 0, "indices": {"shape": [1_000_001], "data": vec![0; 1_000_001]}})
        )
    ]))
    .unwrap_err();
    assert!(
        e.message
            .starts_with("attribute \"indices\" would make 1000001"),
        "{e}"
    );
}
