"""Rules that turn repository-rule findings and flags into providers."""

load("@bazel_skylib//rules:common_settings.bzl", "BuildSettingInfo")
load(":providers.bzl", "CudaArchsInfo", "CudaToolkitInfo")

def _cuda_toolkit_impl(ctx):
    overlay = ctx.files.overlay
    return [CudaToolkitInfo(
        nvcc = ctx.attr.nvcc,
        version = ctx.attr.version,
        host_glibc = ctx.attr.host_glibc,
        overlay_include = ctx.attr.overlay_include if overlay else None,
        overlay_files = depset(overlay),
        overlay_min_glibc = ctx.attr.overlay_min_glibc,
    )]

cuda_toolkit = rule(
    implementation = _cuda_toolkit_impl,
    doc = "Describes a CUDA toolkit found on the host (see toolkit.bzl).",
    attrs = {
        "host_glibc": attr.string(doc = "The host's glibc, for example '2.43'; empty when unknown."),
        "nvcc": attr.string(mandatory = True),
        "overlay": attr.label_list(allow_files = True),
        "overlay_include": attr.string(doc = "Execroot-relative path of the overlay include dir."),
        "overlay_min_glibc": attr.string(doc = "The oldest glibc whose headers need the overlay."),
        "version": attr.string(mandatory = True),
    },
    provides = [CudaToolkitInfo],
)

def _cuda_archs_impl(ctx):
    archs = ctx.attr.flag[BuildSettingInfo].value
    for arch in archs:
        if not arch.startswith("sm_") or not arch[3:].rstrip("a").isdigit():
            fail("//tools/cuda:archs: '{}' is not a real architecture like 'sm_90'".format(arch))
    return [CudaArchsInfo(archs = archs)]

cuda_archs = rule(
    implementation = _cuda_archs_impl,
    attrs = {"flag": attr.label(mandatory = True, providers = [BuildSettingInfo])},
    provides = [CudaArchsInfo],
)
