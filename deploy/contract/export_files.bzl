"""Generated from package_contract.json by package_contract.py --bzl: edit that file, not this one."""

# What every export writes.
EXPORT_FILES = ["model.pt2", "sample_input.pt", "expected_output.pt", "manifest.json", "architecture.json"]

# What an export writes only sometimes (manifest.sig: when signed).
OPTIONAL_EXPORT_FILES = ["manifest.sig", "weights.bin", "weights.json", "weights.sig"]

# What a weights export (--weights-only) writes, and writes only when signed.
WEIGHTS_FILES = ["weights.bin", "weights.json", "sample_input.pt", "expected_output.pt"]
OPTIONAL_WEIGHTS_FILES = ["weights.sig"]
