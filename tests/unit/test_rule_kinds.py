"""Each flag rule declares the statement kinds it can apply to (`Rule.on`), and the model asks
its `applies` of no other kind. The declaration must lose nothing: over generated programs of
every profile, the model with every rule asked of every statement predicts exactly what it
predicts with the declared kinds (states, failures, gradients, firings)."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import pytest

from difftest.divergences.rules import RULES
from difftest.oracle.model import predict
from difftest.program.ir import Statement
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

STATEMENT_KINDS = get_args(Statement)


def test_rules_declare_statement_kinds() -> None:
    for r in RULES:
        assert r.on and all(k in STATEMENT_KINDS for k in r.on), r.name


@pytest.mark.parametrize("profile", ["default", "sessions", "float64", "continuous"])
def test_declared_kinds_predict_what_every_kind_predicts(profile: str) -> None:
    asked_everywhere = [replace(r, on=STATEMENT_KINDS) for r in RULES]
    cfg = GenConfig.profile(profile)
    fired = 0
    for k in range(150):
        program = generate(RandomChoices(7_000 + k), cfg)
        declared, everywhere = predict(program, RULES), predict(program, asked_everywhere)
        assert declared == everywhere, (profile, k)
        fired += len(declared.firings)
    assert fired  # the programs exercise the rules at all
