//! The worker protocol (JSON lines) and the request handling shared with one-shot mode.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

use crate::backend::{self, Backend};
use crate::exec::{self, Observation};
use crate::memory::{self, MemoryReport, ProgramMemoryReport};
use crate::memory_session::{self, SessionReport};
use crate::ops::Op;
use crate::probe;
use crate::program::Program;
use crate::request::RequestError;

pub const PROTOCOL: u32 = 1;
/// The burn version this binary is built against: the resolved version of `burn` in Cargo.lock
/// (or its path dependency's Cargo.toml), found by build.rs; never a literal.
pub const BURN_VERSION: &str = env!("DIFFTEST_BURN_VERSION");
pub const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// One op of the `ops` reply: what `tests/differential/test_catalog.py` compares with the Python catalog.
#[derive(Clone, Debug, Serialize)]
pub struct OpInfo {
    pub name: &'static str,
    /// -1 for n-ary ops.
    pub arity: i32,
    pub attrs: Vec<AttrInfo>,
}

#[derive(Clone, Debug, Serialize)]
pub struct AttrInfo {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub ty: &'static str,
}

/// The catalog as the interpreter declares it (the `ops!` table in ops/mod.rs).
pub fn op_list() -> Vec<OpInfo> {
    Op::ALL
        .iter()
        .map(|d| OpInfo {
            name: d.name,
            arity: d.arity,
            attrs: d
                .attrs
                .iter()
                .map(|&(name, ty)| AttrInfo { name, ty })
                .collect(),
        })
        .collect()
}

#[derive(Clone, Debug, Serialize)]
pub struct VersionInfo {
    pub difftest_burn: &'static str,
    pub burn: &'static str,
    pub protocol: u32,
    /// The injected fault (`DIFFTEST_BURN_FAULT`), or null.
    pub fault: Option<&'static str>,
    /// The backend the request ran on (the process default unless the request named one).
    pub backend: &'static str,
    /// The backends compiled into this binary (its cargo features), Flex first.
    pub backends: Vec<&'static str>,
}

pub fn version_info() -> VersionInfo {
    VersionInfo {
        difftest_burn: CRATE_VERSION,
        burn: BURN_VERSION,
        protocol: PROTOCOL,
        fault: crate::fault::spec(),
        backend: backend::current().name(),
        backends: Backend::compiled_in(),
    }
}

/// Parses and runs a program document (after checking its element budget).
pub fn run_program(doc: &Value) -> Result<Observation, RequestError> {
    let program = Program::from_json(doc)?;
    program.check_bounds()?;
    Ok(exec::run(&program))
}

/// The environment variable that enables the test-only requests (`allocate`) when it is `1`.
pub const TEST_REQUESTS_ENV: &str = "DIFFTEST_BURN_TEST_REQUESTS";

fn test_requests_enabled() -> bool {
    std::env::var(TEST_REQUESTS_ENV).is_ok_and(|v| v == "1")
}

/// The test-only `allocate` request: allocates `bytes` bytes and writes every one of them (so
/// the pages are really used), then frees them. Past the worker's memory limit the allocation
/// fails and the process aborts, which is what the tests of the crash path want.
fn allocate(obj: &serde_json::Map<String, Value>) -> Result<u64, RequestError> {
    let bytes = obj.get("bytes").and_then(Value::as_u64).ok_or_else(|| {
        RequestError::new(
            "invalid-request",
            "an allocate request needs a non-negative integer \"bytes\"",
        )
    })?;
    let n = usize::try_from(bytes).map_err(|_| {
        RequestError::new(
            "invalid-request",
            format!("{bytes} bytes do not fit in memory"),
        )
    })?;
    let block = std::hint::black_box(vec![1u8; n]);
    let touched: u64 = block.iter().step_by(4096).map(|&b| u64::from(b)).sum();
    std::hint::black_box(touched);
    Ok(bytes)
}

