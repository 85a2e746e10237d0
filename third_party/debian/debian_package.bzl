"""Debian .deb packages, pinned by sha256, as Bazel repositories.

A .deb is an ar archive; Bazel's download_and_extract unpacks that, and the
data.tar.* inside holds the package's files.
"""

def extract_deb(rctx, urls, sha256, what):
    """Downloads a .deb (urls tried in order) and extracts its files into the repository root.

    Args:
      rctx: the repository_ctx.
      urls: mirrors of one .deb file.
      sha256: its sha256.
      what: the package, for error messages.
    """
    tmp = "_deb_" + sha256
    rctx.download_and_extract(url = urls, sha256 = sha256, output = tmp, type = "deb")
    data = [e for e in rctx.path(tmp).readdir() if e.basename.startswith("data.tar")]
    if len(data) != 1:
        fail("{}: the .deb has no single data.tar.*".format(what))
    rctx.extract(data[0], output = ".")
    rctx.delete(tmp)

def _debian_package_impl(rctx):
    extract_deb(rctx, rctx.attr.urls, rctx.attr.sha256, rctx.attr.name)
    for path in rctx.attr.remove:
        rctx.delete(path)
    rctx.file("BUILD.bazel", rctx.read(rctx.attr.build_file))

debian_package = repository_rule(
    implementation = _debian_package_impl,
    doc = "One Debian package's files, with a BUILD file of ours.",
    attrs = {
        "build_file": attr.label(mandatory = True, allow_single_file = True, doc = "The repository's BUILD file."),
        "remove": attr.string_list(doc = "Paths to drop after extraction (docs, links into packages not fetched)."),
        "sha256": attr.string(mandatory = True),
        "urls": attr.string_list(mandatory = True, doc = "Mirrors of the same .deb, tried in order."),
    },
)
