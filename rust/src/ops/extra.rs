//! Tensor ops, activations and losses: the burn calls behind their [`Op::execute`] arms that
//! take more than one expression (the `ops!` table in rust/src/ops/mod.rs declares the ops; the
//! catalog's burn templates in difftest/ops/catalog.py spell the same calls).
//!
//! [`Op::execute`]: crate::ops::Op::execute

use burn::nn::loss::{BinaryCrossEntropyLossConfig, CrossEntropyLossConfig, MseLoss, Reduction};
use burn::tensor::{IndexingUpdateOp, Int, Tensor, TensorData, activation};

use super::{Inline, Range};
use crate::value::{DynTensor, int_tensor};

/// The two inputs of a binary op that must have one rank (no promotion), as `Tensor<D>`s bound
/// to `$x`, `$y` in `$body`; `$wrap` makes the result (`DynTensor::R{D}` for a rank-preserving
/// op, `identity` for a fixed result type).
macro_rules! same_rank {
    ($what:expr, $a:expr, $b:expr, $x:ident, $y:ident => $body:expr) => {
        same_rank!(@ $what, $a, $b, $x, $y, DynTensor::R1, DynTensor::R2, DynTensor::R3, DynTensor::R4 => $body)
    };
    (fixed $what:expr, $a:expr, $b:expr, $x:ident, $y:ident => $body:expr) => {
        same_rank!(@ $what, $a, $b, $x, $y, std::convert::identity, std::convert::identity,
                   std::convert::identity, std::convert::identity => $body)
    };
    (@ $what:expr, $a:expr, $b:expr, $x:ident, $y:ident, $w1:path, $w2:path, $w3:path, $w4:path => $body:expr) => {
        match ($a, $b) {
            (DynTensor::R1($x), DynTensor::R1($y)) => $w1($body),
            (DynTensor::R2($x), DynTensor::R2($y)) => $w2($body),
            (DynTensor::R3($x), DynTensor::R3($y)) => $w3($body),
            (DynTensor::R4($x), DynTensor::R4($y)) => $w4($body),
            (a, b) => panic!(
                "{}: inputs have ranks {} and {}; they must match",
                $what,
                a.rank(),
                b.rank()
            ),
        }
    };
}

/// `scatter`: `values` (the indices' shape) combined by `update` into `t` at the positions
/// `indices` gives along `dim` (PyTorch `scatter_add`, `scatter`, `scatter_reduce`; the updates
/// other than `Add` with distinct positions, which burn's backwards assume).
pub fn scatter(
    t: DynTensor,
    values: DynTensor,
    dim: usize,
    indices: &Inline<i64>,
    update: IndexingUpdateOp,
) -> DynTensor {
    same_rank!("scatter", t, values, a, b => {
        let idx = int_tensor(&indices.data, &indices.shape, &a.device());
        a.scatter(dim, idx, b, update)
    })
}

/// `select_assign`: `values` combined by `update` into `t` at the indices along `dim` (PyTorch
/// `index_add`, `index_copy`, `index_reduce`; the updates other than `Add` with distinct indices).
pub fn select_assign(
    t: DynTensor,
    values: DynTensor,
    dim: usize,
    indices: &[i64],
    update: IndexingUpdateOp,
) -> DynTensor {
    same_rank!("select_assign", t, values, a, b => {
        let data = TensorData::new(indices.to_vec(), [indices.len()]);
        let idx = Tensor::<1, Int>::from_data(data, &a.device());
        a.select_assign(dim, idx, b, update)
    })
}

/// `slice_assign`: `values` replace the slice `ranges` cuts (step 1, leading dims).
pub fn slice_assign(t: DynTensor, values: DynTensor, ranges: &[Range]) -> DynTensor {
    let slices: Vec<burn::tensor::Slice> = ranges
        .iter()
        .map(|r| burn::tensor::Slice::new(r.0 as isize, Some(r.1 as isize), 1))
        .collect();
    same_rank!("slice_assign", t, values, a, b => a.slice_assign(&slices, b))
}

fn rank2(what: &str, x: DynTensor) -> Tensor<2> {
    match x {
        DynTensor::R2(t) => t,
        other => panic!(
            "{what}: takes [batch, classes], got a rank-{} tensor",
            other.rank()
        ),
    }
}

