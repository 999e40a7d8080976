//! Request errors: what the worker protocol ([`crate::protocol`]) answers for a request that
//! cannot be served, shared with the requests it dispatches to ([`crate::memory`]).

use serde::Serialize;

use crate::program::ProgramError;

/// A request that cannot be served.
#[derive(Clone, Debug, Serialize)]
pub struct RequestError {
    pub kind: &'static str,
    pub message: String,
    pub index: Option<usize>,
    pub statement: Option<String>,
}

impl RequestError {
    pub fn new(kind: &'static str, message: impl Into<String>) -> Self {
        RequestError {
            kind,
            message: message.into(),
            index: None,
            statement: None,
        }
    }
}

impl From<ProgramError> for RequestError {
    fn from(e: ProgramError) -> Self {
        RequestError {
            kind: "invalid-program",
            message: e.to_string(),
            index: e.index,
            statement: e.statement,
        }
    }
}
