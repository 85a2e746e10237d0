"""gcc_sysroot_toolchain: the config, cc_toolchain and toolchain targets for one target CPU."""

load("@rules_cc//cc:defs.bzl", "cc_toolchain")
load(":cc_toolchain_config.bzl", "gcc_sysroot_toolchain_config")

def gcc_sysroot_toolchain(name, cpu, compiler, gcc_major, sysroot_repo, glibc_version, sysroot_path, multiarch):
    """Declares <name> (a cc_toolchain) and <name>_toolchain (to register) for linux-<cpu>.

    Args:
      name: the cc_toolchain's name.
      cpu: "x86_64" or "aarch64", as @platforms//cpu names it.
      compiler: the entry of @host_gcc's COMPILERS for cpu.
      gcc_major: GCC's major version.
      sysroot_repo: the sysroot repository, for example "@debian_bookworm_arm64_sysroot".
      glibc_version: the sysroot's glibc (its defs.bzl's GLIBC_VERSION).
      sysroot_path: the sysroot's execroot path (its defs.bzl's SYSROOT_PATH).
      multiarch: the sysroot's triple (its defs.bzl's MULTIARCH).
    """
    gcc_sysroot_toolchain_config(
        name = name + "_config",
        cpu = cpu,
        gcc = compiler["gcc"],
        gcc_include = compiler["include"],
        gcc_major = gcc_major,
        gcc_problem = compiler["problem"],
        glibc_version = glibc_version,
        link_specs = ":no_as_needed.specs",
        multiarch = multiarch,
        sysroot = sysroot_path,
        tool_prefix = compiler["tool_prefix"],
    )
    native.filegroup(
        name = name + "_sysroot_files",
        srcs = [sysroot_repo + "//:all_files"],
    )
    native.filegroup(
        name = name + "_linker_files",
        srcs = [
            ":no_as_needed.specs",
            ":" + name + "_sysroot_files",
        ],
    )
    cc_toolchain(
        name = name,
        all_files = ":" + name + "_linker_files",
        ar_files = ":empty",
        as_files = ":" + name + "_sysroot_files",
        compiler_files = ":" + name + "_sysroot_files",
        dwp_files = ":empty",
        linker_files = ":" + name + "_linker_files",
        objcopy_files = ":empty",
        strip_files = ":empty",
        supports_param_files = True,
        toolchain_config = ":" + name + "_config",
        toolchain_identifier = name,
    )

    # Built on an x86-64 Linux host, for linux-<cpu>.
    native.toolchain(
        name = name + "_toolchain",
        exec_compatible_with = [
            "@platforms//os:linux",
            "@platforms//cpu:x86_64",
        ],
        target_compatible_with = [
            "@platforms//os:linux",
            "@platforms//cpu:" + cpu,
        ],
        toolchain = ":" + name,
        toolchain_type = "@bazel_tools//tools/cpp:toolchain_type",
    )
