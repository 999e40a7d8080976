//! Sessions (format version 2): several backwards, gradient handles, `grad` reads,
//! `zero_grad`, optimizers and steps, run end to end through [`crate::exec::run`].

use serde_json::{Value, json};

use crate::exec::{Observation, ValueObs, run};
use crate::program::{Program, ProgramError};
use crate::value::Flags;

fn program(version: u64, statements: Value) -> Result<Program, ProgramError> {
    Program::from_json(
        &json!({"format": "difftest-program", "version": version, "statements": statements}),
    )
}

fn run_v2(statements: Value) -> Observation {
    run(&program(2, statements).expect("a valid program"))
}

fn value<'a>(obs: &'a Observation, id: &str) -> &'a ValueObs {
    obs.values
        .iter()
        .find(|v| v.id == id)
        .unwrap_or_else(|| panic!("no value {id:?} in {obs:?}"))
}

/// The gradient of `of` that backward `bw` reported (None: reported absent).
fn reported_grad(obs: &Observation, bw: &str, of: &str) -> Option<Vec<f32>> {
    let b = obs.backwards.iter().find(|b| b.id == bw).expect("backward");
    let (_, g) = b.grads.0.iter().find(|(id, _)| id == of).expect("entry");
    g.as_ref().map(|g| f32s(&g.data))
}

fn x_leaf() -> Value {
    json!({"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "autodiff",
           "require_grad": true})
}

const NO_AUTODIFF: Flags = Flags {
    is_autodiff: false,
    is_tracked: false,
    is_require_grad: false,
};

/// (a) Two backwards on disjoint graphs sharing a require-grad leaf both succeed; each
/// handle holds only its own graph's gradient (burn does not accumulate). `retain_graph` is
/// accepted and ignored; `zero_grad` does nothing; `grad` values are usable by later ops.
#[test]
fn disjoint_graphs_sharing_a_leaf() {
    let obs = run_v2(json!([
        x_leaf(),
        {"id": "a", "kind": "op", "op": "exp", "inputs": ["x"]},
        {"id": "s1", "kind": "op", "op": "sum", "inputs": ["a"]},
        {"id": "b", "kind": "op", "op": "square", "inputs": ["x"]},
        {"id": "s2", "kind": "op", "op": "sum", "inputs": ["b"]},
        {"id": "bw1", "kind": "backward", "input": "s1"},
        {"id": "bw2", "kind": "backward", "input": "s2", "retain_graph": true},
        {"id": "g1", "kind": "grad", "grads": "bw1", "of": "x"},
        {"id": "z", "kind": "zero_grad"},
        {"id": "g2", "kind": "grad", "grads": "bw2", "of": "x"},
        {"id": "h", "kind": "op", "op": "mul", "inputs": ["g1", "g2"]}
    ]));
    assert!(obs.error.is_none(), "{:?}", obs.error);
    let e = [1.0f32.exp(), 2.0f32.exp()];
    assert_eq!(reported_grad(&obs, "bw1", "x"), Some(e.to_vec()));
    assert_eq!(reported_grad(&obs, "bw2", "x"), Some(vec![2.0, 4.0]));
    assert_eq!(f32s(&value(&obs, "g1").data), e.to_vec());
    assert_eq!(f32s(&value(&obs, "g2").data), vec![2.0, 4.0]);
    assert_eq!(f32s(&value(&obs, "h").data), vec![e[0] * 2.0, e[1] * 4.0]);
    // A gradient read has no autodiff association, and neither has what is computed from it.
    assert_eq!(value(&obs, "g1").flags, NO_AUTODIFF);
    assert_eq!(value(&obs, "h").flags, NO_AUTODIFF);
    // zero_grad is no observation; every value before a backward has an entry.
    assert_eq!(obs.values.len(), 8);
    let ids: Vec<&str> = obs.backwards[1]
        .grads
        .0
        .iter()
        .map(|(i, _)| i.as_str())
        .collect();
    assert_eq!(ids, ["x", "a", "s1", "b", "s2"]);
}

