"""`cuda_library` and `cuda_objects`: compile .cu sources with nvcc.

The objects are position-independent, so they link into shared libraries
(such as a PyTorch op library) as well as into binaries. Host code is
compiled by the C++ toolchain's compiler, passed to nvcc with -ccbin.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain", "use_cpp_toolchain")
load("@rules_cc//cc/common:cc_common.bzl", "cc_common")
load("@rules_cc//cc/common:cc_info.bzl", "CcInfo")
load("//cuda/private:providers.bzl", "CudaArchsInfo", "CudaInfo", "CudaToolkitInfo")

_OPT_FLAGS = {
    "dbg": ["-g", "-O0"],
    "fastbuild": ["-O2"],
    "opt": ["-O3", "-DNDEBUG"],
}

def _gencode_flags(arch_specs):
    # One -gencode per (PTX architecture, code) pair, as upstream's nvcc
    # toolchain writes them; no specs means nvcc's default architecture.
    flags = []
    for spec in arch_specs:
        for stage2 in spec.stage2_archs:
            kind = "compute" if stage2.virtual else ("lto" if stage2.lto else "sm")
            flags.append("-gencode=arch=compute_{},code={}_{}".format(spec.stage1_arch, kind, stage2.arch))
    return flags

def _include_flags(compilation_context, overlay_include):
    flags = []
    if overlay_include:
        flags.append("-I" + overlay_include)
    for path in compilation_context.quote_includes.to_list():
        flags.append("-I" + path)
    for path in compilation_context.includes.to_list():
        flags.append("-I" + path)
    for path in compilation_context.system_includes.to_list():
        flags += ["-isystem", path]
    for path in compilation_context.external_includes.to_list():
        flags += ["-isystem", path]
    return flags

def _version_tuple(version):
    return tuple([int(part) for part in version.split(".")])

def _toolchain_glibc(cc_toolchain, toolkit):
    """The glibc whose headers nvcc's host compiler sees.

    The sysroot toolchain (tools/cc) names its glibc in target_libc
    ("glibc_2.36"); any other toolchain uses the host's headers.
    """
    libc = cc_toolchain.libc
    if libc.startswith("glibc_"):
        return libc[len("glibc_"):]
    return toolkit.host_glibc

def _overlay_include(cc_toolchain, toolkit):
    if not toolkit.overlay_include:
        return None
    glibc = _toolchain_glibc(cc_toolchain, toolkit)
    if not glibc or _version_tuple(glibc) >= _version_tuple(toolkit.overlay_min_glibc):
        return toolkit.overlay_include
    return None

def _sysroot_flags(cc_toolchain):
    """Host-compiler flags that make nvcc use the C++ toolchain's sysroot, as cc_* rules do."""
    sysroot = cc_toolchain.sysroot
    if not sysroot:
        return []
    flags = ["-Xcompiler", "--sysroot=" + sysroot]

    # GCC does not find libstdc++'s headers under --sysroot by itself: like
    # the toolchain's own compile flags, replace the system include dirs with
    # the toolchain's built-in ones (libstdc++, GCC's own, the sysroot's).
    builtin = cc_toolchain.built_in_include_directories
    if builtin:
        flags += ["-Xcompiler", "-nostdinc"]
        for d in builtin:
            flags += ["-isystem", d]
    return flags

