"""The `toolchain` module extension: upstream's `component` and `toolkit` tags.

    cuda.component(name = "cuda_nvcc", component_name = "nvcc", urls = [...], sha256 = ..., strip_prefix = ...)
    cuda.toolkit(name = "cuda", components_mapping = {"nvcc": "@cuda_nvcc", ...}, version = "13.0")

makes @cuda a deliverable toolkit, merged from the component archives; a
toolkit tag without components_mapping is the host's toolkit (toolkit_path,
or the search repositories.bzl describes). Upstream's `redist_json` tag
(NVIDIA's redistributable index) is not implemented.
"""

load("//cuda/private:repositories.bzl", "cuda_component", "cuda_toolkit", "deliverable_cuda_toolkit")

_component_tag = tag_class(attrs = {
    "name": attr.string(mandatory = True, doc = "Name of the component's repository."),
    "component_name": attr.string(doc = "Short name of the component, for example 'nvcc'."),
    "descriptive_name": attr.string(doc = "The component's official name."),
    "integrity": attr.string(doc = "The archive's checksum in Subresource Integrity format."),
    "sha256": attr.string(doc = "The archive's SHA-256."),
    "strip_prefix": attr.string(doc = "The folder in the archive that holds bin/, include/ and so on."),
    "url": attr.string(doc = "The archive's URL."),
    "urls": attr.string_list(doc = "URLs of the archive, tried in order."),
    "version": attr.string(doc = "The component's version."),
})

_toolkit_tag = tag_class(attrs = {
    "name": attr.string(default = "cuda", doc = "Name of the toolkit repository."),
    "toolkit_path": attr.string(doc = "Path of the host's CUDA toolkit; empty searches $CUDA_PATH, $CUDA_HOME, nvcc on PATH, /usr/local/cuda."),
    "components_mapping": attr.string_dict(doc = "Component name to component repository ('@cuda_nvcc'): a deliverable toolkit made of them."),
    "version": attr.string(doc = "A deliverable toolkit's CUDA release, checked against its nvcc."),
    "nvcc_version": attr.string(doc = "nvcc's release, when it differs from version (accepted for upstream's sake; version is what is checked)."),
})

def _toolchain_impl(module_ctx):
    # As upstream: the root module's tags if it declares a toolkit, else rules_cuda's own.
    root = [m for m in module_ctx.modules if m.is_root]
    own = [m for m in module_ctx.modules if m.name == "rules_cuda"]
    source = root[0] if root and root[0].tags.toolkit else own[0]
    for tag in source.tags.component:
        cuda_component(
            name = tag.name,
            component_name = tag.component_name,
            descriptive_name = tag.descriptive_name,
            integrity = tag.integrity,
            sha256 = tag.sha256,
            strip_prefix = tag.strip_prefix,
            url = tag.url,
            urls = tag.urls,
            version = tag.version,
        )
    declared = {}
    for tag in source.tags.toolkit:
        seen = declared.get(tag.name)
        if seen and (seen.toolkit_path, seen.components_mapping) != (tag.toolkit_path, tag.components_mapping):
            fail("cuda.toolkit: two different toolkits named {}".format(tag.name))
        declared[tag.name] = tag
    for name, tag in declared.items():
        if tag.components_mapping:
            if tag.toolkit_path:
                fail("cuda.toolkit {}: give toolkit_path or components_mapping, not both".format(name))
            deliverable_cuda_toolkit(
                name = name,
                components = ["{}//:BUILD.bazel".format(repo) for repo in tag.components_mapping.values()],
                version = tag.version or tag.nvcc_version,
            )
        else:
            cuda_toolkit(name = name, toolkit_path = tag.toolkit_path)

toolchain = module_extension(
    implementation = _toolchain_impl,
    tag_classes = {"component": _component_tag, "toolkit": _toolkit_tag},
)
