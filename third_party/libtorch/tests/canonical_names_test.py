"""The LibTorch repositories never name another module's repository canonically.

A canonical name (`@@rules_python~~pip~pypi_torch`) is an implementation
detail of one Bazel and one rules_python release: Bazel 8 spells the
separators differently and newer rules_python names the wheel repositories
differently, so analysis that used one would break on either upgrade. The
repository rules reach the wheels through apparent names that MODULE.bazel
imports; this test reads the rule and what it generated.
"""

import os
import pathlib
import re

import pytest

# `@@//` is the main repository, spelled the same in every Bazel release.
CANONICAL_LABEL = re.compile(r"@@[^/\s\"']")

FILES = os.environ["CANONICAL_NAME_CHECKED_FILES"].split()


@pytest.mark.parametrize("path", FILES)
def test_no_canonical_repository_names(path):
    lines = (pathlib.Path(os.environ["RUNFILES_DIR"]) / path).read_text().splitlines()
    found = [
        f"line {n}: {line.strip()}"
        for n, line in enumerate(lines, 1)
        if CANONICAL_LABEL.search(line)
    ]
    assert not found, f"{path} names repositories canonically: {found}"


def test_the_pattern_finds_canonical_names():
    # The check above can only fail if the pattern matches what it looks for.
    assert CANONICAL_LABEL.search('Label("@@rules_python~~pip~pypi_torch//:BUILD.bazel")')
    assert CANONICAL_LABEL.search("@@{}_{}//:BUILD.bazel")
    assert not CANONICAL_LABEL.search('"@@//third_party/python:setuptools_annotation.json"')
    assert not CANONICAL_LABEL.search('Label("@pypi_torch//:BUILD.bazel")')


def test_every_file_was_read():
    assert len(FILES) >= 4, FILES
