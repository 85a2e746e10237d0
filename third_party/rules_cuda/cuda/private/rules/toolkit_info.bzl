"""The rule the @cuda repository uses to describe its toolkit."""

load("//cuda/private:providers.bzl", "CudaToolkitInfo")

def _local_cuda_toolkit_impl(ctx):
    overlay = ctx.files.overlay
    nvcc_file = ctx.file.nvcc_file
    if nvcc_file and ctx.attr.nvcc:
        fail("{}: give nvcc (a path on the host) or nvcc_file (a file of the toolkit), not both".format(ctx.label))
    return [CudaToolkitInfo(
        nvcc = nvcc_file.path if nvcc_file else ctx.attr.nvcc,
        files = depset(ctx.files.toolkit_files),
        version = ctx.attr.version,
        host_glibc = ctx.attr.host_glibc,
        overlay_include = ctx.attr.overlay_include if overlay else None,
        overlay_files = depset(overlay),
        overlay_min_glibc = ctx.attr.overlay_min_glibc,
    )]

local_cuda_toolkit = rule(
    implementation = _local_cuda_toolkit_impl,
    doc = "Describes the CUDA toolkit of the @cuda repository (see repositories.bzl).",
    attrs = {
        "host_glibc": attr.string(doc = "The host's glibc, for example '2.43'; empty when unknown."),
        "nvcc": attr.string(doc = "Absolute path of a host toolkit's nvcc; empty for a deliverable toolkit or none."),
        "nvcc_file": attr.label(
            allow_single_file = True,
            doc = "A deliverable toolkit's nvcc, one of toolkit_files.",
        ),
        "overlay": attr.label_list(allow_files = True),
        "overlay_include": attr.string(doc = "Execroot-relative path of the overlay include dir."),
        "overlay_min_glibc": attr.string(doc = "The oldest glibc whose headers need the overlay."),
        "toolkit_files": attr.label_list(
            allow_files = True,
            doc = "What nvcc runs and reads, as inputs of every compile (a deliverable toolkit's; a host toolkit has none).",
        ),
        "version": attr.string(),
    },
    provides = [CudaToolkitInfo],
)