/// The backend a request names in its optional `backend` field, else the current one.
fn request_backend(request: &Value) -> Result<Backend, RequestError> {
    match request.get("backend") {
        None | Some(Value::Null) => Ok(backend::current()),
        Some(Value::String(name)) => Backend::parse(name)
            .map_err(|e| RequestError::new("invalid-request", format!("field \"backend\": {e}"))),
        Some(other) => Err(RequestError::new(
            "invalid-request",
            format!("field \"backend\" must be a backend name (a string), not {other}"),
        )),
    }
}

/// The payload of a successful response.
pub enum Reply {
    Result(Observation),
    Ops(Vec<OpInfo>),
    Version(VersionInfo),
    Status { rss_bytes: u64, served: u64 },
    Memory(MemoryReport),
    MemoryProgram(ProgramMemoryReport),
    MemorySession(SessionReport),
    Allocated(u64),
    Probes(probe::Probed),
    Edges(Vec<u32>),
    CoverageMap(Value),
}

/// One response line: `{"id": …, "ok": …, "backend": …, <payload fields>}`.
pub struct Response {
    pub id: Value,
    /// The backend the request ran on.
    pub backend: &'static str,
    pub reply: Result<Reply, RequestError>,
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("ok", &self.reply.is_ok())?;
        map.serialize_entry("backend", self.backend)?;
        match &self.reply {
            Ok(Reply::Result(obs)) => map.serialize_entry("result", obs)?,
            Ok(Reply::Ops(ops)) => map.serialize_entry("ops", ops)?,
            Ok(Reply::Version(v)) => map.serialize_entry("version", v)?,
            Ok(Reply::Status { rss_bytes, served }) => {
                map.serialize_entry("rss_bytes", rss_bytes)?;
                map.serialize_entry("served", served)?;
            }
            Ok(Reply::Memory(m)) => map.serialize_entry("memory", m)?,
            Ok(Reply::MemoryProgram(m)) => map.serialize_entry("memory", m)?,
            Ok(Reply::MemorySession(m)) => map.serialize_entry("memory", m)?,
            Ok(Reply::Allocated(n)) => map.serialize_entry("allocated", n)?,
            Ok(Reply::Probes(p)) => {
                map.serialize_entry("outcomes", &p.outcomes)?;
                if let Some(grads) = &p.grads {
                    map.serialize_entry("grads", grads)?;
                }
            }
            Ok(Reply::Edges(edges)) => map.serialize_entry("edges", edges)?,
            Ok(Reply::CoverageMap(m)) => map.serialize_entry("coverage_map", m)?,
            Err(e) => map.serialize_entry("error", e)?,
        }
        map.end()
    }
}

/// The worker's state: how many requests it has answered.
#[derive(Debug, Default)]
pub struct Worker {
    pub served: u64,
}

impl Worker {
    /// Answers one request line. `served` in a status reply counts the requests answered
    /// before it.
    pub fn handle_line(&mut self, line: &[u8]) -> Response {
        let response = match serde_json::from_slice::<Value>(line) {
            Err(e) => Response {
                id: Value::Null,
                backend: backend::current().name(),
                reply: Err(RequestError::new("invalid-json", e.to_string())),
            },
            Ok(request) => {
                let id = request.get("id").cloned().unwrap_or(Value::Null);
                match request_backend(&request) {
                    Ok(b) => Response {
                        id,
                        backend: b.name(),
                        reply: backend::with(b, || self.handle(&request)),
                    },
                    Err(e) => Response {
                        id,
                        backend: backend::current().name(),
                        reply: Err(e),
                    },
                }
            }
        };
        self.served += 1;
        response
    }

