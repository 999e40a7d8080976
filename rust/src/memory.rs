//! The memory experiment of DESIGN.md golden output 4: how resident memory grows when a
//! forward on the autodiff device is repeated without a backward.
//!
//! `p` is an `n`×`n` f32 parameter requiring grad; `forward(p) = ((p.exp() * p) @ p).sum()`
//! saves two `n`×`n` tensors for backward (the exp output for the product, the product for the
//! matmul). After one warm-up forward+backward, the forward is repeated `iters` times and the
//! growth of the resident set over the base is reported. burn keeps every forward's graph in a
//! process-wide structure until the next `backward()`, so the `drop` mode grows; the reading
//! is only meaningful in a fresh process (the Python side starts one worker per mode).

use burn::tensor::{Device, Distribution, Tensor};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::protocol::{RequestError, rss_bytes};

/// The modes of the experiment, as the seed names them.
pub const MODES: [&str; 4] = ["drop", "keep", "without-autodiff", "detach"];
const MAX_N: u64 = 8192;
const MAX_ITERS: u64 = 10_000;
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Clone, Debug, Serialize)]
pub struct MemoryRow {
    pub label: String,
    pub rss_growth_mib: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryReport {
    pub mode: String,
    pub n: usize,
    pub iters: usize,
    pub rows: Vec<MemoryRow>,
    pub saved_bytes_per_forward: u64,
}

fn forward(p: &Tensor<2>) -> Tensor<1> {
    ((p.clone().exp() * p.clone()).matmul(p.clone())).sum()
}

fn field_u64(
    obj: &Map<String, Value>,
    name: &str,
    default: u64,
    max: u64,
) -> Result<u64, RequestError> {
    match obj.get(name) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|&x| (1..=max).contains(&x))
            .ok_or_else(|| {
                RequestError::new(
                    "invalid-request",
                    format!("\"{name}\" must be an integer from 1 to {max}, got {v}"),
                )
            }),
    }
}

/// Parses `{"mode": M, "n": N, "iters": K}` (n defaults to 1024, iters to 20) and runs it.
pub fn handle(obj: &Map<String, Value>) -> Result<MemoryReport, RequestError> {
    let mode = obj.get("mode").and_then(Value::as_str).ok_or_else(|| {
        RequestError::new(
            "invalid-request",
            "a memory request needs a string \"mode\"",
        )
    })?;
    if !MODES.contains(&mode) {
        return Err(RequestError::new(
            "invalid-request",
            format!("unknown memory mode {mode:?} (expected one of {MODES:?})"),
        ));
    }
    let n = field_u64(obj, "n", 1024, MAX_N)? as usize;
    let iters = field_u64(obj, "iters", 20, MAX_ITERS)? as usize;
    Ok(run(mode, n, iters))
}

fn growth(base: u64) -> f64 {
    (rss_bytes() as f64 - base as f64) / MIB
}

/// Runs one mode of the experiment; `mode` must be one of [`MODES`].
pub fn run(mode: &str, n: usize, iters: usize) -> MemoryReport {
    let plain = Device::flex();
    let ad = if plain.is_autodiff() {
        plain
    } else {
        plain.autodiff()
    };
    let p = Tensor::<2>::random([n, n], Distribution::Default, &ad).require_grad();
    let _ = forward(&p).backward(); // warm up allocator and kernels
    let base = rss_bytes();
    let mut kept = Vec::new();
    let mut rows = Vec::new();
    let repeat = |kept: &mut Vec<Tensor<1>>| {
        for _ in 0..iters {
            match mode {
                "drop" => drop(forward(&p)),
                "keep" => kept.push(forward(&p)),
                "without-autodiff" => drop(forward(&p.clone().without_autodiff())),
                "detach" => drop(forward(&p.clone().detach())),
                _ => unreachable!("mode checked by handle"),
            }
        }
    };
    repeat(&mut kept);
    rows.push(MemoryRow {
        label: format!("{iters} forwards"),
        rss_growth_mib: growth(base),
    });
    if mode == "drop" {
        let _ = forward(&p).backward();
        rows.push(MemoryRow {
            label: "then one backward".to_owned(),
            rss_growth_mib: growth(base),
        });
        repeat(&mut kept);
        rows.push(MemoryRow {
            label: format!("{iters} more forwards"),
            rss_growth_mib: growth(base),
        });
    }
    drop(kept);
    let elem = std::mem::size_of::<f32>() as u64;
    MemoryReport {
        mode: mode.to_owned(),
        n,
        iters,
        rows,
        saved_bytes_per_forward: 2 * (n as u64) * (n as u64) * elem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_requests() {
        let obj = |v: Value| v.as_object().cloned().unwrap();
        assert!(handle(&obj(serde_json::json!({}))).is_err());
        assert!(handle(&obj(serde_json::json!({"mode": "nope"}))).is_err());
        assert!(handle(&obj(serde_json::json!({"mode": "drop", "n": 0}))).is_err());
        assert!(handle(&obj(serde_json::json!({"mode": "drop", "iters": -1}))).is_err());
    }

    #[test]
    fn small_run_reports_rows() {
        let r = run("drop", 8, 2);
        let labels: Vec<&str> = r.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            ["2 forwards", "then one backward", "2 more forwards"]
        );
        assert_eq!(r.saved_bytes_per_forward, 2 * 8 * 8 * 4);
        assert_eq!(run("keep", 8, 2).rows.len(), 1);
    }
}
