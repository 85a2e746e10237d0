"""What `farm up` refuses before it installs or starts anything: a store the disk cannot hold,
and a size it cannot read. Runs no farm."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FARM = Path(__file__).absolute().parent / "farm"


def load_farm():
    loader = importlib.machinery.SourceFileLoader("farm", str(FARM))
    spec = importlib.util.spec_from_loader("farm", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def run_farm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(FARM), *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("text", "size"),
    [("8G", 8 * 2**30), ("512M", 512 * 2**20), ("2t", 2 * 2**40), ("4096", 4096), ("3K", 3072)],
)
def test_sizes_read_in_binary_units(text, size):
    assert load_farm().parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "8X", "0G", "-1G", "1.5G", "8GB"])
def test_a_size_that_is_not_one_is_refused(text):
    farm = load_farm()
    with pytest.raises(farm.argparse.ArgumentTypeError, match="is not a size"):
        farm.parse_size(text)


def test_a_store_larger_than_the_free_disk_is_refused_in_one_line(tmp_path):
    state = tmp_path / "farm"
    # What an earlier farm left: deleted, as `up` always did, before the disk is measured.
    (state / "cas").mkdir(parents=True)
    (state / "cas" / "blob").write_bytes(b"x" * 4096)
    free_before = shutil.disk_usage(tmp_path).free
    result = run_farm("up", "--state-dir", str(state), "--cas-quota", "1000000G")
    free_after = shutil.disk_usage(tmp_path).free

    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith(f"farm: error: the disk under {state} has ")
    # The free space it names is this disk's, as df reads it (to 0.1 GiB, as printed; other
    # processes may write in between, hence the range).
    named = float(line.split(" has ", 1)[1].split(" GiB free", 1)[0])
    low, high = sorted((free_before, free_after))
    assert low / 2**30 - 0.2 <= named <= high / 2**30 + 0.2, line
    # What it needs: the quota and casd's 2 GiB of headroom.
    assert "the farm's store needs 1000002.0 GiB (--cas-quota 1000000.0 GiB" in line
    assert "pass a smaller --cas-quota" in line
    assert not state.exists(), "a refused farm left its state dir behind"
    assert result.stdout == ""


def test_a_bad_quota_is_a_usage_error():
    result = run_farm("up", "--cas-quota", "lots")
    assert result.returncode == 2
    assert "argument --cas-quota: 'lots' is not a size such as 8G or 512M" in result.stderr
