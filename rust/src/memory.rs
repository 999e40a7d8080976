//! The memory experiment of docs/semantics.md#golden-memory: how resident memory grows when a
//! forward on the autodiff device is repeated without a backward.
//!
//! `p` is an `n`×`n` f32 parameter requiring grad; `forward(p) = ((p.exp() * p) @ p).sum()`
//! saves two `n`×`n` tensors for backward (the exp output for the product, the product for the
//! matmul). After one warm-up forward+backward, the forward is repeated `iters` times and the
//! growth of the resident set over the base is reported. burn keeps every forward's graph in a
//! process-wide structure until the next `backward()`, so the `drop` mode grows; the reading
//! is only meaningful in a fresh process (the Python side starts one worker per mode).
//!
//! The `memory_program` request generalises the experiment to any program made of `leaf`,
//! `op`, `cut` and `backward` statements: its leaves are created once, its *forward part*
//! (the ops and cuts before the first backward) is run once together with that backward as
//! warm-up, then repeated `iters` times with every result dropped (and, when the program has a
//! backward, followed by one forward+backward and `iters` more forwards). Its statements execute
//! as in a run ([`crate::step`]).

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::{Distribution, Tensor};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::program::{Kind, Program, Statement};
use crate::request::RequestError;
use crate::step::{self, Devices, panic_message};
use crate::value::DynTensor;

/// The modes of the experiment, as the seed names them.
pub const MODES: [&str; 4] = ["drop", "keep", "without-autodiff", "detach"];
const MAX_N: u64 = 8192;
const MAX_ITERS: u64 = 10_000;
pub const MIB: f64 = 1024.0 * 1024.0;

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

pub fn field_u64(
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

/// Resident set size from `/proc/self/statm` (pages × 4096), or 0 when unavailable.
pub fn rss_bytes() -> u64 {
    const PAGE_SIZE: u64 = 4096;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * PAGE_SIZE)
}

fn growth(base: u64) -> f64 {
    (rss_bytes() as f64 - base as f64) / MIB
}

/// Runs one mode of the experiment; `mode` must be one of [`MODES`].
pub fn run(mode: &str, n: usize, iters: usize) -> MemoryReport {
    let plain = crate::backend::current().device();
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

/// What a `memory_program` request measured.
#[derive(Clone, Debug, Serialize)]
pub struct ProgramMemoryReport {
    pub iters: usize,
    /// Ops and cuts re-run by one forward (the statements before the first backward).
    pub forward_statements: usize,
    /// The id of the first backward, whose root the warm-up (and the optional later
    /// backward) differentiates; null when the program has none.
    pub backward: Option<String>,
    pub rows: Vec<MemoryRow>,
}

/// The parts of a program the repeated-forward experiment runs.
struct Plan<'a> {
    statements: &'a [Statement],
    /// Index of the first backward statement (the forward part is everything before it).
    end: usize,
    /// The first backward's root, an index into `statements`.
    root: Option<usize>,
}

impl<'a> Plan<'a> {
    fn of(program: &'a Program) -> Result<Self, RequestError> {
        let statements = program.statements.as_slice();
        let end = statements
            .iter()
            .position(|s| matches!(s.kind, Kind::Backward { .. }))
            .unwrap_or(statements.len());
        if let Some((i, s)) = statements[..end].iter().enumerate().find(|(_, s)| {
            !matches!(
                s.kind,
                Kind::Leaf { .. } | Kind::Op { .. } | Kind::Cut { .. }
            )
        }) {
            return Err(RequestError {
                index: Some(i),
                statement: Some(s.id.clone()),
                ..RequestError::new(
                    "invalid-request",
                    format!(
                        "a memory program uses leaf, op, cut and backward statements, not {}",
                        s.kind_name()
                    ),
                )
            });
        }
        let root = statements.get(end).map(|s| match s.kind {
            Kind::Backward { input } => input,
            _ => unreachable!("end is a backward"),
        });
        Ok(Plan {
            statements,
            end,
            root,
        })
    }

    /// The leaves, created once; other slots empty.
    fn leaves(&self, devices: &Devices) -> Vec<Option<DynTensor>> {
        self.statements[..self.end]
            .iter()
            .map(|s| match s.kind {
                Kind::Leaf { .. } => step::tensor(&s.kind, devices, |_| unreachable!("no inputs")),
                _ => None,
            })
            .collect()
    }

    /// One forward: every op and cut before the first backward, on the given leaves. The
    /// returned slots hold every result (dropping them drops the forward's tensors).
    fn forward(&self, devices: &Devices, leaves: &[Option<DynTensor>]) -> Vec<Option<DynTensor>> {
        let mut env = leaves.to_vec();
        for (i, s) in self.statements[..self.end].iter().enumerate() {
            if matches!(s.kind, Kind::Leaf { .. }) {
                continue; // already in place
            }
            let value = step::tensor(&s.kind, devices, |j| {
                env[j].clone().expect("inputs are earlier values")
            });
            env[i] = value;
        }
        env
    }

