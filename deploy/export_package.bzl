"""export_package: runs the exporter at build time to produce an AOTInductor package."""

load("@bazel_skylib//rules:common_settings.bzl", "BuildSettingInfo")
load("//tools/cc:sanitizers.bzl", "ASAN_PRELOAD_ENV")

def _export_package_impl(ctx):
    names = ["model.pt2", "sample_input.pt", "expected_output.pt", "manifest.json"]
    if ctx.file.signing_key:
        names.append("manifest.sig")
    outs = [ctx.actions.declare_file("{}/{}".format(ctx.label.name, f)) for f in names]
    args = ctx.actions.args()
    args.add("--out", outs[0].dirname)

    # Bazel's action cache is this rule's cache; a folder outside the
    # sandbox would make the action depend on what earlier builds left.
    args.add("--no-cache")
    args.add_all(ctx.attr.export_args)
    inputs = []
    if ctx.file.signing_key:
        args.add("--signing-key", ctx.file.signing_key)
        inputs.append(ctx.file.signing_key)
    ctx.actions.run(
        executable = ctx.executable.exporter,
        arguments = [args],
        inputs = inputs,
        outputs = outs,
        mnemonic = "AotiExport",
        progress_message = "Exporting %{label} to an AOTInductor package",
        # The compiler driver Inductor runs finds as and ld on PATH.
        use_default_shell_env = True,
        env = ASAN_PRELOAD_ENV if ctx.attr._asan[BuildSettingInfo].value else {},
    )
    return [DefaultInfo(files = depset(outs))]

export_package = rule(
    implementation = _export_package_impl,
    doc = "model.pt2, sample_input.pt, expected_output.pt and manifest.json " +
          "(and manifest.sig when signed) from an export run.",
    attrs = {
        "export_args": attr.string_list(doc = "Flags for the exporter besides --out."),
        # The target configuration, not exec: the exporter loads the same
        # libmy_ops.so that ships, and building it twice would double the
        # CUDA compile time.
        "exporter": attr.label(executable = True, cfg = "target", mandatory = True),
        "signing_key": attr.label(
            allow_single_file = True,
            doc = "Ed25519 private key for --signing-key; the package then includes manifest.sig.",
        ),
        "_asan": attr.label(default = "//tools/cc:asan"),
    },
)
