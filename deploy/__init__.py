"""The deploy side of my_ops: export a model to an AOTInductor package from Python.

    from my_ops.deploy import export      # deploy.export in this repository
    exported = export(model, (x,), "out")

`export`, `Exported` and `ExportError` come from the exporter (exporter/api.py), imported on
first use: the rest of the package (the bundle tools, the benchmarks) does not need it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ExportError", "Exported", "export"]

_EXPORTER = {
    "export": ".exporter.api",
    "Exported": ".exporter.api",
    "ExportError": ".exporter.errors",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
