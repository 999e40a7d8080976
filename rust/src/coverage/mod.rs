//! SanitizerCoverage counters of a coverage build (the `coverage` cargo feature, built by
//! difftest/exec/coverage_build.py with `-C passes=sancov-module` over burn's crates and this
//! one): the instrumented code calls `__sanitizer_cov_8bit_counters_init` and
//! `__sanitizer_cov_pcs_init` from its module constructors with the tables LLVM emitted, one
//! 8-bit counter per edge and one (pc, flags) pair per edge, in the same order. This module
//! records those tables; the worker zeroes the counters when a `run` request starts and the
//! `edges` request answers the indices of the counters that are non-zero since then.
//!
//! Without the feature the same functions exist and report that this is not a coverage build,
//! so the protocol code has no `cfg` of its own.

#[cfg(feature = "coverage")]
mod map;
#[cfg(feature = "coverage")]
mod tables;

#[cfg(feature = "coverage")]
pub use map::coverage_map;
#[cfg(feature = "coverage")]
pub use tables::{hit_edges, reset};

use crate::request::RequestError;

#[cfg(not(feature = "coverage"))]
pub fn reset() {}

#[cfg(not(feature = "coverage"))]
fn not_built() -> RequestError {
    RequestError::new(
        "invalid-request",
        "this difftest-burn is not a coverage build (the `coverage` feature and SanitizerCoverage \
         flags: `difftest coverage` builds one)",
    )
}

/// The `edges` request: the indices of the edges hit since the last `run` request started.
pub fn edges_reply() -> Result<Vec<u32>, RequestError> {
    #[cfg(feature = "coverage")]
    {
        Ok(hit_edges())
    }
    #[cfg(not(feature = "coverage"))]
    {
        Err(not_built())
    }
}

/// The `coverage_map` request: every edge's source location ([`CoverageMap`]).
pub fn map_reply() -> Result<serde_json::Value, RequestError> {
    #[cfg(feature = "coverage")]
    {
        let map = coverage_map()
            .map_err(|e| RequestError::new("internal", format!("coverage map: {e}")))?;
        serde_json::to_value(map).map_err(|e| RequestError::new("internal", e.to_string()))
    }
    #[cfg(not(feature = "coverage"))]
    {
        Err(not_built())
    }
}

#[cfg(all(test, not(feature = "coverage")))]
mod tests {
    use crate::protocol::Worker;

    #[test]
    fn a_default_build_refuses_the_coverage_requests() {
        let mut w = Worker::default();
        for request in ["edges", "coverage_map"] {
            let line = format!(r#"{{"request": "{request}", "id": 1}}"#);
            let r = serde_json::to_value(w.handle_line(line.as_bytes())).unwrap();
            assert_eq!(r["ok"], false, "{r}");
            assert_eq!(r["error"]["kind"], "invalid-request", "{r}");
            let message = r["error"]["message"].as_str().unwrap();
            assert!(message.contains("not a coverage build"), "{r}");
        }
    }
}