    /// One forward, then the backward of the first backward's root (gradients dropped).
    fn forward_backward(&self, devices: &Devices, leaves: &[Option<DynTensor>]) {
        let env = self.forward(devices, leaves);
        if let Some(root) = self.root {
            let t = env[root].clone().expect("the backward's root is a value");
            drop(crate::apply!(t, t => t.backward()));
        }
    }

    fn run(&self, iters: usize, then_backward: bool) -> ProgramMemoryReport {
        let devices = Devices::new();
        let leaves = self.leaves(&devices);
        self.forward_backward(&devices, &leaves); // warm-up: allocator, kernels, graph machinery
        let base = rss_bytes();
        let repeat = || {
            for _ in 0..iters {
                drop(self.forward(&devices, &leaves));
            }
        };
        repeat();
        let mut rows = vec![MemoryRow {
            label: format!("{iters} forwards"),
            rss_growth_mib: growth(base),
        }];
        if then_backward && self.root.is_some() {
            self.forward_backward(&devices, &leaves);
            rows.push(MemoryRow {
                label: "then one backward".to_owned(),
                rss_growth_mib: growth(base),
            });
            repeat();
            rows.push(MemoryRow {
                label: format!("{iters} more forwards"),
                rss_growth_mib: growth(base),
            });
        }
        let forward_statements = self.statements[..self.end]
            .iter()
            .filter(|s| matches!(s.kind, Kind::Op { .. } | Kind::Cut { .. }))
            .count();
        ProgramMemoryReport {
            iters,
            forward_statements,
            backward: self.root.map(|_| self.statements[self.end].id.clone()),
            rows,
        }
    }
}

/// Parses `{"program": {...}, "iters": K, "then_backward": B}` (iters defaults to 20,
/// then_backward to true) and runs the repeated-forward experiment on the program. A burn
/// panic fails the request (kind `panic`): a memory reading of a failed run means nothing.
pub fn handle_program(obj: &Map<String, Value>) -> Result<ProgramMemoryReport, RequestError> {
    let doc = obj.get("program").ok_or_else(|| {
        RequestError::new(
            "invalid-request",
            "a memory_program request needs a \"program\"",
        )
    })?;
    let program = Program::from_json(doc)?;
    let iters = field_u64(obj, "iters", 20, MAX_ITERS)? as usize;
    let then_backward = match obj.get("then_backward") {
        None => true,
        Some(v) => v.as_bool().ok_or_else(|| {
            RequestError::new(
                "invalid-request",
                format!("\"then_backward\" must be a boolean, got {v}"),
            )
        })?,
    };
    let plan = Plan::of(&program)?;
    catch_unwind(AssertUnwindSafe(|| plan.run(iters, then_backward))).map_err(|p| {
        RequestError::new(
            "panic",
            format!("the memory program panicked: {}", panic_message(&*p)),
        )
    })
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

    fn program(statements: Value) -> Map<String, Value> {
        serde_json::json!({
            "program": {"format": "difftest-program", "version": 1, "statements": statements},
            "iters": 2,
        })
        .as_object()
        .cloned()
        .unwrap()
    }

    #[test]
    fn program_rows() {
        let obj = program(serde_json::json!([
            {"id": "p", "kind": "leaf", "shape": [2, 2], "data": [1.0, 2.0, 3.0, 4.0],
             "device": "autodiff", "require_grad": true},
            {"id": "a", "kind": "op", "op": "sin", "inputs": ["p"]},
            {"id": "d", "kind": "cut", "cut": "detach", "input": "a"},
            {"id": "s", "kind": "op", "op": "sum", "inputs": ["a"]},
            {"id": "bw", "kind": "backward", "input": "s"},
            {"id": "t", "kind": "op", "op": "exp", "inputs": ["s"]}
        ]));
        let r = handle_program(&obj).unwrap();
        let labels: Vec<&str> = r.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            ["2 forwards", "then one backward", "2 more forwards"]
        );
        assert_eq!(r.forward_statements, 3);
        assert_eq!(r.backward.as_deref(), Some("bw"));
    }

    #[test]
    fn program_rejects_modules_and_reports_panics() {
        let obj = program(serde_json::json!([
            {"id": "dr", "kind": "module", "module": "dropout", "p": 0.5}
        ]));
        assert_eq!(handle_program(&obj).unwrap_err().index, Some(0));
        let obj = program(serde_json::json!([
            {"id": "p", "kind": "leaf", "shape": [2], "data": [1.0, 2.0],
             "device": "autodiff", "require_grad": true},
            {"id": "q", "kind": "leaf", "shape": [3], "data": [1.0, 2.0, 3.0],
             "device": "autodiff", "require_grad": true},
            {"id": "a", "kind": "op", "op": "add", "inputs": ["p", "q"]}
        ]));
        assert_eq!(handle_program(&obj).unwrap_err().kind, "panic");
    }
}