/// (b) A second backward through an intermediate the first consumed panics with burn's
/// message, reported as a panic at that statement.
#[test]
fn second_backward_through_a_consumed_graph_panics() {
    let obs = run_v2(json!([
        x_leaf(),
        {"id": "a", "kind": "op", "op": "exp", "inputs": ["x"]},
        {"id": "s1", "kind": "op", "op": "sum", "inputs": ["a"]},
        {"id": "bw1", "kind": "backward", "input": "s1"},
        {"id": "c", "kind": "op", "op": "mul_scalar", "inputs": ["a"], "attrs": {"scalar": 2.0}},
        {"id": "s2", "kind": "op", "op": "sum", "inputs": ["c"]},
        {"id": "bw2", "kind": "backward", "input": "s2"},
        {"id": "after", "kind": "op", "op": "exp", "inputs": ["x"]}
    ]));
    let e = obs.error.as_ref().expect("the second backward fails");
    assert_eq!((e.index, e.statement.as_str(), e.kind), (6, "bw2", "panic"));
    assert!(
        e.message.contains("graph tape has already been consumed"),
        "{}",
        e.message
    );
    assert_eq!(obs.backwards.len(), 1);
    assert!(obs.values.iter().all(|v| v.id != "after"));
}

/// (c) After a backward, a fresh branch from the same leaf can be differentiated.
#[test]
fn fresh_branch_after_a_backward() {
    let obs = run_v2(json!([
        x_leaf(),
        {"id": "a", "kind": "op", "op": "exp", "inputs": ["x"]},
        {"id": "s1", "kind": "op", "op": "sum", "inputs": ["a"]},
        {"id": "bw1", "kind": "backward", "input": "s1"},
        {"id": "b", "kind": "op", "op": "sin", "inputs": ["x"]},
        {"id": "s2", "kind": "op", "op": "sum", "inputs": ["b"]},
        {"id": "bw2", "kind": "backward", "input": "s2"},
        {"id": "g", "kind": "grad", "grads": "bw2", "of": "x"}
    ]));
    assert!(obs.error.is_none(), "{:?}", obs.error);
    let cos = vec![1.0f32.cos(), 2.0f32.cos()];
    assert_eq!(reported_grad(&obs, "bw2", "x"), Some(cos.clone()));
    assert_eq!(f32s(&value(&obs, "g").data), cos);
}

/// The statements of a 3-step SGD loop on `fc` (Linear 2 -> 1): forward, mse loss, backward,
/// a `grad` read of the weight, step, param reads.
fn sgd_loop(momentum: f64, weight_decay: f64) -> Value {
    let mut st = vec![
        json!({"id": "fc", "kind": "module", "module": "linear",
               "weight": {"shape": [1, 2], "data": [0.5, -1.0]},
               "bias": {"shape": [1], "data": [0.25]}}),
        json!({"id": "x", "kind": "leaf", "shape": [2, 2], "data": [1.0, 2.0, 3.0, -1.0],
               "device": "autodiff", "require_grad": false}),
        json!({"id": "t", "kind": "leaf", "shape": [2, 1], "data": [1.0, 0.0],
               "device": "autodiff", "require_grad": false}),
        json!({"id": "w0", "kind": "param", "module": "fc", "param": "weight"}),
        json!({"id": "opt", "kind": "optimizer", "optimizer": "sgd", "momentum": momentum,
               "weight_decay": weight_decay}),
    ];
    let mut module = "fc".to_string();
    for k in 1..=3 {
        st.extend([
            json!({"id": format!("y{k}"), "kind": "apply", "module": module, "input": "x"}),
            json!({"id": format!("r{k}"), "kind": "op", "op": "sub", "inputs": [format!("y{k}"), "t"]}),
            json!({"id": format!("q{k}"), "kind": "op", "op": "square", "inputs": [format!("r{k}")]}),
            json!({"id": format!("l{k}"), "kind": "op", "op": "mean", "inputs": [format!("q{k}")]}),
            json!({"id": format!("bw{k}"), "kind": "backward", "input": format!("l{k}")}),
            json!({"id": format!("gw{k}"), "kind": "grad", "grads": format!("bw{k}"),
                   "of": format!("w{}", k - 1)}),
            json!({"id": format!("m{k}"), "kind": "step", "optimizer": "opt", "module": module,
                   "grads": format!("bw{k}"), "lr": 0.1}),
            json!({"id": format!("w{k}"), "kind": "param", "module": format!("m{k}"), "param": "weight"}),
            json!({"id": format!("b{k}"), "kind": "param", "module": format!("m{k}"), "param": "bias"}),
        ]);
        module = format!("m{k}");
    }
    Value::Array(st)
}

