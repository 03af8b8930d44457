"""Damaged plans through status, verify and execute: the tool's own refusal every time, never a traceback, and the
log dir untouched (the engine is benchmarks/fuzz_plans.py, which runs 10,000 cases and more by hand)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from conftest import REPO, run_cli


def _load_fuzz():
    spec = importlib.util.spec_from_file_location("fuzz_plans", REPO / "benchmarks" / "fuzz_plans.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_plans", module)
    spec.loader.exec_module(module)
    return module


fuzz_plans = _load_fuzz()


@pytest.mark.parametrize(("form", "seed"), [("columnar", 11), ("json", 12)])
def test_damaged_plans_are_refused_by_every_verb_and_touch_nothing(form, seed):
    outcomes = fuzz_plans.fuzz(300, seed, form, check_every=100)
    assert outcomes["CRASH"] == 0, outcomes
    assert outcomes["refused"] > 250, outcomes  # the damage reached the readers


def test_a_plan_damaged_where_it_is_read_is_refused_with_its_name(tmp_path, capsys):

    _, plan, data = fuzz_plans.make_plan(tmp_path, "columnar")
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")  # the Parquet footer's first byte
    plan.write_bytes(data[:footer] + bytes(64) + data[footer + 64 :])
    capsys.readouterr()
    ran = run_cli(capsys, "status", "--plan", str(plan))
    assert ran.code == 1
    err = ran.err
    assert f"{plan}: not a readable columnar plan" in err and "Traceback" not in err
