"""my_ops_wheel: the my_ops wheel (Python package, op library, exporter, loader) for one platform."""

load("@rules_python//python:packaging.bzl", "py_wheel")
load("//tools/platforms:platform_data.bzl", "platform_data")
load("//tools/torch:kernel_flags.bzl", "TORCH_RELEASE")

def _wheel_files_impl(ctx):
    outs = []

    def place(f, path):
        out = ctx.actions.declare_file("{}/{}".format(ctx.label.name, path))
        ctx.actions.symlink(output = out, target_file = f)
        outs.append(out)

    for target, folder in ctx.attr.srcs.items():
        for f in target[DefaultInfo].files.to_list():
            # The file's path below the package that owns it (source or output).
            below = f.short_path.removeprefix(f.owner.package + "/") if f.owner.package else f.short_path
            place(f, "/".join([p for p in [folder, below] if p]))
    for target, folder in ctx.attr.binaries.items():
        for f in target[DefaultInfo].files.to_list():
            place(f, "{}/{}".format(folder, f.basename))
    return [DefaultInfo(files = depset(outs))]

# Every file of the wheel at its path inside it, under <name>/, for py_wheel
# (strip_path_prefixes = ["<package>/<name>/"]): py_wheel places files by
# their source paths, and the wheel's my_ops.deploy is deploy/ here.
_wheel_files = rule(
    implementation = _wheel_files_impl,
    attrs = {
        "binaries": attr.label_keyed_string_dict(
            allow_files = True,
            doc = "Native files -> the folder they go to, by their base name.",
        ),
        "srcs": attr.label_keyed_string_dict(
            allow_files = True,
            doc = "Targets -> the folder their files go to, each at its path below its package.",
        ),
    },
)

# Where the wheel installs the op library and the loader, side by side: the
# package finds the library there (my_ops/_library.py), and the loader finds
# it beside itself, as in a bundle.
_NATIVE_FOLDER = "my_ops/lib"

# Files -> their folder in the wheel.
_SOURCES = {
    "//deploy:default_model.py": "my_ops/deploy",
    "//deploy:deploy": "my_ops/deploy",
    "//deploy/bundle:wheel_files": "my_ops/deploy/bundle",
    "//deploy/contract:wheel_files": "my_ops/deploy/contract",
    "//deploy/exporter:exporter": "my_ops/deploy/exporter",
    "//deploy/loader:launch.py": "my_ops/deploy/loader",
    "//python:my_ops_files": "",
}

def my_ops_wheel(name, platform_tag, version, requires, platform = None, **kwargs):
    """<distribution>-<version>-py3-none-<platform_tag>.whl, and <name>_files.

    Args:
      name: the py_wheel's name.
      platform_tag: the wheel's platform tag, e.g. manylinux_2_34_x86_64: the
        glibc floor of its ELF files (checked with auditwheel by the wheel's test).
      version: the distribution's version.
      requires: Requires-Dist lines.
      platform: the platform to build the op library and the loader for
        (through a transition); None: the build's own.
      **kwargs: passed to py_wheel (visibility, tags, ...).
    """
    ops, loader = "//ops:libmy_ops.so", "//deploy/loader"
    companion = "//ops:libmy_ops_torch" + TORCH_RELEASE + ".so"
    if platform:
        platform_data(name = name + "_ops", platform = platform, target = ops)
        platform_data(name = name + "_companion", platform = platform, target = companion)
        platform_data(name = name + "_loader", platform = platform, target = loader)
        ops, loader = ":" + name + "_ops", ":" + name + "_loader"
        companion = ":" + name + "_companion"
    _wheel_files(
        name = name + "_files",
        srcs = _SOURCES,
        binaries = {ops: _NATIVE_FOLDER, companion: _NATIVE_FOLDER, loader: _NATIVE_FOLDER},
    )
    py_wheel(
        name = name,
        distribution = "my_ops",
        version = version,
        # No Python C API: the library is loaded with torch.ops.load_library,
        # so one wheel serves every CPython that torch supports.
        python_tag = "py3",
        abi = "none",
        platform = platform_tag,
        requires = requires,
        python_requires = ">=3.10",
        console_scripts = {
            "my-ops-bundle": "my_ops.deploy.bundle.make_bundle:main",
            "my-ops-export": "my_ops.deploy.exporter.__main__:console_main",
            "my-ops-run": "my_ops.deploy.loader.launch:main",
        },
        strip_path_prefixes = ["{}/{}_files/".format(native.package_name(), name)],
        deps = [":" + name + "_files"],
        **kwargs
    )