/// Observed data (reported as f64) of a float32 program, narrowed back (exactly).
fn f32s(data: &[f64]) -> Vec<f32> {
    data.iter().map(|&x| x as f32).collect()
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

/// (d) A 3-step SGD loop with momentum 0.9 and weight decay 0.01 (lr 0.1). Step 1 by hand:
/// y = x W^T + b = [-1.25, 2.75], r = y - t = [-2.25, 2.75], loss = mean(r^2) = 6.3125;
/// dL/dW = r^T x = [6, -7.25], dL/db = 0.5; decayed: [6.005, -7.26], 0.5025 (the first
/// momentum buffer is the gradient itself); W1 = W - 0.1 * that = [-0.1005, -0.274],
/// b1 = 0.19975. Steps 2 and 3 are PyTorch's figures (torch.optim.SGD(lr=0.1, momentum=0.9,
/// weight_decay=0.01) on the same module and data, torch 2.15):
/// W2 = [-0.5476495, 0.68664896], b2 = 0.28197527; W3 = [-0.34601203, 1.3242593],
/// b3 = 0.54969585.
#[test]
fn sgd_loop_with_momentum_and_weight_decay() {
    let obs = run_v2(sgd_loop(0.9, 0.01));
    assert!(obs.error.is_none(), "{:?}", obs.error);
    close(&f32s(&value(&obs, "l1").data), &[6.3125]);
    close(&f32s(&value(&obs, "gw1").data), &[6.0, -7.25]);
    close(&f32s(&value(&obs, "w1").data), &[-0.1005, -0.274]);
    close(&f32s(&value(&obs, "b1").data), &[0.19975]);
    close(&f32s(&value(&obs, "w2").data), &[-0.5476495, 0.686_649]);
    close(&f32s(&value(&obs, "b2").data), &[0.281_975_27]);
    close(
        &f32s(&value(&obs, "w3").data),
        &[-0.346_012_03, 1.324_259_3],
    );
    close(&f32s(&value(&obs, "b3").data), &[0.549_695_85]);
    // Stepped parameters are new require-grad leaves on the autodiff device.
    for id in ["w1", "b1", "w3"] {
        let f = value(&obs, id).flags;
        assert!(
            f.is_autodiff && f.is_tracked && f.is_require_grad,
            "{id}: {f:?}"
        );
    }
    // Each backward reports the gradient of the parameters its forward used, not of the
    // earlier (replaced) ones.
    assert!(reported_grad(&obs, "bw2", "w1").is_some());
    assert_eq!(reported_grad(&obs, "bw2", "w0"), None);
}

/// Without momentum and decay, a step is W - lr * grad, exactly as the grad read gives it.
#[test]
fn plain_sgd_step_is_w_minus_lr_grad() {
    let obs = run_v2(sgd_loop(0.0, 0.0));
    assert!(obs.error.is_none(), "{:?}", obs.error);
    for k in 1..=3 {
        let w = &value(&obs, &format!("w{}", k - 1)).data;
        let g = &value(&obs, &format!("gw{k}")).data;
        let want: Vec<f32> = f32s(w)
            .iter()
            .zip(f32s(g))
            .map(|(w, g)| w - 0.1 * g)
            .collect();
        close(&f32s(&value(&obs, &format!("w{k}")).data), &want);
    }
}

/// (e) A `grad` read of a linear weight is in PyTorch's layout `[out, in]`; a step removes
/// the module's gradients from the handle (burn's `GradientsParams::from_module`), so a later
/// read finds none: a `missing-gradient` error naming the value and the handle.
#[test]
fn grad_read_layout_and_missing_gradient() {
    let obs = run_v2(json!([
        {"id": "fc", "kind": "module", "module": "linear",
         "weight": {"shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]}, "bias": null},
        {"id": "x", "kind": "leaf", "shape": [1, 3], "data": [1.0, 2.0, 3.0],
         "device": "autodiff", "require_grad": true},
        {"id": "w", "kind": "param", "module": "fc", "param": "weight"},
        {"id": "y", "kind": "apply", "module": "fc", "input": "x"},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["y"]},
        {"id": "bw", "kind": "backward", "input": "s"},
        {"id": "gw", "kind": "grad", "grads": "bw", "of": "w"},
        {"id": "u", "kind": "op", "op": "sub", "inputs": ["w", "gw"]},
        {"id": "opt", "kind": "optimizer", "optimizer": "sgd"},
        {"id": "m", "kind": "step", "optimizer": "opt", "module": "fc", "grads": "bw", "lr": 1.0},
        {"id": "gx", "kind": "grad", "grads": "bw", "of": "x"},
        {"id": "w1", "kind": "param", "module": "m", "param": "weight"},
        {"id": "gw_again", "kind": "grad", "grads": "bw", "of": "w"}
    ]));
    // d sum(x W^T) / dW[o][i] = x[i].
    let gw = value(&obs, "gw");
    assert_eq!(
        (gw.shape.clone(), gw.data.clone()),
        (vec![2, 3], vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0])
    );
    assert_eq!(gw.flags, NO_AUTODIFF);
    assert_eq!(
        f32s(&value(&obs, "u").data),
        vec![0.0, 0.0, 0.0, 3.0, 3.0, 3.0]
    );
    assert_eq!(
        f32s(&value(&obs, "w1").data),
        vec![0.0, 0.0, 0.0, 3.0, 3.0, 3.0]
    );
    // The handle still holds the gradients of values outside the module.
    assert_eq!(f32s(&value(&obs, "gx").data), vec![5.0, 7.0, 9.0]);
    let e = obs.error.as_ref().expect("missing gradient");
    assert_eq!(
        (e.index, e.statement.as_str(), e.kind),
        (12, "gw_again", "missing-gradient")
    );
    assert_eq!(
        e.message,
        "the gradients of \"bw\" hold no gradient of \"w\""
    );
}

/// A value outside the backward's graph has no gradient in the handle.
#[test]
fn grad_of_a_value_outside_the_graph_is_missing() {
    let obs = run_v2(json!([
        x_leaf(),
        {"id": "c", "kind": "leaf", "shape": [2], "data": [3.0, 4.0], "device": "autodiff",
         "require_grad": false},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["x"]},
        {"id": "bw", "kind": "backward", "input": "s"},
        {"id": "g", "kind": "grad", "grads": "bw", "of": "c"}
    ]));
    let e = obs.error.expect("missing gradient");
    assert_eq!((e.statement.as_str(), e.kind), ("g", "missing-gradient"));
}

