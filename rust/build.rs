//! Finds the version of `burn` this binary is built against and hands it to the crate as
//! `DIFFTEST_BURN_VERSION` (used by `--version` and the `version` request).
//!
//! Cargo has no environment variable for a dependency's version, so this reads the resolved
//! version from Cargo.lock (the `[[package]]` entry named `burn`). When burn is a path
//! dependency (its lock entry has no `source`), or the lock file has no version for it, the
//! version is read from that path's Cargo.toml instead.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const DEP: &str = "burn";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    // Absolute paths: a generated build (difftest/exec/burn_builds.py) has its manifest and lock
    // in another directory than this script, and a relative path names a file of the manifest's
    // directory (a missing one would rerun the script, and rebuild the crate, on every build).
    // The script itself needs no line: cargo reruns a script it recompiled.
    for file in ["Cargo.lock", "Cargo.toml"] {
        println!(
            "cargo:rerun-if-changed={}",
            manifest_dir.join(file).display()
        );
    }

    let version = burn_version(&manifest_dir).unwrap_or_else(|e| {
        panic!("difftest-burn build: cannot determine the version of `{DEP}`: {e}")
    });
    println!("cargo:rustc-env=DIFFTEST_BURN_VERSION={version}");
}

fn burn_version(manifest_dir: &Path) -> Result<String, String> {
    let lock_path = manifest_dir.join("Cargo.lock");
    let lock = fs::read_to_string(&lock_path)
        .map_err(|e| format!("reading {}: {e}", lock_path.display()))?;
    let entries = lock_entries(&lock, DEP);
    let entry = match entries.as_slice() {
        [] => None,
        [one] => Some(one),
        _ => {
            return Err(format!(
                "{} has {} `{DEP}` entries; expected one",
                lock_path.display(),
                entries.len()
            ));
        }
    };
    match entry {
        Some(LockEntry {
            version: Some(v),
            source: Some(_),
        }) => Ok(v.clone()),
        // A path dependency (no source), or an entry without a version: ask the path itself.
        _ => match path_dependency_version(manifest_dir)? {
            Some(v) => Ok(v),
            None => entry
                .and_then(|e| e.version.clone())
                .ok_or_else(|| format!("no `{DEP}` version in {}", lock_path.display())),
        },
    }
}

#[derive(Debug, Default)]
struct LockEntry {
    version: Option<String>,
    source: Option<String>,
}

/// The `[[package]]` entries of a Cargo.lock whose `name` is `name`.
fn lock_entries(lock: &str, name: &str) -> Vec<LockEntry> {
    let mut found = Vec::new();
    let mut current: Option<(Option<String>, LockEntry)> = None;
    let mut flush = |cur: &mut Option<(Option<String>, LockEntry)>| {
        if let Some((Some(n), entry)) = cur.take()
            && n == name
        {
            found.push(entry);
        }
    };
    for line in lock.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            flush(&mut current);
            if line == "[[package]]" {
                current = Some((None, LockEntry::default()));
            }
            continue;
        }
        let Some((pkg_name, entry)) = current.as_mut() else {
            continue;
        };
        if let Some((key, value)) = key_value(line) {
            match key {
                "name" => *pkg_name = Some(value),
                "version" => entry.version = Some(value),
                "source" => entry.source = Some(value),
                _ => {}
            }
        }
    }
    flush(&mut current);
    found
}

/// `key = "value"` (a TOML line with a basic-string value), or None.
fn key_value(line: &str) -> Option<(&str, String)> {
    let (key, rest) = line.split_once('=')?;
    let value = rest.trim().strip_prefix('"')?.strip_suffix('"')?;
    Some((key.trim(), value.to_string()))
}

/// The version in the Cargo.toml of the `path` of the `burn` dependency, if it has one.
fn path_dependency_version(manifest_dir: &Path) -> Result<Option<String>, String> {
    let manifest_path = manifest_dir.join("Cargo.toml");
    let manifest = fs::read_to_string(&manifest_path)
        .map_err(|e| format!("reading {}: {e}", manifest_path.display()))?;
    let Some(dep_path) = dependency_path(&manifest, DEP) else {
        return Ok(None);
    };
    let dep_manifest = manifest_dir.join(dep_path).join("Cargo.toml");
    println!("cargo:rerun-if-changed={}", dep_manifest.display());
    let text = fs::read_to_string(&dep_manifest)
        .map_err(|e| format!("reading {}: {e}", dep_manifest.display()))?;
    package_version(&text)
        .map(Some)
        .ok_or_else(|| format!("no [package] version in {}", dep_manifest.display()))
}

/// The `path` of dependency `name`: an inline table (`name = { ..., path = "..." }`) under a
/// dependency table, or a `[dependencies.name]` table.
fn dependency_path(manifest: &str, name: &str) -> Option<String> {
    let mut section = String::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.trim_matches(['[', ']']).trim().to_string();
            continue;
        }
        let in_deps = section.ends_with("dependencies");
        let in_dep_table = section.ends_with(&format!("dependencies.{name}"));
        let Some((key, rest)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if in_dep_table && key == "path" {
            return key_value(line).map(|(_, v)| v);
        }
        if in_deps && key == name {
            let inline = rest
                .trim()
                .strip_prefix('{')?
                .trim_end()
                .strip_suffix('}')?;
            return inline
                .split(',')
                .filter_map(|kv| key_value(kv.trim()))
                .find_map(|(k, v)| (k == "path").then_some(v));
        }
    }
    None
}

/// The `version` of the `[package]` table of a Cargo.toml (a literal string, not
/// `version.workspace = true`).
fn package_version(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if in_package && let Some(("version", v)) = key_value(line) {
            return Some(v);
        }
    }
    None
}
