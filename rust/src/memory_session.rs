//! The memory session experiment (docs/semantics.md#golden-memory-session): resident memory
//! during a training session, and the seed's drop/keep rows within one.
//!
//! A `Linear` `n`→`n` (no bias) is trained on a fixed batch (`x`, `t`: `batch`×`n`) with
//! `loss = ((fc(x) - t)^2).mean()`, backward, and an SGD step (lr 0.01, momentum 0.9: the
//! optimizer keeps one buffer per parameter). After `warmup` steps the resident set is the
//! base; `steps` more steps follow, with the growth over the base sampled after each (row
//! `"K steps"`: the largest sample). Then, as in the seed's table, `iters` forwards of the loss
//! without backward, each result dropped (`drop`: row `"K forwards"`; then one training step,
//! row `"then one step"`; then `iters` more forwards, row `"K more forwards"`) or kept alive
//! (`keep`: row `"K forwards"`). The reading is only meaningful in a fresh process.

use burn::nn::{Linear, LinearConfig};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::{Distribution, Tensor};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::memory::{MIB, MemoryRow, field_u64, rss_bytes};
use crate::request::RequestError;
use crate::step::Devices;

pub const SESSION_MODES: [&str; 2] = ["drop", "keep"];
const MAX_N: u64 = 4096;
const MAX_STEPS: u64 = 10_000;
const LR: f64 = 0.01;
const MOMENTUM: f64 = 0.9;

#[derive(Clone, Debug, Serialize)]
pub struct SessionReport {
    pub mode: String,
    pub n: usize,
    pub batch: usize,
    pub warmup: usize,
    pub steps: usize,
    pub iters: usize,
    /// Growth over the base after each of the `steps` steps, in MiB.
    pub samples_mib: Vec<f64>,
    pub rows: Vec<MemoryRow>,
}

/// Sizes and counts of one session.
#[derive(Clone, Copy, Debug)]
pub struct SessionSize {
    pub n: usize,
    pub batch: usize,
    pub warmup: usize,
    pub steps: usize,
    pub iters: usize,
}

/// The training session: the module, its data and optimizer.
struct Session {
    fc: Linear,
    x: Tensor<2>,
    t: Tensor<2>,
    optim: ModuleOptimizer,
}

impl Session {
    fn new(n: usize, batch: usize) -> Self {
        let devices = Devices::new(); // seeds the backend's RNG
        let device = &devices.autodiff;
        let uniform = Distribution::Uniform(-1.0, 1.0);
        let momentum = MomentumConfig {
            momentum: MOMENTUM,
            dampening: 0.0,
            nesterov: false,
        };
        Session {
            fc: LinearConfig::new(n, n).with_bias(false).init(device),
            x: Tensor::random([batch, n], uniform, device),
            t: Tensor::random([batch, n], uniform, device),
            optim: SgdConfig::new().with_momentum(Some(momentum)).init(),
        }
    }

    fn loss(&self) -> Tensor<1> {
        (self.fc.forward(self.x.clone()) - self.t.clone())
            .square()
            .mean()
    }

    /// Forward, backward, SGD step.
    fn train_step(&mut self) {
        let grads = self.loss().backward();
        let grads = GradientsParams::from_grads(grads, &self.fc);
        let fc = self.fc.clone();
        self.fc = self.optim.step(LR, fc, grads);
    }
}

fn growth(base: u64) -> f64 {
    (rss_bytes() as f64 - base as f64) / MIB
}

/// Runs one mode of the session experiment; `mode` must be one of [`SESSION_MODES`].
pub fn run(mode: &str, size: SessionSize) -> SessionReport {
    let mut s = Session::new(size.n, size.batch);
    for _ in 0..size.warmup {
        s.train_step();
    }
    let base = rss_bytes();
    let samples_mib: Vec<f64> = (0..size.steps)
        .map(|_| {
            s.train_step();
            growth(base)
        })
        .collect();
    let mut rows = vec![MemoryRow {
        label: format!("{} steps", size.steps),
        rss_growth_mib: samples_mib.iter().copied().fold(0.0, f64::max),
    }];
    let iters = size.iters;
    let mut kept = Vec::new();
    let forwards = |s: &Session, kept: &mut Vec<Tensor<1>>| {
        for _ in 0..iters {
            match mode {
                "drop" => drop(s.loss()),
                "keep" => kept.push(s.loss()),
                _ => unreachable!("mode checked by handle"),
            }
        }
    };
    forwards(&s, &mut kept);
    rows.push(MemoryRow {
        label: format!("{iters} forwards"),
        rss_growth_mib: growth(base),
    });
    if mode == "drop" {
        s.train_step();
        rows.push(MemoryRow {
            label: "then one step".to_owned(),
            rss_growth_mib: growth(base),
        });
        forwards(&s, &mut kept);
        rows.push(MemoryRow {
            label: format!("{iters} more forwards"),
            rss_growth_mib: growth(base),
        });
    }
    drop(kept);
    SessionReport {
        mode: mode.to_owned(),
        n: size.n,
        batch: size.batch,
        warmup: size.warmup,
        steps: size.steps,
        iters,
        samples_mib,
        rows,
    }
}

/// Parses `{"mode": M, "n": N, "batch": B, "warmup": W, "steps": K, "iters": I}` (defaults
/// n 1024, batch 1024, warmup 5, steps 50, iters 20) and runs it.
pub fn handle(obj: &Map<String, Value>) -> Result<SessionReport, RequestError> {
    let mode = obj.get("mode").and_then(Value::as_str).ok_or_else(|| {
        RequestError::new(
            "invalid-request",
            "a memory_session request needs a string \"mode\"",
        )
    })?;
    if !SESSION_MODES.contains(&mode) {
        return Err(RequestError::new(
            "invalid-request",
            format!("unknown memory session mode {mode:?} (expected one of {SESSION_MODES:?})"),
        ));
    }
    let size = SessionSize {
        n: field_u64(obj, "n", 1024, MAX_N)? as usize,
        batch: field_u64(obj, "batch", 1024, MAX_N)? as usize,
        warmup: field_u64(obj, "warmup", 5, MAX_STEPS)? as usize,
        steps: field_u64(obj, "steps", 50, MAX_STEPS)? as usize,
        iters: field_u64(obj, "iters", 20, MAX_STEPS)? as usize,
    };
    Ok(run(mode, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_requests() {
        let obj = |v: Value| v.as_object().cloned().unwrap();
        assert!(handle(&obj(serde_json::json!({}))).is_err());
        assert!(handle(&obj(serde_json::json!({"mode": "detach"}))).is_err());
        let e = handle(&obj(serde_json::json!({"mode": "drop", "steps": 0}))).unwrap_err();
        assert!(e.message.contains("\"steps\""), "{}", e.message);
    }

    #[test]
    fn small_session_reports_rows() {
        let size = SessionSize {
            n: 8,
            batch: 4,
            warmup: 1,
            steps: 3,
            iters: 2,
        };
        let r = run("drop", size);
        let labels: Vec<&str> = r.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            ["3 steps", "2 forwards", "then one step", "2 more forwards"]
        );
        assert_eq!(r.samples_mib.len(), 3);
        assert_eq!(run("keep", size).rows.len(), 2);
    }

    /// The session trains: the loss goes down.
    #[test]
    fn the_session_trains() {
        let mut s = Session::new(8, 16);
        let first: f32 = s.loss().into_scalar();
        for _ in 0..20 {
            s.train_step();
        }
        let last: f32 = s.loss().into_scalar();
        assert!(last < first, "{first} -> {last}");
    }
}
