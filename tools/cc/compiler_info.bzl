"""cc_compiler_info: the resolved C++ toolchain's compiler and sysroot flags, as JSON.

Programs that compile C++ at run time (Inductor, during //deploy:export) read
it to build with the same compiler and sysroot as Bazel's own C++ actions, so
the code they generate ships with the same glibc floor. Paths inside the
runfiles tree start with "%runfiles%/", for the reader to replace with its
runfiles root; the toolchain's files are in the rule's runfiles.

With `deps` (cc_library targets, such as LibTorch), the JSON also carries
their compile flags (include dirs, defines) and link flags (library dirs and
names, linkopts), and their headers and libraries are in the runfiles: what a
cross-compiling exporter needs to build a shared library for the target.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain", "use_cpp_toolchain")
load("@rules_cc//cc:action_names.bzl", "ACTION_NAMES")
load("@rules_cc//cc/common:cc_common.bzl", "cc_common")
load("@rules_cc//cc/common:cc_info.bzl", "CcInfo")

def _runfiles_path(path):
    """An execroot-relative or absolute path, as a %runfiles%-prefixed or absolute one."""
    if path.startswith("/"):
        return path
    if path.startswith("external/"):
        return "%runfiles%/" + path[len("external/"):]
    return "%runfiles%/_main/" + path

def _cxx_driver(compiler):
    """g++ for gcc (aarch64-linux-gnu-g++-12 for aarch64-linux-gnu-gcc-12): Inductor chooses its flags by the compiler's name."""
    head, sep, base = compiler.rpartition("/")
    prefix, gcc, version = base.rpartition("gcc")
    if gcc and not version.strip("-.0123456789"):
        return head + sep + prefix + "g++" + version
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
    library_compile_flags = []
    library_link_flags = []
    transitive = [cc_toolchain.all_files]
    runfiles = []
    for dep in ctx.attr.deps:
        cc = dep[CcInfo]
        context = cc.compilation_context
        for d in context.includes.to_list() + context.system_includes.to_list():
            # Each include dir is listed again under bazel-out/ for generated
            # headers, which LibTorch does not have.
            if d.startswith("bazel-out/"):
                continue
            library_compile_flags += ["-isystem", _runfiles_path(d)]
        library_compile_flags += ["-D" + d for d in context.defines.to_list()]
        transitive.append(context.headers)
        for linker_input in cc.linking_context.linker_inputs.to_list():
            for lib in linker_input.libraries:
                # The library's own path, not its _solib symlink, which
                # is not in the runfiles.
                so = (lib.resolved_symlink_dynamic_library or lib.dynamic_library or
                      lib.resolved_symlink_interface_library or lib.interface_library)
                if so:
                    library_link_flags += ["-L" + _runfiles_path(so.dirname), "-l" + so.basename.removeprefix("lib").split(".so")[0]]
                    transitive.append(depset([so]))
            for flag in linker_input.user_link_flags:
                # -Lexternal/... and -Wl,-rpath-link,external/...: execroot paths, as runfiles ones.
                if flag.startswith("-Lexternal/"):
                    library_link_flags.append("-L" + _runfiles_path(flag[2:]))
                    continue
                head, sep, path = flag.rpartition(",")
                library_link_flags.append(head + sep + _runfiles_path(path) if path.startswith("external/") else flag)
        runfiles.append(dep[DefaultInfo].default_runfiles)
    out = ctx.actions.declare_file(ctx.label.name + ".json")
    ctx.actions.write(out, json.encode_indent(struct(
        compiler = _cxx_driver(cc_toolchain.compiler_executable),
        sysroot = _runfiles_path(cc_toolchain.sysroot) if cc_toolchain.sysroot else None,
        compile_flags = compile_flags,
        link_flags = link_flags,
        library_compile_flags = library_compile_flags,
        library_link_flags = library_link_flags,
    )) + "\n")
    return [DefaultInfo(
        files = depset([out]),
        runfiles = ctx.runfiles(files = [out], transitive_files = depset(transitive = transitive)).merge_all(runfiles),
    )]

cc_compiler_info = rule(
    implementation = _cc_compiler_info_impl,
    doc = "Writes <name>.json: compiler, sysroot, compile_flags and link_flags of the C++ toolchain in use.",
    attrs = {
        "deps": attr.label_list(providers = [CcInfo], doc = "Libraries whose compile and link flags the JSON carries."),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    toolchains = use_cpp_toolchain(),
    fragments = ["cpp"],
)
