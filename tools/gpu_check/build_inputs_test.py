"""tools/gpu_check/build_inputs.json is what the build compiles today."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

UPDATE = "tools/bazel run //tools/gpu_check:update_build_inputs"


def _file(var: str) -> Path:
    value = os.environ.get(var)
    if not value:
        pytest.fail(f"{var} is unset: run this test with tools/bazel test")
    return Path(os.environ["TEST_SRCDIR"]) / value


def test_the_committed_list_is_the_generated_one():
    committed = _file("COMMITTED_BUILD_INPUTS").read_text()
    generated = _file("GENERATED_BUILD_INPUTS").read_text()
    assert committed == generated, (
        f"tools/gpu_check/build_inputs.json is stale: {UPDATE}, then commit it"
    )


def test_the_list_names_what_the_script_needs():
    # A guard against a generator that writes empty lists (which the equality above would
    # accept once committed).
    inputs = json.loads(_file("GENERATED_BUILD_INPUTS").read_text())
    ops, loader = inputs["op_library"], inputs["loader"]
    assert "ops/registration.cpp" in ops["cpp"]
    assert any(f.endswith("/cpu.cpp") for f in ops["cpp"])
    assert any(f.endswith("/cuda.cu") for f in ops["cu"])
    assert ops["generated"] == ["ops/my_ops_c_shims.cpp"]
    assert "deploy/loader/main.cpp" in loader["cpp"]
    assert any(f.startswith("deploy/runtime/src/") for f in loader["cpp"])
    assert not any("/tests/" in f for f in ops["cpp"] + loader["cpp"])
    assert loader["generated"] == ["deploy/runtime/src/package_contract.h"]
    assert "-DCPU_CAPABILITY=AVX2" in inputs["flags"]["TORCH_CPU_KERNEL_COPTS"]
