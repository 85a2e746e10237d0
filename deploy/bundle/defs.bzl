"""The edge bundle: the build-time export (export_package), its signed copy (signed_copy)
and the tarball (edge_bundle)."""

load("@bazel_skylib//rules:common_settings.bzl", "BuildSettingInfo")
load("@rules_pkg//pkg:mappings.bzl", "pkg_attributes", "pkg_files")
load("@rules_pkg//pkg:tar.bzl", "pkg_tar")
load(
    "//deploy/contract:export_files.bzl",
    "EXPORT_FILES",
    "OPTIONAL_WEIGHTS_FILES",
    "WEIGHTS_FILES",
)
load("//tools/cc:sanitizers.bzl", "ASAN_PRELOAD_ENV")
load("//tools/platforms:platform_data.bzl", "platform_data")

def _declare_in_folder(ctx, names):
    """The outputs <target name>/<name>: one folder per package-like target."""
    return [ctx.actions.declare_file("{}/{}".format(ctx.label.name, name)) for name in names]

def _run_exporter(ctx, args, inputs, outs, **kwargs):
    """Runs ctx.executable.exporter with `args`, plus --signing-key when the rule has one."""
    inputs = list(inputs)
    if ctx.file.signing_key:
        args.add("--signing-key", ctx.file.signing_key)
        inputs.append(ctx.file.signing_key)
    ctx.actions.run(
        executable = ctx.executable.exporter,
        arguments = [args],
        inputs = inputs,
        outputs = outs,
        env = ASAN_PRELOAD_ENV if ctx.attr._asan[BuildSettingInfo].value else {},
        **kwargs
    )

def _export_package_impl(ctx):
    names = list(EXPORT_FILES)
    if ctx.file.signing_key:
        names.append("manifest.sig")
    if ctx.attr.weights_beside:
        names += [n for n in WEIGHTS_FILES if n.startswith("weights.")]
        if ctx.file.signing_key:
            names += OPTIONAL_WEIGHTS_FILES
    outs = _declare_in_folder(ctx, names)
    args = ctx.actions.args()
    args.add("--out", outs[0].dirname)

    # Bazel's action cache is this rule's cache; a folder outside the
    # sandbox would make the action depend on what earlier builds left.
    args.add("--no-cache")
    args.add_all(ctx.attr.export_args)
    _run_exporter(
        ctx,
        args,
        [],
        outs,
        mnemonic = "AotiExport",
        progress_message = "Exporting %{label} to an AOTInductor package",
        # The compiler driver Inductor runs finds as and ld on PATH.
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset(outs))]

export_package = rule(
    implementation = _export_package_impl,
    doc = "The files an export run writes (export_files in " +
          "deploy/contract/package_contract.json; manifest.sig only when signed).",
    attrs = {
        "export_args": attr.string_list(doc = "Flags for the exporter besides --out."),
        # The target configuration, not exec: the exporter loads the same
        # libmy_ops.so that ships, and building it twice would double the
        # CUDA compile time.
        "exporter": attr.label(
            executable = True,
            cfg = "target",
            mandatory = True,
            doc = "The exporter binary, e.g. //deploy/exporter:export.",
        ),
        "signing_key": attr.label(
            allow_single_file = True,
            doc = "Ed25519 private key for --signing-key; the package then includes manifest.sig.",
        ),
        "weights_beside": attr.bool(
            default = True,
            doc = "Whether the export writes its weights beside the package (weights.bin, " +
                  "weights.json): a CPU package for this machine's architecture that is not " +
                  "frozen (--mode max-autotune). False for the others, which hold their weights.",
        ),
        "_asan": attr.label(default = "//tools/cc:asan"),
    },
)

def _export_weights_impl(ctx):
    names = list(WEIGHTS_FILES)
    if ctx.file.signing_key:
        names += OPTIONAL_WEIGHTS_FILES
    outs = _declare_in_folder(ctx, names)
    base = [f for f in ctx.files.base if f.basename == "manifest.json"]
    if not base:
        fail("{}: {} holds no manifest.json".format(ctx.label, ctx.attr.base.label))
    args = ctx.actions.args()
    args.add("--weights-only")
    args.add("--base", base[0].dirname)
    args.add("--model", ctx.attr.model)
    args.add("--out", outs[0].dirname)
    args.add_all(ctx.attr.export_args)
    _run_exporter(
        ctx,
        args,
        ctx.files.base,
        outs,
        mnemonic = "AotiExportWeights",
        progress_message = "Exporting %{label}'s weights file for " + str(ctx.attr.base.label),
    )
    return [DefaultInfo(files = depset(outs))]

export_weights = rule(
    implementation = _export_weights_impl,
    doc = "The files `export --weights-only` writes (weights in " +
          "deploy/contract/package_contract.json; weights.sig only when signed): new " +
          "weights for the package of an export_package, nothing compiled.",
    attrs = {
        "base": attr.label(
            mandatory = True,
            doc = "The export_package whose package the weights are for (--base).",
        ),
        "export_args": attr.string_list(
            doc = "Flags for the exporter besides --weights-only, --base, --model and " +
                  "--out: the base's --quantize, for one.",
        ),
        # The target configuration, as export_package's.
        "exporter": attr.label(
            default = "//deploy/exporter:export_linux_x86_64",
            executable = True,
            cfg = "target",
            doc = "The exporter binary.",
        ),
        "model": attr.string(
            mandatory = True,
            doc = "MODULE:FACTORY of the model with the new weights (--model), with the " +
                  "base's architecture.",
        ),
        "signing_key": attr.label(
            allow_single_file = True,
            doc = "Ed25519 private key for --signing-key; the output then includes weights.sig.",
        ),
        "_asan": attr.label(default = "//tools/cc:asan"),
    },
)

