"""A GCC toolchain configuration that compiles and links against a sysroot only.

The host's gcc-12 (or the cross compiler aarch64-linux-gnu-gcc-12) is the
compiler; headers and libraries come from the
sysroot (third_party/sysroot), never from the host's /usr/include and
/usr/lib, so the glibc symbol versions a binary needs are those of the
sysroot's glibc, whatever the host runs. GCC's own headers (intrinsics,
stddef.h) come from the compiler's install dir, as they must match it.

Flag plumbing that every GCC toolchain shares (include paths, defines,
libraries to link, param files, user copts/linkopts, --sysroot) comes from
Bazel's built-in legacy features; this file adds the flags that differ.
"""

load("@rules_cc//cc:action_names.bzl", "ACTION_NAMES")
load(
    "@rules_cc//cc:cc_toolchain_config_lib.bzl",
    "feature",
    "flag_group",
    "flag_set",
    "tool_path",
    "with_feature_set",
)
load("@rules_cc//cc/common:cc_common.bzl", "cc_common")

_C_COMPILE = [
    ACTION_NAMES.c_compile,
]

_CPP_COMPILE = [
    ACTION_NAMES.cpp_compile,
    ACTION_NAMES.cpp_header_parsing,
    ACTION_NAMES.cpp_module_compile,
    ACTION_NAMES.cpp_module_codegen,
    ACTION_NAMES.linkstamp_compile,
    ACTION_NAMES.lto_backend,
    ACTION_NAMES.clif_match,
]

_COMPILE = _C_COMPILE + _CPP_COMPILE + [
    ACTION_NAMES.assemble,
    ACTION_NAMES.preprocess_assemble,
]

_LINK = [
    ACTION_NAMES.cpp_link_executable,
    ACTION_NAMES.cpp_link_dynamic_library,
    ACTION_NAMES.cpp_link_nodeps_dynamic_library,
]

# No timestamps or build paths in the outputs. Bazel runs compile actions with
# PWD=/proc/self/cwd, which GCC records as the compilation directory.
REPRODUCIBLE_COMPILE_FLAGS = [
    "-Wno-builtin-macro-redefined",
    "-D__DATE__=\"redacted\"",
    "-D__TIMESTAMP__=\"redacted\"",
    "-D__TIME__=\"redacted\"",
    "-ffile-prefix-map=/proc/self/cwd=.",
    "-fdebug-prefix-map=/proc/self/cwd=.",
]

# Bazel's CPU names for the CPUs this toolchain builds for.
_BAZEL_CPU = {
    "aarch64": "aarch64",
    "x86_64": "k8",
}

def include_dirs(sysroot, gcc_major, multiarch, gcc_include, cxx):
    """The system include dirs in GCC's search order: libstdc++ (for C++), GCC's own, the sysroot's.

    GCC's own headers (stddef.h, the intrinsics) come from the compiler, as
    they must match it; everything else from the sysroot.

    Args:
      sysroot: the sysroot's path, or "%sysroot%" for cxx_builtin_include_directories.
      gcc_major: GCC's major version, for example "12".
      multiarch: Debian's triple, for example "aarch64-linux-gnu".
      gcc_include: GCC's own header dir (gcc -print-file-name=include).
      cxx: whether to include libstdc++'s dirs (C++ compiles).

    Returns:
      A list of directories.
    """
    dirs = []
    if cxx:
        dirs = [
            sysroot + "/usr/include/c++/" + gcc_major,
            sysroot + "/usr/include/" + multiarch + "/c++/" + gcc_major,
            sysroot + "/usr/include/c++/" + gcc_major + "/backward",
        ]
    return dirs + [
        gcc_include,
        sysroot + "/usr/include/" + multiarch,
        sysroot + "/usr/include",
    ]

def _isystem(dirs):
    flags = ["-nostdinc"]
    for d in dirs:
        flags += ["-isystem", d]
    return flags

def _flags(actions, flags, with_features = None):
    return flag_set(
        actions = actions,
        flag_groups = [flag_group(flags = flags)],
        with_features = [with_feature_set(features = with_features)] if with_features else [],
    )

