"""burn backends without a built interpreter: names, the build key, the layer a finding lives
in, the `backends_tested` record, and bad `--backend` input (docs/backends.md). Runs on
backends: tests/backends/ (--run-backends) and tests/differential/test_backend_choice.py."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from difftest.cli import main
from difftest.exec.backends import BACKENDS, KERNEL_CRATES, extra_features, parse_backends
from difftest.exec.burn_builds import BurnSpec, generate_manifest, repository_rust_dir
from difftest.findings.backends import where
from difftest.findings.corpus import CorpusError, load_case
from difftest.ops.backend_support import UNSUPPORTED_OPS, dtypes, refusal

ROOT = Path(__file__).resolve().parents[2]


def test_backend_names_parse_in_order_without_duplicates() -> None:
    assert parse_backends("flex, NdArray,flex") == ("flex", "ndarray")
    for bad, needle in (("cuda", "unknown backend 'cuda'"), (",", "names no backend"), ("", "names no backend")):
        with pytest.raises(ValueError, match=needle):
            parse_backends(bad)


def test_python_and_rust_name_the_same_backends() -> None:
    rust = (ROOT / "rust" / "src" / "backend.rs").read_text()
    named = [b for b in BACKENDS if f'=> "{b}"' in rust]
    assert named == list(BACKENDS)
    features = tomllib.loads((ROOT / "rust" / "Cargo.toml").read_text())["features"]
    backend_features = set(features) - {"coverage"}  # the one feature that is not a backend
    assert backend_features == set(BACKENDS) - {"flex"} and set(KERNEL_CRATES) == set(BACKENDS)
    assert "default" not in features  # the default build is Flex alone


def test_the_build_key_is_version_and_backends() -> None:
    assert extra_features(("ndarray", "flex", "wgpu")) == ("ndarray", "wgpu")
    plain = BurnSpec(version="0.22.1")
    both = BurnSpec(version="0.22.1", backends=extra_features(("flex", "ndarray")))
    assert (plain.label, str(plain)) == ("0.22.1", "0.22.1")
    assert (both.label, str(both)) == ("0.22.1+ndarray", "0.22.1+ndarray")
    rust = repository_rust_dir()
    # a build without extra backends has today's manifest: no [features] table
    assert "[features]" not in generate_manifest(plain, rust)
    doc = tomllib.loads(generate_manifest(both, rust))
    assert doc["features"]["ndarray"] == ["burn/ndarray"]


def test_where_names_the_layer() -> None:
    assert "every backend tested" in where({"flex": True, "ndarray": True})
    alone = where({"flex": True, "ndarray": False})
    assert "flex only" in alone and "burn-flex" in alone and "default op it inherits" in alone
    assert "no backend" in where({"flex": False, "ndarray": False})
    assert "the only backend tested" in where({"flex": True})
    assert "code those backends share" in where({"flex": True, "ndarray": True, "wgpu": False})


def test_a_case_names_its_backend_and_backends_tested_is_checked(tmp_path: Path) -> None:
    doc = json.loads((ROOT / "corpus" / "bugs" / "powi-zero-untracked.json").read_text())
    doc["backend"] = "ndarray"
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    assert load_case(path).backend == "ndarray"  # a case found on NdArray replays there
    doc["backend"] = "cuda"
    path.write_text(json.dumps(doc))
    with pytest.raises(CorpusError, match='"backend" must be one of'):
        load_case(path)
    del doc["backend"]
    for bad, needle in (({"cuda": {"outcome": "x"}}, "unknown backend 'cuda'"),
                        ({"flex": "fails"}, "must be an object"), ([], "must be an object")):
        doc["backends_tested"] = bad
        path = tmp_path / "case.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(CorpusError, match=needle):
            load_case(path)


@pytest.mark.parametrize("argv", [["fuzz", "--backend", "cuda"], ["run", "x.json", "--backend", "flex,nope"],
                                  ["replay", "--backend", "flex,ndarray"]])
def test_bad_backend_options_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--backend" in err and ("unknown backend" in err or "one backend" in err), err


def test_backend_support_names_catalog_ops_and_known_dtypes() -> None:
    from difftest.ops.catalog import CATALOG
    from difftest.program.dtypes import FLOAT_DTYPES

    for backend, ops in UNSUPPORTED_OPS.items():
        assert backend in BACKENDS and set(ops) <= set(CATALOG), ops
        assert set(dtypes(backend)) <= set(FLOAT_DTYPES) and "float32" in dtypes(backend)
    assert dtypes("flex") == FLOAT_DTYPES


def test_ndarray_refuses_a_cast_to_half_precision_only() -> None:
    # measured on the backend tier (tests/backends/): a cast to float64 runs on NdArray
    from difftest.program.ir import Leaf, OpCall, Program

    def cast_to(dtype: str) -> Program:
        return Program((Leaf("x0", (2,), (1.0, 2.0), require_grad=True),
                        OpCall("v0", "cast", ("x0",), {"dtype": dtype})))

    assert refusal(cast_to("float64"), "ndarray") is None
    assert refusal(cast_to("float32"), "ndarray") is None
    assert refusal(cast_to("float16"), "ndarray") == "Unsupported dtype: F16"
    assert refusal(cast_to("bfloat16"), "ndarray") == "Unsupported dtype: BF16"
    assert refusal(cast_to("bfloat16"), "flex") is None


def test_a_campaign_on_ndarray_draws_only_what_it_runs() -> None:
    from difftest.cli.backends import fit_campaign
    from difftest.ops.catalog import CATALOG

    ops, profile = fit_campaign("ndarray", "", "default")
    assert profile == "no-half"
    # interpolate_bilinear is refused whatever its attributes; cast only to half precision, which
    # the generator redraws (test_the_generator_redraws_a_call_its_backends_refuse)
    assert set(ops.split(",")) == set(CATALOG) - {"interpolate_bilinear"}
    assert fit_campaign("flex", "", "default") == ("", "default")
    assert fit_campaign("ndarray", "exp,interpolate_bilinear", "float64") == ("exp", "float64")
    assert fit_campaign("ndarray", "exp,cast", "float64") == ("exp,cast", "float64")
    with pytest.raises(ValueError, match="runs float32, float64 only"):
        fit_campaign("ndarray", "", "float16")
    # a composed profile that keeps the default dtype mix loses half precision too
    assert fit_campaign("ndarray", "", "sessions+checkpointing")[1] == "sessions+checkpointing+no-half"
    assert fit_campaign("ndarray", "", "checkpointing+float64")[1] == "checkpointing+float64"
    assert fit_campaign("flex", "", "sessions+checkpointing")[1] == "sessions+checkpointing"
    with pytest.raises(ValueError, match="runs float32, float64 only"):
        fit_campaign("ndarray", "", "checkpointing+float16")


def test_the_generator_redraws_a_call_its_backends_refuse() -> None:
    """A campaign on NdArray draws casts, to the dtypes NdArray runs only; on Flex, to every one."""
    from difftest.program.ir import OpCall
    from difftest.strategies.choices import RandomChoices
    from difftest.strategies.config import GenConfig
    from difftest.strategies.generator import generate

    def targets(backends: tuple[str, ...]) -> set[str]:
        cfg = GenConfig.profile("no-half", ops=("cast", "exp", "sum"), backends=backends)
        return {s.attrs["dtype"] for k in range(300) for s in generate(RandomChoices(k), cfg).statements
                if isinstance(s, OpCall) and s.op == "cast"}

    assert targets(("ndarray",)) == {"float32", "float64"}
    assert targets(("flex", "ndarray")) == {"float32", "float64"}
    assert targets(("flex",)) == targets(()) == {"float32", "float64", "float16", "bfloat16"}


def test_the_burn_reproducer_of_a_case_on_another_backend_uses_its_device() -> None:
    from difftest.findings.backends import rust_on_backend

    test = "#[test]\nfn t() {\n    let device = Device::flex().autodiff();\n}\n"
    assert rust_on_backend(test, "flex") == test
    on = rust_on_backend(test, "ndarray")
    assert "Device::ndarray().autodiff()" in on and "Device::flex()" not in on and "#[allow(deprecated)]" in on


def test_a_campaigns_command_names_its_backend() -> None:
    """Program k of a campaign on NdArray is drawn for NdArray (its refused calls redrawn): the
    command a finding records regenerates it only with the backend named."""
    from difftest.campaign.parallel import FuzzOptions

    assert FuzzOptions(seed=5, backends=("ndarray",)).source() == "difftest fuzz --seed 5 --backend ndarray"
    assert FuzzOptions(seed=5, backends=("flex",)).source() == "difftest fuzz --seed 5"
    assert FuzzOptions(seed=5, backends=("flex", "ndarray")).source() == "difftest fuzz --seed 5 --backend flex,ndarray"
