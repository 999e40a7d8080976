"""pytest integration: a burn worker per test process, corpus files as test items, and the
helper that turns a failing property into a saved corpus case.

Registered as a pytest11 entry point, so `pytest` anywhere in the project picks it up.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from difftest.exec.backends import BACKEND_ENV, DEFAULT_BACKEND, binary_backends, parse_backends
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import CorpusError, case_from_verdict, judge, load_case, replay_memory_case
from difftest.findings.saving import save_case
from difftest.findings.table import report as table_report
from difftest.findings.triage import triage
from difftest.oracle.check import check
from difftest.oracle.compare import Verdict, dismissal_reason
from difftest.program.files import JsonFileError, read_json

ROOT_MARKER = "pyproject.toml"
_WORKER: BurnWorker | None = None
_BACKEND_WORKERS: dict[str, BurnWorker] = {}  # a corpus case's own backend, other than the shared worker's
# numeric mismatches dismissed by arbitration in this test process, by reason (summed over
# xdist workers at the end and printed in the terminal summary)
_DISMISSALS: Counter[str] = Counter()
_KNOWN_BUGS: Counter[str] = Counter()  # failing verdicts a known bug explains, by the bug's name
_FLAKY_TORCH: list[str] = []  # PyTorch-only findings a second run did not give (where, what)


def project_root(start: Path | None = None) -> Path:
    p = (start or Path.cwd()).resolve()
    for q in (p, *p.parents):
        if (q / ROOT_MARKER).is_file() and (q / "difftest").is_dir():
            return q
    return p


def corpus_dir() -> Path:
    env = os.environ.get("DIFFTEST_CORPUS")
    return Path(env) if env else project_root() / "corpus"


def state_dir() -> Path:
    return project_root() / ".difftest"


def shared_worker() -> BurnWorker:
    """The test process's burn worker (one per xdist worker), started on first use."""
    global _WORKER
    if _WORKER is None:
        _WORKER = BurnWorker(inflight_dir=state_dir() / "inflight")
        _WORKER.start()
    return _WORKER


def worker_for(backend: str) -> BurnWorker:
    """A worker on `backend`: the shared one when it runs there, else one of this process's own;
    skips the test when the binary was built without that backend."""
    shared = shared_worker()
    if backend == (shared.backend or DEFAULT_BACKEND):
        return shared
    if backend not in _BACKEND_WORKERS:
        if backend not in binary_backends(shared.binary):
            pytest.skip(f"runs on the {backend} backend, which {shared.binary} was built without "
                        f"(`difftest replay CASE --backend {backend}` builds one; docs/backends.md)")
        _BACKEND_WORKERS[backend] = BurnWorker(shared.binary, inflight_dir=state_dir() / "inflight", backend=backend)
    return _BACKEND_WORKERS[backend]


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say so when $DIFFTEST_BURN_FAULT is set: the suite's workers never inherit it (BurnWorker),
    so a fault set in the shell does not reach them, and the run must not look faulty when it is
    not (a detection run gives the interpreter its fault through a wrapper, as
    tests/quality/test_detection.py does)."""
    spec = os.environ.get("DIFFTEST_BURN_FAULT", "")
    if not spec:
        return None
    return (f"difftest: DIFFTEST_BURN_FAULT={spec} is set, and not used: the burn workers of this run are "
            "unfaulted (a fault reaches them through a wrapper as $DIFFTEST_BURN: tests/quality/test_detection.py)")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("difftest")
    group.addoption("--run-slow", action="store_true", default=False, help="also run tests marked slow")
    group.addoption("--run-versions", default="", metavar="V,V,...",
                    help="also run the tests marked versions against these burn versions (crates.io versions or "
                    "path:DIR), building difftest-burn for each (cached outside the repository; minutes each)")
    group.addoption("--backend", default="", metavar="NAME",
                    help="run the burn worker on this burn backend (flex, ndarray, ...; the binary must have it "
                    "compiled in: docs/backends.md); default flex")
    group.addoption("--run-backends", default="", metavar="B,B,...",
                    help="also run the tests marked backends on these burn backends, building difftest-burn with "
                    "them if needed (cached outside the repository; minutes)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long-running; needs --run-slow")
    config.addinivalue_line("markers", "versions: builds difftest-burn against other burn versions; needs "
                            "--run-versions V,V,...")
    config.addinivalue_line("markers", "backends: builds difftest-burn with other burn backends; needs "
                            "--run-backends B,B,...")
    backend = config.getoption("--backend")
    if backend:  # every worker of this process (and its xdist workers, which configure the same way)
        try:
            (name,) = parse_backends(backend)
        except ValueError as e:
            raise pytest.UsageError(f"--backend {backend!r}: {e} (one backend)") from None
        os.environ[BACKEND_ENV] = name


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test of the `versions` marker taking `burn_spec` runs once per --run-versions entry."""
    if "burn_spec" in metafunc.fixturenames:
        specs = [s.strip() for s in metafunc.config.getoption("--run-versions").split(",") if s.strip()]
        metafunc.parametrize("burn_spec", specs or ["(none: --run-versions not given)"])


