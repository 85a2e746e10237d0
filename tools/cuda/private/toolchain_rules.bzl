"""Rules that turn repository-rule findings and flags into providers."""

load("@bazel_skylib//rules:common_settings.bzl", "BuildSettingInfo")
load(":providers.bzl", "CudaArchsInfo", "CudaToolkitInfo")

def _cuda_toolkit_impl(ctx):
    overlay = ctx.files.overlay
    return [CudaToolkitInfo(
        nvcc = ctx.attr.nvcc,
        version = ctx.attr.version,
        overlay_include = ctx.attr.overlay_include if overlay else None,
        overlay_files = depset(overlay),
    )]

cuda_toolkit = rule(
    implementation = _cuda_toolkit_impl,
    doc = "Describes a CUDA toolkit found on the host (see toolkit.bzl).",
    attrs = {
        "nvcc": attr.string(mandatory = True),
        "overlay": attr.label_list(allow_files = True),
        "overlay_include": attr.string(doc = "Execroot-relative path of the overlay include dir."),
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
