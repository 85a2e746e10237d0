"""package_contract.json, what the exporter writes and the C++ loader reads, with its
errors as the export's."""

from __future__ import annotations

import functools

from ..contract.package_contract import Contract, ContractError
from ..contract.package_contract import load as _load_contract
from .errors import ExportError


@functools.cache
def load_contract() -> Contract:
    """deploy/contract/package_contract.json, whose errors are the export's."""
    try:
        return _load_contract()
    except ContractError as e:
        raise ExportError(str(e)) from e
