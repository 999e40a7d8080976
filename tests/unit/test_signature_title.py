"""A new case that no one-op program localised (wrong flags, an outcome) is titled from its
signature: where, what is wrong, and the flags or message; never the bare word `new` that the
first clause of its reason (`new: flags:burn:...`) would give."""

from __future__ import annotations

import pytest

from difftest.findings.issue import signature_title


@pytest.mark.parametrize(("signature", "title"), [
    ("flags:burn:cat:flags is_tracked=False #15dabf45524e", "cat: wrong autodiff flags (is_tracked=False)"),
    ("flags:burn:region:no_grad:is_tracked #aaaaaaaaaaaa", "region:no_grad: wrong autodiff flags (is_tracked)"),
    ("flags:burn:cut:detach:is_autodiff #aaaaaaaaaaaa", "cut:detach: wrong autodiff flags (is_autodiff)"),
    ("burn-wrong:-:apply:batch_norm:grad:wrong #b603f4d4e2fa", "apply:batch_norm: wrong gradient"),
    ("torch-wrong:-:mish:grad:rounding #00ce778bf998", "mish: wrong gradient (rounding error)"),
    ("outcome:burn:backward:outcome panic at statement 4: no gradient #bbbbbbbbbbbb",
     "backward: wrong outcome (panic or error) (panic at statement 4: no gradient)"),
    ("timeout:burn:cumsum:timeout no answer within Ns #cccccccccccc", "cumsum: hangs (no answer within Ns)"),
    ("crash:burn:exp:crash exit -6 #dddddddddddd", "exp: crashes the worker (exit -6)"),
])
def test_a_signature_gives_a_title(signature: str, title: str) -> None:
    assert signature_title(signature) == title


@pytest.mark.parametrize("text", ["new", "", None, "flags:burn:cat #nothex"])
def test_what_is_no_signature_gives_none(text: object) -> None:
    assert signature_title(text) is None


def test_a_long_message_is_cut_at_a_word() -> None:
    title = signature_title("outcome:burn:backward:outcome " + "word " * 40 + "#cccccccccccc")
    assert title is not None and len(title) <= 102 and title.endswith(" …")


def test_an_unlocalised_new_case_is_titled_from_its_signature() -> None:
    from difftest.findings.corpus import Case
    from difftest.findings.issue import title
    from difftest.program.ir import Program

    signature = "flags:burn:cat:flags is_tracked=False #15dabf45524e"
    case = Case(Program(()), status="new", reason=f"new: {signature}",
                record={"triage": {"signature": signature, "known": None, "localisation": None}})
    assert title(case) == "cat: wrong autodiff flags (is_tracked=False)"