    fn handle(&self, request: &Value) -> Result<Reply, RequestError> {
        let obj = request
            .as_object()
            .ok_or_else(|| RequestError::new("invalid-request", "a request must be an object"))?;
        let kind = obj.get("request").and_then(Value::as_str).ok_or_else(|| {
            RequestError::new("invalid-request", "missing string field \"request\"")
        })?;
        match kind {
            "run" => {
                let program = obj.get("program").ok_or_else(|| {
                    RequestError::new("invalid-request", "a run request needs a \"program\"")
                })?;
                // a coverage build's `edges` answer the edges hit since this run started
                crate::coverage::reset();
                run_program(program).map(Reply::Result)
            }
            "probe" => probe::handle(obj).map(Reply::Probes),
            "ops" => Ok(Reply::Ops(op_list())),
            "version" => Ok(Reply::Version(version_info())),
            "status" => Ok(Reply::Status {
                rss_bytes: memory::rss_bytes(),
                served: self.served,
            }),
            "memory" => memory::handle(obj).map(Reply::Memory),
            "memory_program" => memory::handle_program(obj).map(Reply::MemoryProgram),
            "memory_session" => memory_session::handle(obj).map(Reply::MemorySession),
            "edges" => crate::coverage::edges_reply().map(Reply::Edges),
            "coverage_map" => crate::coverage::map_reply().map(Reply::CoverageMap),
            "allocate" if test_requests_enabled() => allocate(obj).map(Reply::Allocated),
            other => Err(RequestError::new(
                "invalid-request",
                format!(
                    "unknown request {other:?} (expected run, probe, ops, version, status, \
                     memory, memory_program, memory_session, edges or coverage_map)"
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burn_version_matches_cargo_lock() {
        let lock = include_str!("../Cargo.lock");
        let version = lock
            .split("[[package]]")
            .find(|p| p.contains("\nname = \"burn\"\n"))
            .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
            .map(|v| v.trim_end_matches('"'))
            .expect("burn in Cargo.lock");
        assert_eq!(version, BURN_VERSION);
    }

    #[test]
    fn malformed_and_unknown() {
        let mut w = Worker::default();
        let r = serde_json::to_value(w.handle_line(b"{not json")).unwrap();
        assert_eq!(r["id"], Value::Null);
        assert_eq!(r["error"]["kind"], "invalid-json");
        let r = serde_json::to_value(w.handle_line(br#"{"request": "nope", "id": 7}"#)).unwrap();
        assert_eq!(r["id"], 7);
        assert_eq!(r["error"]["kind"], "invalid-request");
        let r =
            serde_json::to_value(w.handle_line(br#"{"request": "status", "id": "s"}"#)).unwrap();
        assert_eq!(r["served"], 2);
    }

    #[test]
    fn malformed_statement_is_an_invalid_program() {
        let mut w = Worker::default();
        let x = r#"{"id": "x", "kind": "leaf", "shape": [1], "data": [1.0], "device": "plain",
                    "require_grad": false}"#;
        let cases = [
            (
                r#"{"id": "y", "kind": "op", "op": "exp", "inputs": ["x"], "colour": 1}"#,
                Value::from("y"),
                "unknown field `colour`",
            ),
            (
                r#"{"id": "y", "kind": "cut", "cut": "detach", "input": 3}"#,
                Value::from("y"),
                "invalid type: integer `3`, expected a string",
            ),
            (
                r#"{"id": "y", "kind": "reshape", "input": "x"}"#,
                Value::from("y"),
                "unknown variant `reshape`",
            ),
            (
                r#"{"kind": "backward", "input": "x"}"#,
                Value::Null,
                "missing field `id`",
            ),
        ];
        for request in ["run", "memory_program"] {
            for (stmt, id, needle) in &cases {
                let line = format!(
                    r#"{{"request": "{request}", "id": 1, "program": {{"format": "difftest-program",
                       "version": 1, "statements": [{x}, {stmt}]}}}}"#
                );
                let r = serde_json::to_value(w.handle_line(line.as_bytes())).unwrap();
                assert_eq!(r["ok"], false, "{r}");
                let e = &r["error"];
                assert_eq!(e["kind"], "invalid-program", "{r}");
                assert_eq!((&e["index"], &e["statement"]), (&Value::from(1), id), "{r}");
                let message = e["message"].as_str().unwrap();
                assert!(
                    message.starts_with("statement 1") && message.contains(needle),
                    "{r}"
                );
            }
        }
    }
}
