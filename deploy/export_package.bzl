"""export_package: runs the exporter at build time to produce an AOTInductor package."""

def _export_package_impl(ctx):
    outs = [ctx.actions.declare_file("{}/{}".format(ctx.label.name, f)) for f in [
        "model.pt2",
        "sample_input.pt",
        "expected_output.pt",
    ]]
    args = ctx.actions.args()
    args.add("--out", outs[0].dirname)
    args.add_all(ctx.attr.export_args)
    ctx.actions.run(
        executable = ctx.executable.exporter,
        arguments = [args],
        outputs = outs,
        mnemonic = "AotiExport",
        progress_message = "Exporting %{label} to an AOTInductor package",
        # Inductor runs the host C++ compiler found on PATH.
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset(outs))]

export_package = rule(
    implementation = _export_package_impl,
    doc = "model.pt2, sample_input.pt and expected_output.pt from an export run.",
    attrs = {
        "export_args": attr.string_list(doc = "Flags for the exporter besides --out."),
        # The target configuration, not exec: the exporter loads the same
        # libmy_ops.so that ships, and building it twice would double the
        # CUDA compile time.
        "exporter": attr.label(executable = True, cfg = "target", mandatory = True),
    },
)