def _signed_copy_impl(ctx):
    names = [f.basename for f in ctx.files.package]
    if "manifest.sig" in names:
        fail("{}: {} is signed already".format(ctx.label, ctx.attr.package.label))
    signatures = ["manifest.sig"] + (OPTIONAL_WEIGHTS_FILES if "weights.json" in names else [])
    outs = _declare_in_folder(ctx, names + signatures)
    args = ctx.actions.args()
    args.add(outs[0].dirname)
    args.add(ctx.file.signing_key)
    args.add(ctx.executable.exporter)
    args.add_all(ctx.files.package)
    ctx.actions.run_shell(
        # Copies, not links: the signer reads the files it vouches for.
        command = 'out="$1" key="$2" exporter="$3"; shift 3; ' +
                  'cp -- "$@" "$out"/ && "$exporter" --sign "$out" --signing-key "$key" >/dev/null',
        arguments = [args],
        inputs = ctx.files.package + [ctx.file.signing_key],
        tools = [ctx.executable.exporter],
        outputs = outs,
        mnemonic = "SignPackage",
        progress_message = "Signing a copy of %{label}'s package",
    )
    return [DefaultInfo(files = depset(outs))]

signed_copy = rule(
    implementation = _signed_copy_impl,
    doc = "An export_package's files and manifest.sig, written by `export --sign` " +
          "on a copy: the same package, signed, without exporting it again.",
    attrs = {
        # The target configuration, as export_package's: in the exec one the
        # exporter's op library would be built a second time.
        "exporter": attr.label(
            default = "//deploy/exporter:export_linux_x86_64",
            executable = True,
            cfg = "target",
            doc = "The exporter whose --sign writes manifest.sig.",
        ),
        "package": attr.label(
            mandatory = True,
            doc = "An unsigned export_package.",
        ),
        "signing_key": attr.label(
            allow_single_file = True,
            mandatory = True,
            doc = "Ed25519 private key (PEM, or a raw 32-byte seed) for --signing-key.",
        ),
    },
)

def _checked_package_impl(ctx):
    outs = _declare_in_folder(ctx, [f.basename for f in ctx.files.package])
    args = ctx.actions.args()
    args.add("--ops", ctx.file.ops)
    args.add("--out", outs[0].dirname)
    args.add_all(ctx.files.package)
    ctx.actions.run(
        executable = ctx.executable._check,
        arguments = [args],
        inputs = ctx.files.package + [ctx.file.ops],
        outputs = outs,
        mnemonic = "BundleCheck",
        progress_message = "Checking %{label} against its manifest.json",
    )
    return [DefaultInfo(files = depset(outs))]

# The package's files, copied only once they pass bundle_check.py: the
# tarball is built from the copies, so a bundle that every edge machine's
# loader would refuse never builds.
_checked_package = rule(
    implementation = _checked_package_impl,
    attrs = {
        "ops": attr.label(allow_single_file = True, mandatory = True),
        "package": attr.label(mandatory = True),
        "_check": attr.label(
            default = "//deploy/bundle:bundle_check",
            executable = True,
            cfg = "exec",
        ),
    },
)

def edge_bundle(
        name,
        package,
        platform = None,
        loader = "//deploy/loader",
        ops = "//ops:libmy_ops.so",
        **kwargs):
    """<name>.tar.gz: what an edge machine with LibTorch and no Python runs.

    Unpacks to my_ops_bundle/: loader, libmy_ops.so, the package's files,
    run.sh and README.md (deploy/bundle/BUNDLE_README.md). The package's
    manifest.json must list the sha256 of `package`'s model.pt2 and of `ops`
    (bundle_check.py), or the bundle does not build.

    Args:
      name: the pkg_tar's name; `<name>_loader`, `<name>_ops` (with
        `platform`), `<name>_package`, `<name>_programs` and `<name>_data`
        are made beside it.
      package: an export_package target, exported for the same platform.
      platform: the platform to build `loader` and `ops` for (through a
        transition, e.g. //tools/platforms:linux_aarch64); None: the build's own.
      loader: the C++ loader.
      ops: the op library the package was exported against.
      **kwargs: visibility, tags, ... for the pkg_tar.
    """
    if platform:
        platform_data(name = name + "_loader", platform = platform, target = loader)
        platform_data(name = name + "_ops", platform = platform, target = ops)
        loader, ops = ":" + name + "_loader", ":" + name + "_ops"
    _checked_package(name = name + "_package", ops = ops, package = package)
    pkg_files(
        name = name + "_programs",
        srcs = ["//deploy/bundle:run.sh", loader],
        attributes = pkg_attributes(mode = "0755"),
    )
    pkg_files(
        name = name + "_data",
        srcs = ["//deploy/bundle:BUNDLE_README.md", ":" + name + "_package", ops],
        attributes = pkg_attributes(mode = "0644"),
        renames = {"//deploy/bundle:BUNDLE_README.md": "README.md"},
    )
    pkg_tar(
        name = name,
        srcs = [":" + name + "_data", ":" + name + "_programs"],
        extension = "tar.gz",
        package_dir = "my_ops_bundle",
        **kwargs
    )