def _impl(ctx):
    cpu = ctx.attr.cpu
    if not ctx.attr.gcc:
        fail("The sysroot C++ toolchain for {} (//tools/cc) needs the host's GCC {}: {}. For debugging only, --config=host_toolchain builds x86-64 code with Bazel's auto-configured host toolchain instead.".format(cpu, ctx.attr.gcc_major, ctx.attr.gcc_problem))
    sysroot = ctx.attr.sysroot
    major = ctx.attr.gcc_major
    multiarch = ctx.attr.multiarch
    gcc_lib = sysroot + "/usr/lib/gcc/" + multiarch + "/" + major
    dirs_cxx = include_dirs(sysroot, major, multiarch, ctx.attr.gcc_include, cxx = True)
    dirs_c = include_dirs(sysroot, major, multiarch, ctx.attr.gcc_include, cxx = False)

    # Debian's GCC does not relocate its C++ header dir or its own library dir
    # under --sysroot, and it turns the sysroot's include dirs into absolute
    # paths (which Bazel's include checking rejects, and which would leak the
    # sandbox's path into __FILE__). So -nostdinc, and every system include
    # dir is given explicitly, relative to the execroot. When linking, -B
    # makes the driver take crt*.o from the sysroot, and the -L dirs come
    # before GCC's built-in (host) ones, so every -l resolves in the sysroot.
    link_search = [
        "-B" + gcc_lib + "/",
        "-B" + sysroot + "/usr/lib/" + multiarch + "/",
        "-L" + gcc_lib,
        "-L" + sysroot + "/usr/lib/" + multiarch,
        "-L" + sysroot + "/lib/" + multiarch,
    ]

    default_compile_flags = feature(
        name = "default_compile_flags",
        enabled = True,
        flag_sets = [
            _flags(_COMPILE, [
                "-no-canonical-prefixes",
                "-fno-canonical-system-headers",
                "-fstack-protector",
                "-Wall",
                "-fno-omit-frame-pointer",
            ] + REPRODUCIBLE_COMPILE_FLAGS),
            _flags(_CPP_COMPILE, _isystem(dirs_cxx)),
            _flags(_C_COMPILE + [ACTION_NAMES.assemble, ACTION_NAMES.preprocess_assemble], _isystem(dirs_c)),
            _flags(_COMPILE, ["-g"], ["dbg"]),
            _flags(_COMPILE, [
                "-g0",
                "-O2",
                "-U_FORTIFY_SOURCE",
                "-D_FORTIFY_SOURCE=1",
                "-DNDEBUG",
                "-ffunction-sections",
                "-fdata-sections",
            ], ["opt"]),
        ],
    )
    default_link_flags = feature(
        name = "default_link_flags",
        enabled = True,
        flag_sets = [
            _flags(_LINK, [
                "-no-canonical-prefixes",
                "-pass-exit-codes",
                # Debian's GCC links --as-needed by default; Bazel's own
                # toolchains keep every library a target lists (LibTorch's
                # libtorch.so, which pulls in libtorch_cuda, is used so).
                # The flag must precede the libraries, which Bazel's
                # built-in link features place before these flags, so it
                # goes into GCC's link spec, ahead of every input.
                "-specs=" + ctx.file.link_specs.path,
                "-Wl,-z,relro,-z,now",
                "-Wl,--build-id=sha1",
            ] + link_search + ["-lstdc++", "-lm"]),
            _flags(_LINK, ["-Wl,--gc-sections"], ["opt"]),
        ],
    )
    features = [
        feature(name = "dbg"),
        feature(name = "opt"),
        feature(name = "fastbuild"),
        feature(name = "supports_pic", enabled = True),
        feature(name = "supports_dynamic_linker", enabled = True),
        default_compile_flags,
        default_link_flags,
    ]
    binutils = "/usr/bin/" + ctx.attr.tool_prefix
    tool_paths = [
        tool_path(name = "gcc", path = ctx.attr.gcc),
        tool_path(name = "cpp", path = ctx.attr.gcc.replace("gcc-", "cpp-")),
        tool_path(name = "ar", path = binutils + "ar"),
        tool_path(name = "ld", path = binutils + "ld"),
        tool_path(name = "nm", path = binutils + "nm"),
        tool_path(name = "objcopy", path = binutils + "objcopy"),
        tool_path(name = "objdump", path = binutils + "objdump"),
        tool_path(name = "strip", path = binutils + "strip"),
        tool_path(name = "gcov", path = ctx.attr.gcc.replace("gcc-", "gcov-")),
        tool_path(name = "dwp", path = binutils + "dwp"),
        tool_path(name = "llvm-cov", path = "/bin/false"),
    ]
    return cc_common.create_cc_toolchain_config_info(
        ctx = ctx,
        features = features,
        toolchain_identifier = "gcc{}_sysroot_{}_glibc_{}".format(major, cpu, ctx.attr.glibc_version),
        host_system_name = "x86_64-unknown-linux-gnu",
        target_system_name = cpu + "-unknown-linux-gnu",
        target_cpu = _BAZEL_CPU[cpu],
        # cuda_library reads the sysroot's glibc from here (see tools/cuda).
        target_libc = "glibc_" + ctx.attr.glibc_version,
        compiler = "gcc",
        abi_version = "gcc-" + major,
        abi_libc_version = "glibc_" + ctx.attr.glibc_version,
        tool_paths = tool_paths,
        builtin_sysroot = sysroot,
        # In search order: cuda_library passes them to nvcc's host compiler.
        cxx_builtin_include_directories = include_dirs("%sysroot%", major, multiarch, ctx.attr.gcc_include, cxx = True),
    )

gcc_sysroot_toolchain_config = rule(
    implementation = _impl,
    doc = "CcToolchainConfigInfo for the host's GCC with a sysroot.",
    attrs = {
        "cpu": attr.string(mandatory = True, values = _BAZEL_CPU.keys(), doc = "The target CPU."),
        "gcc": attr.string(doc = "Absolute path of the gcc driver; empty when it is missing."),
        "gcc_include": attr.string(doc = "GCC's own header dir (gcc -print-file-name=include)."),
        "gcc_major": attr.string(mandatory = True),
        "gcc_problem": attr.string(doc = "Why gcc is empty."),
        "multiarch": attr.string(mandatory = True, doc = "The sysroot's Debian multiarch triple."),
        "tool_prefix": attr.string(doc = "Prefix of the binutils in /usr/bin, for example 'aarch64-linux-gnu-'."),
        "glibc_version": attr.string(mandatory = True, doc = "The sysroot's glibc, for example '2.36'."),
        "link_specs": attr.label(mandatory = True, allow_single_file = True, doc = "GCC specs file that adds --no-as-needed to the link spec."),
        "sysroot": attr.string(mandatory = True, doc = "Execroot-relative path of the sysroot."),
    },
    provides = [CcToolchainConfigInfo],
)