/// burn-nn's `CrossEntropyLoss` (logits, mean over the batch) with one class index per row.
pub fn cross_entropy(logits: DynTensor, targets: &[i64]) -> DynTensor {
    let t = rank2("cross_entropy", logits);
    let device = t.device();
    let data = TensorData::new(targets.to_vec(), [targets.len()]);
    let targets = Tensor::<1, Int>::from_data(data, &device);
    DynTensor::R1(
        CrossEntropyLossConfig::new()
            .init(&device)
            .forward(t, targets),
    )
}

/// `burn::tensor::loss::cross_entropy_with_logits`: logits and probability targets.
pub fn cross_entropy_with_logits(logits: DynTensor, targets: DynTensor) -> DynTensor {
    let x = rank2("cross_entropy_with_logits", logits);
    let y = rank2("cross_entropy_with_logits", targets);
    DynTensor::R1(burn::tensor::loss::cross_entropy_with_logits(x, y))
}

/// burn-nn's `MseLoss` with `Reduction::Mean`.
pub fn mse_loss(x: DynTensor, y: DynTensor) -> DynTensor {
    DynTensor::R1(same_rank!(fixed "mse_loss", x, y, a, b => {
        MseLoss::new().forward(a, b, Reduction::Mean)
    }))
}

/// burn-nn's `BinaryCrossEntropyLoss` (mean): `logits` says whether the input is logits or
/// probabilities; the targets are 0/1 of the input's shape.
pub fn binary_cross_entropy(x: DynTensor, targets: &Inline<i64>, logits: bool) -> DynTensor {
    DynTensor::R1(crate::apply!(x, t => {
        let device = t.device();
        let tg = int_tensor(&targets.data, &targets.shape, &device);
        BinaryCrossEntropyLossConfig::new()
            .with_logits(logits)
            .init(&device)
            .forward(t, tg)
    }))
}

/// `activation::prelu`: the weight (input 1) is rank 1, `[1]` or `[channels]`.
pub fn prelu(x: DynTensor, weight: DynTensor) -> DynTensor {
    let w = match weight {
        DynTensor::R1(w) => w,
        other => panic!(
            "prelu: the weight must be rank 1, got rank {}",
            other.rank()
        ),
    };
    crate::map!(x, t => activation::prelu(t, w))
}

/// `narrow`, with the start checked (the catalog's type for it is a signed int).
pub fn narrow(x: DynTensor, dim: usize, start: i64, length: usize) -> DynTensor {
    let start =
        usize::try_from(start).unwrap_or_else(|_| panic!("narrow: start {start} is negative"));
    crate::map!(x, t => t.narrow(dim, start, length))
}

/// Output `part` of an op with several outputs (`chunk`, `split`, `var_mean`).
pub fn part<T>(what: &str, mut outputs: Vec<T>, part: i64) -> T {
    let n = outputs.len();
    match usize::try_from(part) {
        Ok(i) if i < n => outputs.swap_remove(i),
        _ => panic!("{what}: part {part} does not exist ({n} outputs)"),
    }
}

/// The lengths of burn's `chunk` pieces along a dim of `size` (burn-tensor 0.22.1
/// `Tensor::chunk`), or `None` where burn's own arithmetic overruns the dim (it panics).
pub fn burn_chunk_lengths(size: usize, chunks: usize) -> Option<Vec<usize>> {
    if chunks == 0 {
        return None;
    }
    if size < chunks {
        return Some(vec![1; size]);
    }
    if size.is_multiple_of(chunks) {
        return Some(vec![size / chunks; chunks]);
    }
    let step = size / chunks + 1;
    let head = step * (chunks - 1);
    let last = size % step;
    (head + last == size && last > 0).then(|| {
        let mut lengths = vec![step; chunks - 1];
        lengths.push(last);
        lengths
    })
}

/// The lengths of `split` pieces of `split_size` along a dim of `size` (the last shorter).
pub fn split_lengths(size: usize, split_size: usize) -> Vec<usize> {
    (0..size)
        .step_by(split_size.max(1))
        .map(|start| split_size.min(size - start))
        .collect()
}
