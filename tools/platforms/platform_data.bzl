"""platform_data: a target built for another platform, as data for this one.

The same attributes as platform_data in @platforms//experimental/platform_data
(target, platform), so a user can switch to it once their platforms module
has it. One difference: the target need not be executable. Each of its files
is symlinked to <name>/<basename>, so a cross-built file never takes the
runfiles path of the host's build of the same target (//ops:libmy_ops.so for
aarch64 beside the x86-64 one that the exporter loads).
"""

def _platform_transition_impl(_settings, attr):
    return {"//command_line_option:platforms": str(attr.platform)}

_platform_transition = transition(
    implementation = _platform_transition_impl,
    inputs = [],
    outputs = ["//command_line_option:platforms"],
)

def _platform_data_impl(ctx):
    target = ctx.attr.target[0]
    links = []
    for f in target[DefaultInfo].files.to_list():
        link = ctx.actions.declare_file("{}/{}".format(ctx.label.name, f.basename))
        ctx.actions.symlink(output = link, target_file = f)
        links.append(link)
    runfiles = ctx.runfiles(files = links)
    if ctx.attr.forward_runfiles:
        runfiles = runfiles.merge(target[DefaultInfo].default_runfiles)
    return [DefaultInfo(files = depset(links), runfiles = runfiles)]

platform_data = rule(
    implementation = _platform_data_impl,
    doc = "The files of `target`, built for `platform`, under <name>/.",
    attrs = {
        "forward_runfiles": attr.bool(
            default = False,
            doc = "Also give the target's runfiles (at their own paths), for " +
                  "targets whose runfiles live in external repositories only.",
        ),
        "platform": attr.label(mandatory = True, doc = "The platform to build `target` for."),
        "target": attr.label(mandatory = True, cfg = _platform_transition),
        "_allowlist_function_transition": attr.label(
            default = "@bazel_tools//tools/allowlists/function_transition_allowlist",
        ),
    },
)
