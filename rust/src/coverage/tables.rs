//! The counter and PC tables LLVM hands to the module constructors.
//!
//! On ELF every instrumented module's constructor passes the same linker-made section bounds
//! (`__start___sancov_cntrs` …), so the same range arrives once per module: ranges are kept
//! once each, in arrival order, and edge `i` is the `i`-th counter over them.

use std::sync::Mutex;

/// (start, length) of each distinct counter range, and of each PC range (in pairs of words).
struct Tables {
    counters: Vec<(usize, usize)>,
    pcs: Vec<(usize, usize)>,
}

static TABLES: Mutex<Tables> = Mutex::new(Tables {
    counters: Vec::new(),
    pcs: Vec::new(),
});

fn tables() -> std::sync::MutexGuard<'static, Tables> {
    TABLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Called by every instrumented module's constructor, before `main`.
///
/// # Safety
/// `start..stop` is the counter section LLVM emitted: valid for the process's lifetime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sanitizer_cov_8bit_counters_init(start: *mut u8, stop: *mut u8) {
    let (start, len) = (
        start as usize,
        (stop as usize).saturating_sub(start as usize),
    );
    let mut t = tables();
    if len > 0 && !t.counters.iter().any(|&(s, _)| s == start) {
        t.counters.push((start, len));
    }
}

/// Called after `__sanitizer_cov_8bit_counters_init` with the PC table: one (pc, flags) pair
/// of words per counter, flags bit 0 marking a function's entry block.
///
/// # Safety
/// `start..stop` is the PC table LLVM emitted: valid for the process's lifetime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sanitizer_cov_pcs_init(start: *const usize, stop: *const usize) {
    let words = (stop as usize).saturating_sub(start as usize) / size_of::<usize>();
    let start = start as usize;
    let mut t = tables();
    if words > 0 && !t.pcs.iter().any(|&(s, _)| s == start) {
        t.pcs.push((start, words / 2));
    }
}

/// The counters as one slice per range.
fn counter_slices(t: &Tables) -> impl Iterator<Item = &'static mut [u8]> + '_ {
    t.counters.iter().map(|&(start, len)| {
        // SAFETY: a range LLVM registered, alive for the whole process; the instrumented code
        // increments these bytes without synchronisation, and so do we.
        unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) }
    })
}

/// Zeroes every counter.
pub fn reset() {
    for counters in counter_slices(&tables()) {
        counters.fill(0);
    }
}

/// The indices of the non-zero counters, ascending.
pub fn hit_edges() -> Vec<u32> {
    let t = tables();
    let mut hit = Vec::new();
    let mut base = 0u32;
    for counters in counter_slices(&t) {
        hit.extend(
            counters
                .iter()
                .enumerate()
                .filter(|&(_, &c)| c != 0)
                .map(|(i, _)| base + i as u32),
        );
        base += counters.len() as u32;
    }
    hit
}

/// Every edge's PC and whether it is a function's entry, in counter order.
pub fn pcs() -> Vec<(usize, bool)> {
    let t = tables();
    let mut out = Vec::new();
    for &(start, pairs) in &t.pcs {
        // SAFETY: a table LLVM registered (pairs of words), alive for the whole process.
        let words = unsafe { std::slice::from_raw_parts(start as *const usize, pairs * 2) };
        out.extend(words.chunks_exact(2).map(|p| (p[0], p[1] & 1 != 0)));
    }
    out
}

/// The number of counters.
pub fn edge_count() -> usize {
    tables().counters.iter().map(|&(_, len)| len).sum()
}
