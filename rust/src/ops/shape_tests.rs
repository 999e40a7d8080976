//! Unit tests of the shape inference (`shape.rs`) against what burn computes.

use burn::tensor::Device;
use serde_json::{Map, Value, json};

use crate::ops::Op;
use crate::value::DynTensor;

/// `infer_shape` agrees with what burn computes.
#[test]
fn inferred_shapes_match_burn() {
    let device = Device::flex();
    let t = |shape: &[usize]| {
        let n = shape.iter().product();
        DynTensor::from_f32(vec![0.5; n], shape, &device)
    };
    let cases: Vec<(&str, Value, Vec<Vec<usize>>)> = vec![
        ("exp", json!({}), vec![vec![2, 3]]),
        ("add", json!({}), vec![vec![3], vec![2, 1, 3]]),
        ("mul", json!({}), vec![vec![2, 1], vec![1, 4]]),
        ("matmul", json!({}), vec![vec![2, 3], vec![5, 3, 4]]),
        ("matmul", json!({}), vec![vec![2, 1, 2, 3], vec![3, 3, 1]]),
        ("sum", json!({}), vec![vec![2, 3]]),
        ("max_dim", json!({"dim": 1}), vec![vec![2, 3, 4]]),
        ("softmax", json!({"dim": 0}), vec![vec![2, 3]]),
        ("reshape", json!({"shape": [3, 2]}), vec![vec![6]]),
        ("transpose", json!({}), vec![vec![2, 3, 4]]),
        (
            "swap_dims",
            json!({"dim1": 0, "dim2": 2}),
            vec![vec![2, 3, 4]],
        ),
        ("permute", json!({"axes": [2, 0, 1]}), vec![vec![2, 3, 4]]),
        ("unsqueeze", json!({"dim": 1}), vec![vec![2, 3]]),
        (
            "unfold",
            json!({"dim": 1, "size": 2, "step": 1}),
            vec![vec![2, 4, 3]],
        ),
        (
            "unfold",
            json!({"dim": 0, "size": 3, "step": 2}),
            vec![vec![6]],
        ),
        (
            "gather_nd",
            json!({"indices": {"shape": [3, 2], "data": [0, 1, 1, 0, 0, 1]}}),
            vec![vec![2, 2, 4]],
        ),
        (
            "scatter_nd",
            json!({"indices": {"shape": [2, 1], "data": [1, 1]}}),
            vec![vec![2, 3, 4], vec![2, 3, 4]],
        ),
        ("squeeze", json!({"dim": 1}), vec![vec![2, 1, 3]]),
        ("slice", json!({"ranges": [[1, 3]]}), vec![vec![4, 2]]),
        ("cat", json!({"dim": 1}), vec![vec![2, 3], vec![2, 1]]),
        (
            "stack",
            json!({"dim": 2}),
            vec![vec![2, 3], vec![2, 3], vec![2, 3]],
        ),
        ("expand", json!({"shape": [4, 2, 3]}), vec![vec![1, 3]]),
        (
            "repeat_dim",
            json!({"dim": 0, "times": 3}),
            vec![vec![2, 3]],
        ),
        (
            "gather",
            json!({"dim": 1, "indices": {"shape": [2, 1], "data": [0, 2]}}),
            vec![vec![2, 3]],
        ),
        (
            "select",
            json!({"dim": 1, "indices": [0, 0, 2, 1]}),
            vec![vec![2, 3]],
        ),
        (
            "mask_where",
            json!({"mask": {"shape": [2], "data": [true, false]}}),
            vec![vec![2], vec![2]],
        ),
        // tensor ops, activations, losses
        (
            "scatter",
            json!({"dim": 1, "indices": {"shape": [2, 1], "data": [0, 2]}}),
            vec![vec![2, 3], vec![2, 1]],
        ),
        (
            "select_assign",
            json!({"dim": 0, "indices": [1, 1, 0]}),
            vec![vec![2, 3], vec![3, 3]],
        ),
        (
            "select_replace",
            json!({"dim": 1, "indices": [2, 0]}),
            vec![vec![2, 3], vec![2, 2]],
        ),
        (
            "scatter_replace",
            json!({"dim": 1, "indices": {"shape": [2, 2], "data": [0, 2, 1, 0]}}),
            vec![vec![2, 3], vec![2, 2]],
        ),
        (
            "scatter_mul",
            json!({"dim": 1, "indices": {"shape": [2, 2], "data": [0, 2, 1, 0]}}),
            vec![vec![2, 3], vec![2, 2]],
        ),
        (
            "scatter_max",
            json!({"dim": 1, "indices": {"shape": [2, 2], "data": [0, 2, 1, 0]}}),
            vec![vec![2, 3], vec![2, 2]],
        ),
        (
            "scatter_min",
            json!({"dim": 1, "indices": {"shape": [2, 2], "data": [0, 2, 1, 0]}}),
            vec![vec![2, 3], vec![2, 2]],
        ),
        (
            "select_mul",
            json!({"dim": 0, "indices": [1]}),
            vec![vec![2, 3], vec![1, 3]],
        ),
        (
            "select_max",
            json!({"dim": 0, "indices": [1]}),
            vec![vec![2, 3], vec![1, 3]],
        ),
        (
            "select_min",
            json!({"dim": 0, "indices": [1]}),
            vec![vec![2, 3], vec![1, 3]],
        ),
        (
            "scatter_nd_replace",
            json!({"indices": {"shape": [2, 1], "data": [1, 0]}}),
            vec![vec![2, 3], vec![2, 3]],
        ),
        (
            "scatter_nd_mul",
            json!({"indices": {"shape": [2, 1], "data": [1, 0]}}),
            vec![vec![2, 3], vec![2, 3]],
        ),
        (
            "scatter_nd_max",
            json!({"indices": {"shape": [2, 1], "data": [1, 0]}}),
            vec![vec![2, 3], vec![2, 3]],
        ),
        (
            "scatter_nd_min",
            json!({"indices": {"shape": [2, 1], "data": [1, 0]}}),
            vec![vec![2, 3], vec![2, 3]],
        ),
        (
            "slice_assign",
            json!({"ranges": [[1, 3], [0, 1]]}),
            vec![vec![4, 2], vec![2, 1]],
        ),
        ("sort", json!({"dim": 1}), vec![vec![2, 3]]),
        ("sort_descending", json!({"dim": 0}), vec![vec![2, 3]]),
        ("topk", json!({"k": 2, "dim": 1}), vec![vec![2, 3, 4]]),
        (
            "cross_entropy",
            json!({"targets": [2, 0]}),
            vec![vec![2, 3]],
        ),
        (
            "cross_entropy_with_logits",
            json!({}),
            vec![vec![2, 3], vec![2, 3]],
        ),
        ("mse_loss", json!({}), vec![vec![2, 1, 3], vec![2, 1, 3]]),
        (
            "binary_cross_entropy",
            json!({"targets": {"shape": [3], "data": [0, 1, 1]}}),
            vec![vec![3]],
        ),
        (
            "binary_cross_entropy_with_logits",
            json!({"targets": {"shape": [2, 2], "data": [0, 1, 1, 0]}}),
            vec![vec![2, 2]],
        ),
        ("var", json!({"dim": 1}), vec![vec![2, 3]]),
        ("var_bias", json!({"dim": 0}), vec![vec![2, 3]]),
        ("tril", json!({"diagonal": -1}), vec![vec![2, 3, 3]]),
        ("triu", json!({"diagonal": 1}), vec![vec![3, 2]]),
        (
            "narrow",
            json!({"dim": 1, "start": 1, "length": 2}),
            vec![vec![2, 4]],
        ),
        ("remainder", json!({}), vec![vec![3], vec![2, 1]]),
        ("softplus", json!({"beta": 1.5}), vec![vec![2, 3]]),
        ("mish", json!({}), vec![vec![4]]),
        ("log_sigmoid", json!({}), vec![vec![4]]),
        ("hard_sigmoid", json!({}), vec![vec![4]]),
        ("prelu", json!({}), vec![vec![2, 3, 2], vec![3]]),
        ("prelu", json!({}), vec![vec![4], vec![1]]),
        ("quiet_softmax", json!({"dim": 0}), vec![vec![2, 3]]),
        ("gather_argmax", json!({"dim": 1}), vec![vec![2, 3]]),
        ("gather_argmin", json!({"dim": 0}), vec![vec![2, 3]]),
        ("gather_sort_indices", json!({"dim": 1}), vec![vec![2, 3]]),
        (
            "gather_topk_indices",
            json!({"k": 2, "dim": 1}),
            vec![vec![2, 3]],
        ),
        (
            "chunk",
            json!({"chunks": 3, "dim": 0, "part": 2}),
            vec![vec![5, 2]],
        ),
        (
            "split",
            json!({"split_size": 2, "dim": 1, "part": 1}),
            vec![vec![2, 3]],
        ),
        ("var_mean", json!({"dim": 1, "part": 1}), vec![vec![2, 3]]),
    ];
    // burn's chunk arithmetic, where it holds (chunk-uneven-pieces-panics: 4 in 3 does not)
    assert_eq!(
        crate::ops::extra::burn_chunk_lengths(7, 3),
        Some(vec![3, 3, 1])
    );
    assert_eq!(crate::ops::extra::burn_chunk_lengths(4, 3), None);
    for (name, attrs, shapes) in cases {
        let op = Op::parse(name, attrs.as_object().unwrap()).unwrap();
        let inputs: Vec<DynTensor> = shapes.iter().map(|s| t(s)).collect();
        let got = op.execute(inputs).dims();
        assert_eq!(op.infer_shape(&shapes), Some(got), "{name} {shapes:?}");
    }
    let add = Op::parse("add", &Map::new()).unwrap();
    assert_eq!(add.infer_shape(&[vec![2], vec![3]]), None);
}
