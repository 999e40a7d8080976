//! The `probe` request: root probes (difftest/oracle/probes.py). Each probe names one of the
//! program's backwards and another value to root it at; the worker runs the program's
//! statements before that backward, then the backward of the probe's root, and reports how the
//! run ended (the error, or none) and, when the request asks for them (`"grads": true`), the
//! gradient entries of the re-rooted backward: the same map a run reports for a backward (one
//! entry per value defined before it, `null` without a gradient), so the campaign can compare
//! them with PyTorch's. One request runs every probe of a program, so a campaign pays one round
//! trip per program, not one per probe.

use serde_json::{Map, Value};

use crate::exec::{self, Grads, RunError};
use crate::program::{Kind, Program, Statement};
use crate::request::RequestError;

/// One probe: the index of a backward statement and the id of the value to root it at.
struct Probe {
    index: usize,
    root: usize,
}

fn invalid(message: impl Into<String>) -> RequestError {
    RequestError::new("invalid-request", message)
}

fn parse_probe(program: &Program, k: usize, p: &Value) -> Result<Probe, RequestError> {
    let pair = p
        .as_array()
        .filter(|a| a.len() == 2)
        .ok_or_else(|| invalid(format!("probe {k}: expected [backward index, root id]")))?;
    let index = pair[0]
        .as_u64()
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| {
            invalid(format!(
                "probe {k}: the backward index must be a non-negative integer"
            ))
        })?;
    let root = pair[1]
        .as_str()
        .ok_or_else(|| invalid(format!("probe {k}: the root must be a value id (a string)")))?;
    match program.statements.get(index) {
        Some(s) if s.is_grads() => {}
        Some(s) => {
            return Err(invalid(format!(
                "probe {k}: statement {index} (id {:?}) is not a backward (it is a {} statement)",
                s.id,
                s.kind_name()
            )));
        }
        None => {
            return Err(invalid(format!(
                "probe {k}: statement {index} is past the program's end ({} statements)",
                program.statements.len()
            )));
        }
    }
    let position = program.statements[..index]
        .iter()
        .position(|s| s.id == root && s.is_value())
        .ok_or_else(|| {
            invalid(format!(
                "probe {k}: no value {root:?} before statement {index}"
            ))
        })?;
    Ok(Probe {
        index,
        root: position,
    })
}

/// The answer to a probe request, one entry per probe in each list.
pub struct Probed {
    /// How each probe's run ended: `None` without error.
    pub outcomes: Vec<Option<RunError>>,
    /// When asked for: each probe's re-rooted backward's gradient entries (`None` when the run
    /// failed before they were reported).
    pub grads: Option<Vec<Option<Grads>>>,
}

/// Each probe of `obj["probes"]` on `obj["program"]`: how the run (the statements before the
/// backward, then the re-rooted backward) ended and, with `obj["grads"]` true, the gradients it
/// reported for the re-rooted backward.
pub fn handle(obj: &Map<String, Value>) -> Result<Probed, RequestError> {
    let doc = obj
        .get("program")
        .ok_or_else(|| invalid("a probe request needs a \"program\""))?;
    let program = Program::from_json(doc)?;
    program.check_bounds()?;
    let probes = obj
        .get("probes")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            invalid("a probe request needs \"probes\": [[backward index, root id], ...]")
        })?
        .iter()
        .enumerate()
        .map(|(k, p)| parse_probe(&program, k, p))
        .collect::<Result<Vec<_>, _>>()?;
    let with_grads = match obj.get("grads") {
        None => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| invalid("\"grads\" must be true or false"))?,
    };
    let mut outcomes = Vec::with_capacity(probes.len());
    let mut grads = Vec::with_capacity(probes.len());
    for p in &probes {
        let obs = exec::run_observing(&probe_program(&program, p), exec::Observe::Last);
        // the probe's backward is the run's last statement: its entry is the last one, and
        // only a run that got through it reports one
        let last = match obs.error {
            None => obs.backwards.into_iter().last().map(|b| b.grads),
            Some(_) => None,
        };
        outcomes.push(obs.error);
        grads.push(last);
    }
    Ok(Probed {
        outcomes,
        grads: with_grads.then_some(grads),
    })
}