/// A step of a dropout (no parameters) returns it unchanged; a step of a frozen linear leaves
/// its parameters as they are.
#[test]
fn steps_without_parameter_gradients() {
    let obs = run_v2(json!([
        {"id": "fc", "kind": "module", "module": "linear",
         "weight": {"shape": [1, 2], "data": [0.5, -1.0]}, "bias": null},
        {"id": "dr", "kind": "module", "module": "dropout", "p": 0.0},
        {"id": "fz", "kind": "transform", "transform": "freeze", "input": "fc"},
        x_leaf(),
        {"id": "y", "kind": "apply", "module": "fz", "input": "x"},
        {"id": "z", "kind": "apply", "module": "dr", "input": "y"},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["z"]},
        {"id": "bw", "kind": "backward", "input": "s"},
        {"id": "o1", "kind": "optimizer", "optimizer": "sgd"},
        {"id": "o2", "kind": "optimizer", "optimizer": "sgd", "momentum": 0.5, "nesterov": true},
        {"id": "f1", "kind": "step", "optimizer": "o1", "module": "fz", "grads": "bw", "lr": 0.5},
        {"id": "d1", "kind": "step", "optimizer": "o2", "module": "dr", "grads": "bw", "lr": 0.5},
        {"id": "w", "kind": "param", "module": "f1", "param": "weight"},
        {"id": "y2", "kind": "apply", "module": "d1", "input": "x"}
    ]));
    assert!(obs.error.is_none(), "{:?}", obs.error);
    assert_eq!(f32s(&value(&obs, "w").data), vec![0.5, -1.0]);
    assert_eq!(f32s(&value(&obs, "y2").data), vec![1.0, 2.0]);
}

