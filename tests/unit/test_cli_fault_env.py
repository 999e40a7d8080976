"""$DIFFTEST_BURN_FAULT and the command line: the workers difftest starts never inherit the
variable (BurnWorker), so the CLI turns it into --fault where a command takes one and says
so, and says it is unused elsewhere, rather than dropping it in silence."""

from __future__ import annotations

import pytest

from difftest.cli.common import FAULT_ENV, fault_from_environment
from difftest.cli.main import build_parser


def parsed(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(list(argv))


def test_unset_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULT_ENV, raising=False)
    args = parsed("run", "p.json")
    assert fault_from_environment(args) is None and args.fault is None
    monkeypatch.setenv(FAULT_ENV, "")
    assert fault_from_environment(args) is None and args.fault is None


@pytest.mark.parametrize("argv", [("run", "p.json"), ("fuzz", "--programs", "3"), ("show", "c.json"), ("report",)])
def test_becomes_the_fault_option(monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...]) -> None:
    monkeypatch.setenv(FAULT_ENV, "grad-sign:tanh")
    args = parsed(*argv)
    notice = fault_from_environment(args)
    assert args.fault == "grad-sign:tanh"
    assert notice is not None and "grad-sign:tanh" in notice


def test_the_option_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_ENV, "grad-sign:tanh")
    args = parsed("run", "p.json", "--fault", "grad-sign:exp")
    notice = fault_from_environment(args)
    assert args.fault == "grad-sign:exp"
    assert notice is not None and "not used" in notice
    same = parsed("run", "p.json", "--fault", "grad-sign:tanh")
    assert fault_from_environment(same) is None and same.fault == "grad-sign:tanh"


def test_commands_without_the_option_say_it_is_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_ENV, "grad-sign:tanh")
    notice = fault_from_environment(parsed("replay", "corpus"))
    assert notice is not None and "not used" in notice and "replay" in notice
    assert fault_from_environment(parsed("ops")) is None  # runs no burn: nothing to say


def test_pytest_says_the_variable_is_not_used(monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config) -> None:
    from difftest.pytest_plugin import pytest_report_header

    monkeypatch.delenv(FAULT_ENV, raising=False)
    assert pytest_report_header(pytestconfig) is None
    monkeypatch.setenv(FAULT_ENV, "grad-sign:tanh")
    header = pytest_report_header(pytestconfig)
    assert header is not None and "grad-sign:tanh" in header and "not used" in header