fn probe_program(program: &Program, p: &Probe) -> Program {
    let mut statements = program.statements[..p.index].to_vec();
    statements.push(Statement {
        id: program.statements[p.index].id.clone(),
        kind: Kind::Backward { input: p.root },
    });
    Program {
        statements,
        dtype: program.dtype,
        checkpointing: program.checkpointing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn program() -> Value {
        let leaf = |id: &str| {
            json!({"id": id, "kind": "leaf", "shape": [2], "data": [0.5, 1.0], "device": "autodiff",
                   "require_grad": true})
        };
        json!({"format": "difftest-program", "version": 1, "statements": [
            leaf("x0"), leaf("x1"),
            {"id": "v", "kind": "op", "op": "mul", "inputs": ["x0", "x1"]},
            {"id": "s", "kind": "op", "op": "sum", "inputs": ["v"]},
            {"id": "bw", "kind": "backward", "input": "s"},
            {"id": "bw1", "kind": "backward", "input": "s"},
        ]})
    }

    fn probe(probes: Value) -> Result<Vec<Option<RunError>>, RequestError> {
        let req = json!({"request": "probe", "program": program(), "probes": probes});
        let probed = handle(req.as_object().unwrap())?;
        assert!(probed.grads.is_none(), "gradients only when asked for");
        Ok(probed.outcomes)
    }

    #[test]
    fn probes_report_the_gradients_of_their_backward_when_asked() {
        let req = json!({"request": "probe", "program": program(), "grads": true,
                         "probes": [[4, "v"], [5, "v"]]});
        let probed = handle(req.as_object().unwrap()).unwrap();
        let grads = probed.grads.expect("asked for");
        assert!(probed.outcomes[0].is_none() && probed.outcomes[1].is_some());
        let g = serde_json::to_value(grads[0].as_ref().expect("the first probe ran")).unwrap();
        // the backward of v = x0 * x1 seeded with ones: d/dx0 = x1, d/dx1 = x0 (both [0.5, 1])
        assert_eq!(g["x0"]["data"], json!([0.5, 1.0]));
        assert_eq!(g["x1"]["data"], json!([0.5, 1.0]));
        // one entry per value defined before the backward, as a run reports it
        let mut keys: Vec<&String> = g.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["s", "v", "x0", "x1"]);
        assert!(grads[1].is_none(), "a failed run reports no gradients");
        let bad = json!({"request": "probe", "program": program(), "grads": 1, "probes": []});
        let e = handle(bad.as_object().unwrap()).err().expect("refused");
        assert!(
            e.message.contains("\"grads\" must be true or false"),
            "{}",
            e.message
        );
    }

    #[test]
    fn probes_re_root_a_backward() {
        let out = probe(json!([[4, "v"], [4, "x1"], [5, "v"], [5, "x0"]])).unwrap();
        assert!(out[0].is_none() && out[1].is_none());
        // after the first backward consumed the graph, a backward through it panics
        let e = out[2]
            .as_ref()
            .expect("a second backward through a consumed graph panics");
        assert_eq!((e.index, e.statement.as_str(), e.kind), (5, "bw1", "panic"));
        assert!(
            out[3].is_some(),
            "a leaf the first backward reached, as a root"
        );
    }

    #[test]
    fn bad_probes_are_named() {
        let cases = [
            (
                json!([[2, "x0"]]),
                "is not a backward (it is a op statement)",
            ),
            (json!([[9, "x0"]]), "past the program's end"),
            (json!([[4, "bw"]]), "no value \"bw\" before statement 4"),
            (json!([[4, "nope"]]), "no value \"nope\""),
            (json!([["4", "x0"]]), "non-negative integer"),
            (json!([[4]]), "expected [backward index, root id]"),
            (json!({}), "needs \"probes\""),
        ];
        for (probes, want) in cases {
            let e = probe(probes.clone()).unwrap_err();
            assert_eq!(e.kind, "invalid-request");
            assert!(e.message.contains(want), "{probes}: {}", e.message);
        }
    }
}