fn invalid(version: u64, statements: Value) -> ProgramError {
    program(version, statements).expect_err("invalid")
}

#[test]
fn validation() {
    let base = || {
        vec![
            json!({"id": "fc", "kind": "module", "module": "linear",
                   "weight": {"shape": [1, 2], "data": [0.5, -1.0]}, "bias": null}),
            json!({"id": "fd", "kind": "module", "module": "linear",
                   "weight": {"shape": [1, 2], "data": [0.5, -1.0]}, "bias": null}),
            x_leaf(),
            json!({"id": "s", "kind": "op", "op": "sum", "inputs": ["x"]}),
            json!({"id": "bw", "kind": "backward", "input": "s"}),
            json!({"id": "opt", "kind": "optimizer", "optimizer": "sgd"}),
            json!({"id": "m1", "kind": "step", "optimizer": "opt", "module": "fc",
                   "grads": "bw", "lr": 0.1}),
        ]
    };
    let bad = |stmt: Value, needle: &str| {
        let mut st = base();
        st.push(stmt);
        let e = invalid(2, Value::Array(st));
        assert_eq!(
            (e.index, e.statement.as_deref()),
            (Some(7), Some("bad")),
            "{e}"
        );
        assert!(e.message.contains(needle), "{e}");
    };
    bad(
        json!({"id": "bad", "kind": "grad", "grads": "s", "of": "x"}),
        "grads \"s\" is a op statement, not a backward",
    );
    bad(
        json!({"id": "bad", "kind": "grad", "grads": "bw", "of": "fc"}),
        "is a module statement, not a value",
    );
    bad(
        json!({"id": "bad", "kind": "grad", "grads": "nope", "of": "x"}),
        "grads \"nope\" is not the id of an earlier statement",
    );
    bad(
        json!({"id": "bad", "kind": "grad", "grads": "bw", "of": "x", "retain": 1}),
        "unknown field `retain`",
    );
    bad(
        json!({"id": "bad", "kind": "op", "op": "exp", "inputs": ["bw"]}),
        "is a backward statement, not a value",
    );
    bad(
        json!({"id": "bad", "kind": "apply", "module": "opt", "input": "x"}),
        "is a optimizer statement, not a module",
    );
    bad(
        json!({"id": "bad", "kind": "step", "optimizer": "fc", "module": "fc", "grads": "bw",
               "lr": 0.1}),
        "is a module statement, not an optimizer",
    );
    bad(
        json!({"id": "bad", "kind": "step", "optimizer": "opt", "module": "m1", "grads": "bw",
               "lr": 0.0}),
        "\"lr\" must be finite and > 0, got 0",
    );
    bad(
        json!({"id": "bad", "kind": "step", "optimizer": "opt", "module": "fd", "grads": "bw",
               "lr": 0.1}),
        "optimizer \"opt\" steps module \"fd\" (derived from \"fd\"), but its earlier step \"m1\" \
         stepped a module derived from \"fc\"",
    );
    bad(
        json!({"id": "bad", "kind": "optimizer", "optimizer": "adam"}),
        "unknown variant `adam`, expected `sgd`",
    );
    bad(
        json!({"id": "bad", "kind": "optimizer", "optimizer": "sgd", "momentum": -0.5}),
        "\"momentum\" must be finite and >= 0, got -0.5",
    );
    bad(
        json!({"id": "bad", "kind": "optimizer", "optimizer": "sgd", "nesterov": true}),
        "nesterov needs \"momentum\" > 0 and \"dampening\" 0",
    );
    bad(
        json!({"id": "bad", "kind": "optimizer", "optimizer": "sgd", "momentum": 0.9,
               "dampening": 0.1, "nesterov": true}),
        "nesterov needs",
    );
    bad(
        json!({"id": "bad", "kind": "zero_grad", "input": "x"}),
        "unknown field `input`",
    );
    // A step of a handle derived from the same module, through transforms and steps, is fine.
    let mut st = base();
    st.push(json!({"id": "t", "kind": "transform", "transform": "train", "input": "m1"}));
    st.push(
        json!({"id": "m2", "kind": "step", "optimizer": "opt", "module": "t",
                   "grads": "bw", "lr": 0.1}),
    );
    st.push(json!({"id": "y", "kind": "apply", "module": "m2", "input": "x"}));
    program(2, Value::Array(st)).unwrap();
}

