"""cc_compiler_info: the resolved C++ toolchain's compiler and sysroot flags, as JSON.

Programs that compile C++ at run time (Inductor, during //deploy:export) read
it to build with the same compiler and sysroot as Bazel's own C++ actions, so
the code they generate ships with the same glibc floor. Paths inside the
runfiles tree start with "%runfiles%/", for the reader to replace with its
runfiles root; the toolchain's files are in the rule's runfiles.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain", "use_cpp_toolchain")
load("@rules_cc//cc:action_names.bzl", "ACTION_NAMES")
load("@rules_cc//cc/common:cc_common.bzl", "cc_common")

def _runfiles_path(path):
    """An execroot-relative or absolute path, as a %runfiles%-prefixed or absolute one."""
    if path.startswith("/"):
        return path
    if path.startswith("external/"):
        return "%runfiles%/" + path[len("external/"):]
    return "%runfiles%/_main/" + path

def _cxx_driver(compiler):
    """g++ for gcc: Inductor chooses its flags by the compiler's name."""
    head, sep, base = compiler.rpartition("/")
    if base.startswith("gcc"):
        return head + sep + "g++" + base[len("gcc"):]
    return compiler

def _cc_compiler_info_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    compile_flags = []
    link_flags = []
    if cc_toolchain.sysroot:
        sysroot = _runfiles_path(cc_toolchain.sysroot)
        compile_flags = ["--sysroot=" + sysroot, "-nostdinc"]
        for d in cc_toolchain.built_in_include_directories:
            compile_flags += ["-isystem", _runfiles_path(d)]

        # The toolchain's link search flags (-B for crt files, -L dirs), read
        # from its own link command line so they exist in one place only.
        feature_configuration = cc_common.configure_features(
            ctx = ctx,
            cc_toolchain = cc_toolchain,
            requested_features = ctx.features,
            unsupported_features = ctx.disabled_features,
        )
        variables = cc_common.create_link_variables(
            cc_toolchain = cc_toolchain,
            feature_configuration = feature_configuration,
            is_linking_dynamic_library = True,
        )
        for flag in cc_common.get_memory_inefficient_command_line(
            feature_configuration = feature_configuration,
            action_name = ACTION_NAMES.cpp_link_dynamic_library,
            variables = variables,
        ):
            if flag.startswith("-B") or flag.startswith("-L"):
                link_flags.append(flag[:2] + _runfiles_path(flag[2:]))
        link_flags.append("--sysroot=" + sysroot)
    out = ctx.actions.declare_file(ctx.label.name + ".json")
    ctx.actions.write(out, json.encode_indent(struct(
        compiler = _cxx_driver(cc_toolchain.compiler_executable),
        sysroot = _runfiles_path(cc_toolchain.sysroot) if cc_toolchain.sysroot else None,
        compile_flags = compile_flags,
        link_flags = link_flags,
    )) + "\n")
    return [DefaultInfo(
        files = depset([out]),
        runfiles = ctx.runfiles(files = [out], transitive_files = cc_toolchain.all_files),
    )]

cc_compiler_info = rule(
    implementation = _cc_compiler_info_impl,
    doc = "Writes <name>.json: compiler, sysroot, compile_flags and link_flags of the C++ toolchain in use.",
    attrs = {
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    toolchains = use_cpp_toolchain(),
    fragments = ["cpp"],
)
