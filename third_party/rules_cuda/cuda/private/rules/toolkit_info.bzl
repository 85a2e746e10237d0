"""The rule the @cuda repository uses to describe the toolkit it found."""

load("//cuda/private:providers.bzl", "CudaToolkitInfo")

def _local_cuda_toolkit_impl(ctx):
    overlay = ctx.files.overlay
    return [CudaToolkitInfo(
        nvcc = ctx.attr.nvcc,
        version = ctx.attr.version,
        host_glibc = ctx.attr.host_glibc,
        overlay_include = ctx.attr.overlay_include if overlay else None,
        overlay_files = depset(overlay),
        overlay_min_glibc = ctx.attr.overlay_min_glibc,
    )]

local_cuda_toolkit = rule(
    implementation = _local_cuda_toolkit_impl,
    doc = "Describes a CUDA toolkit found on the host (see repositories.bzl).",
    attrs = {
        "host_glibc": attr.string(doc = "The host's glibc, for example '2.43'; empty when unknown."),
        "nvcc": attr.string(doc = "Absolute path of nvcc; empty when no toolkit was found."),
        "overlay": attr.label_list(allow_files = True),
        "overlay_include": attr.string(doc = "Execroot-relative path of the overlay include dir."),
        "overlay_min_glibc": attr.string(doc = "The oldest glibc whose headers need the overlay."),
        "version": attr.string(),
    },
    provides = [CudaToolkitInfo],
)