/// Version 1 documents load as before; the kinds of version 2 are errors in them.
#[test]
fn version_1_has_no_sessions() {
    let ok = json!([x_leaf(), {"id": "s", "kind": "op", "op": "sum", "inputs": ["x"]},
                    {"id": "bw", "kind": "backward", "input": "s"},
                    {"id": "bw2", "kind": "backward", "input": "s"}]);
    program(1, ok).unwrap();
    let bad = |stmt: Value, message: &str| {
        let e = invalid(
            1,
            json!([x_leaf(), {"id": "s", "kind": "op", "op": "sum", "inputs": ["x"]},
                   {"id": "bw", "kind": "backward", "input": "s"}, stmt]),
        );
        assert_eq!(e.index, Some(3), "{e}");
        assert_eq!(e.message, message);
    };
    bad(
        json!({"id": "g", "kind": "grad", "grads": "bw", "of": "x"}),
        "kind \"grad\" needs \"version\" 2 (the document has version 1)",
    );
    bad(
        json!({"id": "z", "kind": "zero_grad"}),
        "kind \"zero_grad\" needs \"version\" 2 (the document has version 1)",
    );
    bad(
        json!({"id": "b2", "kind": "backward", "input": "s", "retain_graph": false}),
        "field \"retain_graph\" of a backward needs \"version\" 2 (the document has version 1)",
    );
    let e =
        Program::from_json(&json!({"format": "difftest-program", "version": 3, "statements": []}))
            .unwrap_err();
    assert_eq!(e.message, "unsupported \"version\" 3 (expected 1 or 2)");
}

/// Element budget: a `grad` has its value's shape; a step holds new parameters.
#[test]
fn bounds_count_grads_and_steps() {
    let p = program(
        2,
        json!([
            {"id": "x", "kind": "leaf", "shape": [1000, 1000], "data": vec![0.0; 1_000_000],
             "device": "autodiff", "require_grad": true},
            {"id": "s", "kind": "op", "op": "sum", "inputs": ["x"]},
            {"id": "bw", "kind": "backward", "input": "s"},
            {"id": "g1", "kind": "grad", "grads": "bw", "of": "x"},
            {"id": "g2", "kind": "grad", "grads": "bw", "of": "x"},
            {"id": "g3", "kind": "grad", "grads": "bw", "of": "x"},
            {"id": "g4", "kind": "grad", "grads": "bw", "of": "x"}
        ]),
    )
    .unwrap();
    let e = p.check_bounds().unwrap_err();
    // 1e6 (x) + 1 (s) + 3 x 1e6 (g1..g3) passes the program budget at g3.
    assert_eq!(e.statement.as_deref(), Some("g3"), "{e}");
}