def _compile(ctx, cc_toolchain):
    """Compiles ctx.files.srcs; returns (merged compilation context, dependencies' CcInfo, PIC objects)."""
    toolkit = ctx.attr._toolkit[CudaToolkitInfo]
    if not toolkit.nvcc:
        fail("{}: no CUDA toolkit was found (see @cuda//:README); add requires_cuda() to target_compatible_with so that such builds skip it".format(ctx.label))
    arch_specs = ctx.attr._archs[CudaArchsInfo].arch_specs

    # Like cc_library: #include "pkg/file.h" resolves from the repository root.
    repo_root = ctx.label.workspace_root or "."
    own_context = cc_common.create_compilation_context(
        headers = depset(ctx.files.hdrs),
        defines = depset(ctx.attr.defines),
        quote_includes = depset([repo_root, ctx.bin_dir.path + "/" + repo_root if ctx.label.workspace_root else ctx.bin_dir.path]),
    )
    dep_infos = [dep[CcInfo] for dep in ctx.attr.deps]
    compilation_context = cc_common.merge_compilation_contexts(
        compilation_contexts = [own_context] + [info.compilation_context for info in dep_infos],
    )

    common = ["-x", "cu", "-std=c++20", "-ccbin", cc_toolchain.compiler_executable]
    common += ["-Xcompiler", "-fPIC"]
    common += _OPT_FLAGS.get(ctx.var["COMPILATION_MODE"], [])
    common += _gencode_flags(arch_specs)
    overlay_include = _overlay_include(cc_toolchain, toolkit)
    common += _include_flags(compilation_context, overlay_include)
    common += ["-D" + d for d in compilation_context.defines.to_list()]
    common += ["-D" + d for d in ctx.attr.local_defines]
    common += _sysroot_flags(cc_toolchain)
    common += ctx.attr.copts

    inputs = depset(
        ctx.files.srcs + ctx.files.hdrs,
        transitive = [compilation_context.headers, cc_toolchain.all_files, toolkit.files] +
                     ([toolkit.overlay_files] if overlay_include else []),
    )
    objects = []
    for src in ctx.files.srcs:
        # Keep the source's path in the object's, so a/kernel.cu and b/kernel.cu do not collide.
        relative = src.short_path.removeprefix(ctx.label.package + "/").removesuffix(".cu")
        obj = ctx.actions.declare_file("_objs/{}/{}.pic.o".format(ctx.label.name, relative))
        args = ctx.actions.args()
        args.add_all([cc_toolchain.nm_executable, cc_toolchain.objcopy_executable, obj, toolkit.nvcc])
        args.add_all(common)

        # nvcc names anonymous namespaces and module ids with its process id
        # unless given a seed; the source path is unique and stable.
        args.add("-frandom-seed=" + src.path)
        args.add("-c", src)
        args.add("-o", obj)
        ctx.actions.run(
            executable = ctx.executable._nvcc_stable_symbols,
            arguments = [args],
            inputs = depset([src], transitive = [inputs]),
            outputs = [obj],
            mnemonic = "CudaCompile",
            progress_message = "Compiling CUDA %{label} (" + src.short_path + ")",
            use_default_shell_env = True,
        )
        objects.append(obj)
    return compilation_context, dep_infos, objects

def _dep_objects(ctx):
    return [obj for dep in ctx.attr.deps if CudaInfo in dep for obj in dep[CudaInfo].pic_objects.to_list()]

def _cuda_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    compilation_context, dep_infos, objects = _compile(ctx, cc_toolchain)

    # cuda_objects dependencies are linked here, as upstream's cuda_library does.
    objects = objects + _dep_objects(ctx)
    linking_context, _ = cc_common.create_linking_context_from_compilation_outputs(
        actions = ctx.actions,
        name = ctx.label.name,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        compilation_outputs = cc_common.create_compilation_outputs(
            objects = depset(objects),
            pic_objects = depset(objects),
        ),
        linking_contexts = [info.linking_context for info in dep_infos],
        alwayslink = ctx.attr.alwayslink,
        disallow_dynamic_library = True,
    )
    return [
        DefaultInfo(files = depset(objects)),
        CcInfo(compilation_context = compilation_context, linking_context = linking_context),
    ]

def _cuda_objects_impl(ctx):
    compilation_context, _, objects = _compile(ctx, find_cpp_toolchain(ctx))
    return [
        DefaultInfo(files = depset(objects)),
        CcInfo(compilation_context = compilation_context),
        CudaInfo(
            defines = compilation_context.defines,
            objects = depset(),
            pic_objects = depset(objects, transitive = [dep[CudaInfo].pic_objects for dep in ctx.attr.deps if CudaInfo in dep]),
        ),
    ]

_COMMON_ATTRS = {
    "srcs": attr.label_list(allow_files = [".cu"], doc = "CUDA sources."),
    "hdrs": attr.label_list(allow_files = [".h", ".hpp", ".cuh"], doc = "Headers of this library."),
    "deps": attr.label_list(providers = [[CcInfo], [CudaInfo]], doc = "cc_library, cuda_library or cuda_objects targets."),
    "copts": attr.string_list(doc = "Extra nvcc flags, for example ['--expt-relaxed-constexpr']."),
    "defines": attr.string_list(doc = "Defines for this library and its dependents."),
    "local_defines": attr.string_list(doc = "Defines for this library only."),
    "_archs": attr.label(default = "//cuda:archs", providers = [CudaArchsInfo]),
    "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    "_nvcc_stable_symbols": attr.label(
        default = "//cuda/private:nvcc_stable_symbols.sh",
        allow_single_file = True,
        executable = True,
        cfg = "exec",
    ),
    "_toolkit": attr.label(default = "@cuda//:toolkit", providers = [CudaToolkitInfo]),
}

cuda_library = rule(
    implementation = _cuda_library_impl,
    doc = "Compiles CUDA sources with nvcc into a library that cc_* rules can depend on.",
    attrs = dict(_COMMON_ATTRS, alwayslink = attr.bool(doc = "Keep every object in a link, for static registrations.")),
    fragments = ["cpp"],
    toolchains = use_cpp_toolchain(),
    provides = [CcInfo],
)

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    doc = "Compiles CUDA sources into objects that a cuda_library links; provides their headers as CcInfo.",
    attrs = _COMMON_ATTRS,
    fragments = ["cpp"],
    toolchains = use_cpp_toolchain(),
    provides = [CcInfo, CudaInfo],
)
