"""The deploy side of my_ops: export a model to an AOTInductor package from Python, and load one.

    from my_ops.deploy import export, load  # deploy.export in this repository
    exported = export(model, (x,), "out")
    compiled = load(exported.package)      # with the weights beside it

A decoder package (export(my_ops.llama.LlamaDecoder, None, "out"), or my-ops-export --kv-cache)
generates tokens: ``generate(load(package), prompt_ids, 64)``, or a ``Session`` per sequence.

`export`, `Exported`, `ExportError`, `load` and `WeightsError` come from the exporter
(exporter/api.py, exporter/loading.py), imported on first use: the rest of the package (the
bundle tools, the benchmarks) does not need it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ExportError",
    "Exported",
    "GenerateError",
    "Generated",
    "Sampling",
    "Session",
    "WeightsError",
    "export",
    "generate",
    "load",
]

_EXPORTER = {
    "export": ".exporter.api",
    "Exported": ".exporter.api",
    "ExportError": ".exporter.errors",
    "load": ".exporter.loading",
    "WeightsError": ".exporter.loading",
    "GenerateError": ".exporter.generate",
    "Generated": ".exporter.generate",
    "Sampling": ".exporter.generate",
    "Session": ".exporter.generate",
    "generate": ".exporter.generate",
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
