"""The `toolchain` module extension: `cuda.toolkit(name = "cuda", toolkit_path = "")`.

Upstream's extension also has `component` and `redist_json` tags (toolkits
downloaded from NVIDIA's redistributables); this subset has the local toolkit
only.
"""

load("//cuda/private:repositories.bzl", "cuda_toolkit")

_toolkit_tag = tag_class(attrs = {
    "name": attr.string(default = "cuda", doc = "Name of the toolkit repository."),
    "toolkit_path": attr.string(doc = "Path of the CUDA toolkit; empty searches $CUDA_PATH, $CUDA_HOME, nvcc on PATH, /usr/local/cuda."),
})

def _toolchain_impl(module_ctx):
    # As upstream: the root module's toolkits if it declares any, else rules_cuda's own.
    root = [m for m in module_ctx.modules if m.is_root]
    own = [m for m in module_ctx.modules if m.name == "rules_cuda"]
    source = root[0] if root and root[0].tags.toolkit else own[0]
    declared = {}
    for tag in source.tags.toolkit:
        if tag.name in declared and declared[tag.name] != tag.toolkit_path:
            fail("cuda.toolkit: two toolkits named {} ({} and {})".format(tag.name, declared[tag.name], tag.toolkit_path))
        declared[tag.name] = tag.toolkit_path
    for name, path in declared.items():
        cuda_toolkit(name = name, toolkit_path = path)

toolchain = module_extension(
    implementation = _toolchain_impl,
    tag_classes = {"toolkit": _toolkit_tag},
)
