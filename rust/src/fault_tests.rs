//! Unit tests of the fault specs and hooks (`fault.rs`), kept apart to keep that file short.

use super::*;
use crate::apply;
use burn::tensor::Device;
use serde_json::Map;

#[test]
fn parses_every_form() {
    assert!(matches!(
        parse("grad-scale:tanh:1e-3"),
        Ok(Fault::GradScale { op: "tanh", eps }) if eps == 1e-3
    ));
    assert!(matches!(
        parse("grad-scale-tail:sigmoid:1e-2:3"),
        Ok(Fault::GradScaleTail { op: "sigmoid", eps, t }) if eps == 1e-2 && t == 3.0
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
    assert!(matches!(
        parse("hang:cumsum"),
        Ok(Fault::Hang { op: "cumsum" })
    ));
    assert!(matches!(parse("abort:exp"), Ok(Fault::Abort { op: "exp" })));
    assert!(matches!(
        parse("value-shift:sin:1e-7"),
        Ok(Fault::ValueShift { op: "sin", delta }) if delta == 1e-7
    ));
    assert!(matches!(
        parse("kink-grad:abs:1"),
        Ok(Fault::KinkGrad { op: "abs", g }) if g == 1.0
    ));
    assert!(matches!(
        parse("root-grad-scale:1e-3"),
        Ok(Fault::RootGradScale { eps }) if eps == 1e-3
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
        "grad-scale-tail:sigmoid:1e-2",
        "grad-scale-tail:sigmoid:1e-2:x",
        "root-grad-scale",
        "root-grad-scale:x",
        "root-grad-scale:tanh:1e-3",
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
        "value-shift:sin",
        "kink-grad:abs",
        "hang:frob",
        "hang",
        "abort:exp:1",
        "value-shift:sin:inf",
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

/// `grad-scale-beside-constant` scales the tracked inputs' gradients only when another input
/// of the op is a constant, and keeps the forward.
#[test]
fn grad_scale_beside_constant_needs_a_constant_input() {
    let mul = Op::parse("mul", &Map::new()).unwrap();
    let fault = parse("grad-scale-beside-constant:mul:0.5").unwrap();
    let constant = || DynTensor::from_f32(vec![2.0, 3.0], &[2], &Device::flex().autodiff());
    let (a, b) = (leaf(vec![1.0, -1.0]), leaf(vec![2.0, 3.0]));
    let both = execute_with(Some(&fault), &mul, vec![a.clone(), b]);
    assert_eq!(
        grad(&a, both),
        vec![2.0, 3.0],
        "both inputs tracked: no fault"
    );
    let a = leaf(vec![1.0, -1.0]);
    let y = execute_with(Some(&fault), &mul, vec![a.clone(), constant()]);
    assert_eq!(y.read().1, vec![2.0, -3.0], "forward changed");
    assert_eq!(grad(&a, y), vec![3.0, 4.5], "beside a constant: times 1.5");
}

/// `grad-scale-tail` scales the gradient only where |x| > t, and keeps the forward bit-exact
/// (`-0.0` included).
#[test]
fn grad_scale_tail_acts_in_the_tail_only() {
    let sigmoid = Op::parse("sigmoid", &Map::new()).unwrap();
    let data = vec![-0.0, 0.5, -4.0, 5.0];
    let x = leaf(data.clone());
    let clean = execute_with(None, &sigmoid, vec![x.clone()]);
    let g_clean = grad(&x, clean.clone());
    let fault = parse("grad-scale-tail:sigmoid:0.5:3").unwrap();
    let x = leaf(data);
    let y = execute_with(Some(&fault), &sigmoid, vec![x.clone()]);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&y.read().1), bits(&clean.read().1), "forward changed");
    let g = grad(&x, y);
    for (i, factor) in [1.0f32, 1.0, 1.5, 1.5].into_iter().enumerate() {
        assert!(
            (g[i] - g_clean[i] * factor).abs() <= 1e-6 * g_clean[i].abs(),
            "element {i}: {} vs {}",
            g[i],
            g_clean[i]
        );
    }
}

/// `root-grad-scale` scales every gradient of a backward rooted at a non-scalar value, and
/// leaves a scalar root's backward (and the forward) alone.
#[test]
fn root_grad_scale_acts_on_non_scalar_roots_only() {
    let fault = parse("root-grad-scale:0.5").unwrap();
    let grad_of_root = |root: fn(DynTensor) -> DynTensor| {
        let x = leaf(vec![1.0, -2.0]);
        let y = root(x.clone());
        let (_, before) = y.read();
        let y = backward_root_with(Some(&fault), y);
        assert_eq!(y.read().1, before, "the forward is unchanged");
        let grads = apply!(y, t => t.backward());
        let DynTensor::R1(x) = x else { panic!() };
        x.grad(&grads).unwrap().try_to_vec_as::<f32>().unwrap()
    };
    assert_eq!(grad_of_root(|x| x), vec![1.5, 1.5]);
    assert_eq!(
        grad_of_root(|x| map!(x, t => t.mul_scalar(2.0))),
        vec![3.0, 3.0]
    );
    assert_eq!(grad_of_root(|x| map!(x, t => t.sum_dim(0))), vec![1.0, 1.0]);
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

#[test]
fn a_fault_scoped_to_one_backend_acts_there_only() {
    use crate::backend::Backend;
    let (backend, fault) = parse_scoped("on:ndarray:grad-scale:exp:1e-3").unwrap();
    assert_eq!(backend, Some(Backend::NdArray));
    assert!(matches!(fault, Fault::GradScale { op: "exp", eps } if eps == 1e-3));
    let scoped = Active {
        spec: "on:ndarray:grad-scale:exp:1e-3".into(),
        fault: fault.clone(),
        backend,
    };
    assert!(scoped.acts_on(Backend::NdArray));
    assert!(!scoped.acts_on(Backend::Flex) && !scoped.acts_on(Backend::Wgpu));
    let (none, _) = parse_scoped("grad-scale:exp:1e-3").unwrap();
    let everywhere = Active {
        spec: "grad-scale:exp:1e-3".into(),
        fault,
        backend: none,
    };
    assert!(Backend::ALL.into_iter().all(|b| everywhere.acts_on(b)));
    for bad in [
        "on:cuda:grad-sign:exp",
        "on:ndarray",
        "on:ndarray:nonsense",
        "on:flex:on:ndarray:grad-sign:exp",
    ] {
        assert!(parse_scoped(bad).is_err(), "{bad}");
    }
}

#[test]
fn parses_broadcast_grad_scale() {
    assert!(matches!(
        parse("broadcast-grad-scale:1e-3"),
        Ok(Fault::BroadcastGradScale { op: None, eps }) if eps == 1e-3
    ));
    assert!(matches!(
        parse("broadcast-grad-scale:sub:0.25"),
        Ok(Fault::BroadcastGradScale { op: Some("sub"), eps }) if eps == 0.25
    ));
    assert!(parse("broadcast-grad-scale:nonsense:0.25").is_err());
    assert!(parse("broadcast-grad-scale:nan").is_err());
    assert!(parse("broadcast-grad-scale").is_err());
}
