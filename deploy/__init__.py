"""The deploy side of my_ops: export a model to an AOTInductor package from Python, and load one.

    from my_ops.deploy import export, load  # deploy.export in this repository
    exported = export(model, (x,), "out")
    compiled = load(exported.package)      # with the weights beside it

`export`, `Exported`, `ExportError`, `load` and `WeightsError` come from the exporter
(exporter/api.py, exporter/loading.py), imported on first use: the rest of the package (the
bundle tools, the benchmarks) does not need it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ExportError", "Exported", "WeightsError", "export", "load"]

_EXPORTER = {
    "export": ".exporter.api",
    "Exported": ".exporter.api",
    "ExportError": ".exporter.errors",
    "load": ".exporter.loading",
    "WeightsError": ".exporter.loading",
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