def memory_full(config: pytest.Config) -> bool:
    """Whether to run the full set of memory checks: with --run-slow, or when the marker
    expression selects memory tests specifically (`-m memory`, `-m "memory and not slow"`):
    it selects a test marked only `memory` and not an unmarked one."""
    if config.getoption("--run-slow"):
        return True
    expr = config.getoption("markexpr", "") or ""
    if not expr:
        return False
    from _pytest.mark.expression import Expression

    def marked(*names: str) -> Any:
        def matcher(name: str, /, **kwargs: str | int | bool | None) -> bool:
            return name in names

        return matcher

    compiled = Expression.compile(expr)
    return compiled.evaluate(marked("memory")) and not compiled.evaluate(marked())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--run-versions"):
        skip_versions = pytest.mark.skip(reason="builds other burn versions: run with --run-versions V,V,... "
                                         "(docs/measurements.md, 'Across burn versions')")
        for item in items:
            if "versions" in item.keywords:
                item.add_marker(skip_versions)
    if not config.getoption("--run-backends"):
        skip_backends = pytest.mark.skip(reason="builds difftest-burn with other burn backends: run with "
                                         "--run-backends flex,ndarray (docs/backends.md)")
        for item in items:  # the marker, not the keyword: corpus/backends/ cases are corpus items
            if item.get_closest_marker("backends") is not None:
                item.add_marker(skip_backends)
    if config.getoption("--run-slow"):
        return
    full_memory = memory_full(config)
    skip = pytest.mark.skip(reason="slow: run with --run-slow (memory checks: or -m memory; see README, 'Tests')")
    for item in items:
        if "slow" in item.keywords and not (full_memory and "memory" in item.keywords):
            item.add_marker(skip)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _WORKER
    if _WORKER is not None:
        _WORKER.close()
        _WORKER = None
    for w in _BACKEND_WORKERS.values():
        w.close()
    _BACKEND_WORKERS.clear()


@pytest.fixture(scope="session")
def burn_worker() -> Iterator[BurnWorker]:
    yield shared_worker()


def record_finding(verdict: Verdict, source: str, *, directory: Path | None = None,
                   triage: dict[str, Any] | None = None) -> Path | None:
    """Save a failing verdict as a corpus case, but only on Hypothesis's final (minimal) replay
    (outside Hypothesis, always). Returns the path written, or None."""
    if verdict.ok or os.environ.get("DIFFTEST_NO_SAVE") == "1":
        return None
    try:
        from hypothesis.control import current_build_context

        if not current_build_context().is_final:
            return None
    except Exception:  # not inside a Hypothesis test: always save
        pass
    version = None
    if _WORKER is not None:
        try:
            version = _WORKER.version()
        except Exception:  # a dead worker must not lose the finding
            version = None
    case = case_from_verdict(verdict, source=source, burn_version=version)
    if triage is not None:
        case.record["triage"] = triage
    target = (directory or corpus_dir()) / "findings"
    try:
        saved = save_case(case, target)
    except OSError as e:  # an unwritable corpus ($DIFFTEST_CORPUS a file?): keep the case in the state directory
        fallback = state_dir() / "unsaved-findings"
        saved = save_case(case, fallback)
        warnings.warn(f"difftest: cannot save the finding under {target} ({e}); saved it as {saved.path}",
                      stacklevel=2)
    if saved.warning:
        warnings.warn(f"difftest: {saved.warning}", stacklevel=2)
    return saved.path


