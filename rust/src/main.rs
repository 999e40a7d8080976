//! `difftest-burn`: runs difftest tensor programs on burn (Flex backend by default, or another
//! compiled in: `--backend NAME`; autodiff) and reports values, autodiff flags and gradients.
//! See docs/format.md and docs/backends.md.

mod backend;
#[cfg(test)]
mod batch_norm_evidence;
mod cast_evidence;
mod coverage;
mod document;
mod dtype;
mod exec;
mod fault;
mod floats;
mod memory;
mod memory_session;
mod modules;
mod ops;
mod optim;
mod probe;
mod program;
mod protocol;
mod request;
#[cfg(test)]
mod session_tests;
mod step;
mod value;

use std::io::{BufRead, Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;

use protocol::{Response, Worker};
use request::RequestError;

const USAGE: &str = "\
usage:
  difftest-burn [--backend NAME] --worker     serve JSON-line requests on stdin/stdout
  difftest-burn [--backend NAME] run FILE|-   run one program, print the observation as JSON
  difftest-burn ops                           print the op list as JSON
  difftest-burn [--backend NAME] --version    print the version (and the backend)
  difftest-burn --help                        print this help

  --backend NAME   the burn backend to run on: flex (the default), or ndarray, wgpu, vulkan,
                   tch when the binary is built with that cargo feature (docs/backends.md)

environment:
  DIFFTEST_BURN_FAULT=SPEC      inject a deliberate fault (detection-power tests); SPEC is one of
                                the fault specs below (docs/format.md#fault-injection)
  DIFFTEST_BURN_TEST_REQUESTS=1 also serve the test-only `allocate` request (tests only)

exit status: 0 ok, 2 invalid program, invalid JSON, usage error or unknown fault spec";

/// The usage text with the fault specs the binary accepts (one list, `fault::FORMS`, which its
/// error for an unknown spec prints too).
fn usage() -> String {
    let specs = fault::FORMS.replace(", ", "\n  ");
    format!("{USAGE}\n\nfault specs (DIFFTEST_BURN_FAULT):\n  {specs}")
}

fn version_line() -> String {
    let fault = fault::spec().map_or(String::new(), |s| format!(", fault {s}"));
    format!(
        "difftest-burn {} (burn {}, protocol {}, backend {}, compiled in: {}{fault})",
        protocol::CRATE_VERSION,
        protocol::BURN_VERSION,
        protocol::PROTOCOL,
        backend::current().name(),
        backend::Backend::compiled_in().join(" ")
    )
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("difftest-burn: {message}\n{}", usage());
    ExitCode::from(2)
}

/// Panics are caught per statement; their message goes to stderr only, never to stdout, and
/// where they were raised to the statement's error (`location`).
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        step::record_panic_location(info.location());
        eprintln!("difftest-burn: caught panic: {info}");
    }));
}

/// Exits the process once its parent is gone. A worker stuck in a kernel that never returns
/// reads no more requests, so it would not see its stdin close: killed with its campaign, it
/// would spin on, orphaned, for good. The parent is the pid in `DIFFTEST_BURN_PARENT` when the
/// spawner gives it (BurnWorker does): a parent killed before this thread started has already
/// handed the worker to another process, whose pid read here would be taken for the parent's.
fn exit_with_parent() {
    let parent = std::env::var("DIFFTEST_BURN_PARENT")
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok())
        .unwrap_or_else(std::os::unix::process::parent_id);
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            if std::os::unix::process::parent_id() != parent {
                eprintln!("difftest-burn: the worker's parent is gone; exiting");
                std::process::exit(1);
            }
        }
    });
}

fn worker() -> ExitCode {
    exit_with_parent();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut worker = Worker::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => return ExitCode::SUCCESS,
            Ok(_) => {}
            Err(e) => {
                eprintln!("difftest-burn: reading stdin failed: {e}");
                return ExitCode::FAILURE;
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let response =
            catch_unwind(AssertUnwindSafe(|| worker.handle_line(&line))).unwrap_or_else(|p| {
                Response {
                    id: serde_json::Value::Null,
                    backend: backend::current().name(),
                    reply: Err(RequestError::new(
                        "internal",
                        format!("panic outside a statement: {}", step::panic_message(&*p)),
                    )),
                }
            });
        let written = serde_json::to_writer(&mut out, &response)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            eprintln!("difftest-burn: writing stdout failed: {e}");
            return ExitCode::FAILURE;
        }
    }
}

fn print_pretty<T: serde::Serialize>(value: &T) {
    let text = serde_json::to_string_pretty(value).expect("serializable");
    println!("{text}");
}

fn run_once(path: &str) -> ExitCode {
    let mut text = Vec::new();
    let read = if path == "-" {
        std::io::stdin().read_to_end(&mut text).map(|_| ())
    } else {
        std::fs::read(path).map(|t| text = t)
    };
    if let Err(e) = read {
        eprintln!("difftest-burn: cannot read {path}: {e}");
        return ExitCode::from(2);
    }
    let result = serde_json::from_slice(&text)
        .map_err(|e| RequestError::new("invalid-json", e.to_string()))
        .and_then(|doc| protocol::run_program(&doc));
    match result {
        Ok(obs) => {
            // The observation and the backend it ran on.
            let mut answer = serde_json::Map::new();
            answer.insert("backend".into(), backend::current().name().into());
            if let serde_json::Value::Object(fields) =
                serde_json::to_value(&obs).expect("serializable")
            {
                answer.extend(fields);
            }
            print_pretty(&answer);
            ExitCode::SUCCESS
        }
        Err(e) => {
            print_pretty(&e);
            eprintln!("difftest-burn: {}: {}", e.kind, e.message);
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    install_panic_hook();
    if let Err(e) = fault::init_from_env() {
        eprintln!("difftest-burn: {e}");
        return ExitCode::from(2);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Some(at) = args.iter().position(|a| *a == "--backend") {
        let Some(name) = args.get(at + 1).copied() else {
            return usage_error("--backend needs a NAME");
        };
        match backend::Backend::parse(name) {
            Ok(b) => backend::set_default(b),
            Err(e) => {
                eprintln!("difftest-burn: --backend: {e}");
                return ExitCode::from(2);
            }
        }
        args.drain(at..at + 2);
    }
    match args.as_slice() {
        ["--version" | "-V"] => {
            println!("{}", version_line());
            ExitCode::SUCCESS
        }
        ["--help" | "-h" | "help"] => {
            println!("{}\n{}", version_line(), usage());
            ExitCode::SUCCESS
        }
        ["--worker"] => worker(),
        ["ops"] => {
            print_pretty(&protocol::op_list());
            ExitCode::SUCCESS
        }
        ["run", path] => run_once(path),
        ["run"] => usage_error("run needs a FILE (or - for stdin)"),
        [] => usage_error("no command given"),
        [first, ..] => usage_error(&format!("unknown arguments starting at {first:?}")),
    }
}
