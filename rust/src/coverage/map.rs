//! Every edge's source location, from the binary's own debug info (the coverage build keeps
//! line tables): the PC table's addresses, less the load bias of this position-independent
//! executable, looked up with `addr2line` in the DWARF that `object` reads from
//! /proc/self/exe. An edge of a function inlined into another has several frames; it is
//! attributed to the innermost frame in a burn crate's source (a path component starting with
//! `burn` followed by `src`), else to its innermost frame. The line tables name functions
//! without their path (`backward<2>`, `{closure#0}<…>`), so an edge also records the file and
//! line of its innermost frame that is a `backward` or a closure in a burn crate's `src/ops/`:
//! a node's backward, inlined helpers included, or a closure it hands to a helper such as
//! burn-autodiff's `unary` (a function of its own, which the closure is inlined into). The node
//! is the `impl Backward for Node` whose lines hold that line (difftest/findings/coverage.py).

use std::collections::HashMap;

use addr2line::gimli;
use object::{Object, ObjectSection, ObjectSymbol};
use serde::Serialize;

use super::tables;

/// Columns, one entry per edge (index = counter index); strings interned in `files` and
/// `functions` (-1: unknown).
#[derive(Debug, Default, Serialize)]
pub struct CoverageMap {
    pub edges: usize,
    pub files: Vec<String>,
    pub functions: Vec<String>,
    pub file: Vec<i32>,
    pub line: Vec<u32>,
    pub function: Vec<i32>,
    /// The file (-1: none) and line of the edge's innermost frame that is a `backward` or a
    /// closure in a burn crate's `src/ops/`: code of a node's backward (`impl Backward for
    /// Node`) if that line lies in one.
    pub backward_file: Vec<i32>,
    pub backward_line: Vec<u32>,
    /// The indices of the edges that are a function's entry block.
    pub entries: Vec<u32>,
}

#[derive(Default)]
struct Interner {
    names: Vec<String>,
    index: HashMap<String, i32>,
}

impl Interner {
    fn get(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.names.len() as i32;
        self.names.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// A source file of a burn crate: `…/burn-autodiff-0.22.1/src/…` or `…/crates/burn-nn/src/…`.
fn in_burn_crate(file: &str) -> bool {
    let parts: Vec<&str> = file.split('/').collect();
    parts
        .windows(2)
        .any(|w| w[0].starts_with("burn") && w[1] == "src")
}

/// `backward`, `backward<2>` (the function of a `Backward` impl, as the line tables name it)
/// or a closure, in a file of a burn crate's `src/ops/`.
fn in_backward(function: &str, file: &str) -> bool {
    let named = function == "backward"
        || function.starts_with("backward<")
        || function.starts_with("{closure#");
    named && in_burn_crate(file) && file.contains("/src/ops/")
}

struct Frame {
    file: Option<String>,
    line: u32,
    function: Option<String>,
}

/// The source map of every edge of this process.
pub fn coverage_map() -> Result<CoverageMap, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let data = std::fs::read(&exe).map_err(|e| format!("reading {}: {e}", exe.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", exe.display()))?;
    let bias = load_bias(&file)?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let dwarf = gimli::Dwarf::load(|id| -> Result<_, gimli::Error> {
        let bytes = file
            .section_by_name(id.name())
            .and_then(|s| s.data().ok())
            .unwrap_or(&[]);
        Ok(gimli::EndianSlice::new(bytes, endian))
    })
    .map_err(|e| format!("reading DWARF of {}: {e}", exe.display()))?;
    let ctx = addr2line::Context::from_dwarf(dwarf).map_err(|e| format!("DWARF: {e}"))?;

    let pcs = tables::pcs();
    let mut files = Interner::default();
    let mut functions = Interner::default();
    let mut map = CoverageMap {
        edges: tables::edge_count(),
        ..CoverageMap::default()
    };
    if pcs.len() != map.edges {
        return Err(format!(
            "{} counters but {} PCs: the PC table does not match",
            map.edges,
            pcs.len()
        ));
    }
    for (i, &(pc, entry)) in pcs.iter().enumerate() {
        let frames = frames_at(&ctx, (pc as u64).wrapping_sub(bias));
        let chosen = frames
            .iter()
            .find(|f| f.file.as_deref().is_some_and(in_burn_crate))
            .or_else(|| frames.iter().find(|f| f.file.is_some()));
        let (f, l, func) = match chosen {
            Some(fr) => (
                fr.file.as_deref().map_or(-1, |s| files.get(s)),
                fr.line,
                fr.function.as_deref().map_or(-1, |s| functions.get(s)),
            ),
            None => (-1, 0, -1),
        };
        let backward = frames.iter().find(|fr| match (&fr.function, &fr.file) {
            (Some(function), Some(file)) => in_backward(function, file),
            _ => false,
        });
        let (bf, bl) = backward.map_or((-1, 0), |fr| {
            (fr.file.as_deref().map_or(-1, |s| files.get(s)), fr.line)
        });
        map.file.push(f);
        map.line.push(l);
        map.function.push(func);
        map.backward_file.push(bf);
        map.backward_line.push(bl);
        if entry {
            map.entries.push(i as u32);
        }
    }
    map.files = files.names;
    map.functions = functions.names;
    Ok(map)
}

/// Runtime address minus link-time address: ours of a function we define, against the
/// symbol table's.
fn load_bias(file: &object::File<'_>) -> Result<u64, String> {
    let name = "__sanitizer_cov_pcs_init";
    let symbol = file
        .symbols()
        .find(|s| s.name() == Ok(name))
        .ok_or_else(|| format!("no symbol {name} in the executable (stripped?)"))?;
    let runtime = tables::__sanitizer_cov_pcs_init as *const () as u64;
    Ok(runtime.wrapping_sub(symbol.address()))
}

type Ctx<'a> = addr2line::Context<gimli::EndianSlice<'a, gimli::RunTimeEndian>>;

/// The frames at a link-time address, innermost first (none when it has no line info).
fn frames_at(ctx: &Ctx<'_>, probe: u64) -> Vec<Frame> {
    let mut out = Vec::new();
    let Ok(mut iter) = ctx.find_frames(probe).skip_all_loads() else {
        return out;
    };
    while let Ok(Some(frame)) = iter.next() {
        let function = frame
            .function
            .as_ref()
            .and_then(|f| f.raw_name().ok())
            .map(|raw| format!("{:#}", rustc_demangle::demangle(&raw)));
        let (file, line) = frame.location.as_ref().map_or((None, 0), |l| {
            (l.file.map(str::to_string), l.line.unwrap_or(0))
        });
        out.push(Frame {
            file,
            line,
            function,
        });
    }
    out
}