def note_verdict(verdict: Verdict) -> None:
    """Count the verdict's dismissals (agreement after arbitration, ill-conditioned) for the
    session summary."""
    for m in verdict.dismissals:
        _DISMISSALS[dismissal_reason(m)] += 1


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the counts to the controller
        workeroutput["difftest_dismissals"] = dict(_DISMISSALS)
        workeroutput["difftest_known_bugs"] = dict(_KNOWN_BUGS)
        workeroutput["difftest_flaky_torch"] = list(_FLAKY_TORCH)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    counts = getattr(node, "workeroutput", {}).get("difftest_dismissals", {})
    _DISMISSALS.update(counts)
    _KNOWN_BUGS.update(getattr(node, "workeroutput", {}).get("difftest_known_bugs", {}))
    _FLAKY_TORCH.extend(getattr(node, "workeroutput", {}).get("difftest_flaky_torch", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FLAKY_TORCH:
        terminalreporter.section("difftest flaky PyTorch results")
        terminalreporter.write_line("PyTorch-only findings that a second run of the program did not give "
                                    "(PyTorch's nondeterminism, docs/checks.md; not saved):")
        for line in _FLAKY_TORCH:
            terminalreporter.write_line(f"  {line}")
    if _KNOWN_BUGS:
        terminalreporter.section("difftest known bugs")
        terminalreporter.write_line("failing verdicts a known bug explains (known_bugs.py; not saved again):")
        for case, n in _KNOWN_BUGS.most_common():
            terminalreporter.write_line(f"  {n:>6}  {case}")
    if not _DISMISSALS:
        return
    total = sum(_DISMISSALS.values())
    terminalreporter.section("difftest dismissals")
    terminalreporter.write_line(f"{total} numeric mismatch(es) dismissed after float64 arbitration "
                                "(each with its evidence in the verdict):")
    for reason, n in _DISMISSALS.most_common():
        terminalreporter.write_line(f"  {n:>6}  {reason}")


def assert_agrees(verdict: Verdict, source: str, worker: BurnWorker | None = None) -> None:
    """The assertion every property uses: count dismissals; a failing verdict that a known bug
    explains (every finding, by the bug's site and effect: difftest/findings/triage.py) is
    counted, not saved (its corpus case replays it); any other finding, untriaged corpus cases
    of the same signature included, is saved, then fails with the report and its triage.
    `worker`: the one that ran the verdict (localisation re-runs ops on it), by default the
    shared one."""
    note_verdict(verdict)
    if verdict.ok:
        return

    t = triage(verdict, worker or shared_worker())
    if t.known is not None:
        _KNOWN_BUGS[t.known.name] += 1
        return
    if _torch_only_and_flaky(verdict, worker or shared_worker()):
        _FLAKY_TORCH.append(f"{source}: {t.signature}")
        return
    path = record_finding(verdict, source, triage=t.to_dict())
    saved = f"\nsaved as {path}" if path else ""
    raise AssertionError(table_report(verdict) + f"\ntriage: {t.describe()}" + saved)


# ------------------------------------------------------------------ corpus collection

def _torch_only_and_flaky(verdict: Verdict, worker: BurnWorker) -> bool:
    """Every finding says PyTorch is wrong (float64 sides with burn) and a second run of the
    program agrees: PyTorch's result depended on its process's memory, not on the program
    (PyTorch 2.15's bfloat16 convolution weight gradients leave positions that no output
    touches uninitialised: docs/checks.md). Burn's side is never excused this way; a PyTorch
    finding that repeats still fails."""
    if not verdict.findings or any(m.verdict != "torch-wrong" for m in verdict.findings):
        return False
    return check(verdict.program, worker).ok


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    if file_path.suffix != ".json" or file_path.name.startswith("."):
        return None
    try:
        file_path.resolve().relative_to(corpus_dir().resolve())
    except ValueError:
        return None
    return CorpusFile.from_parent(parent, path=file_path)


def _case_kind(path: Path) -> str | None:
    """The case's "kind" if the file parses (a corrupt file fails when the item runs)."""
    try:
        doc = read_json(path)
    except JsonFileError:
        return None
    kind = doc.get("kind", "program") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) else None


class CorpusFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        item = CorpusItem.from_parent(self, name=self.path.stem)
        if _case_kind(self.path) == "memory":
            # measured in fresh processes: quick size by default, full with --run-slow / -m memory
            item.add_marker(pytest.mark.memory)
        yield item


class CorpusItem(pytest.Item):
    def runtest(self) -> None:
        try:
            case = load_case(self.path)
        except CorpusError as e:
            raise CorpusFailure(str(e)) from None
        if case.memory is not None:
            outcome = replay_memory_case(case, full=memory_full(self.config))
            if not outcome.ok:
                raise CorpusFailure(f"{self.path} [{case.status}]: {outcome.message}")
            return

        elsewhere = case.not_here()
        if elsewhere is not None:
            pytest.skip(f"{self.path.name} {elsewhere}: corpus/README.md#host"
                        + (f", {case.upstream}" if case.upstream else ""))
        verdict = check(case.program, worker_for(case.backend))
        note_verdict(verdict)
        outcome = judge(case, verdict)
        if not outcome.ok:
            raise CorpusFailure(f"{self.path} [{case.status}]: {outcome.message}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CorpusFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"corpus case {self.path.name}"


class CorpusFailure(Exception):
    """A corpus case that did not do what its status says."""
