"""The start of //deploy/exporter:export: Bazel's py_binary runs its main file as a script,
and the exporter's modules import each other relatively, so it is run as its package."""

import runpy

if __name__ == "__main__":
    runpy.run_module("deploy.exporter", run_name="__main__", alter_sys=True)
