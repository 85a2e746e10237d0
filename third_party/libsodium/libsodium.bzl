"""libsodium as a static library, from Debian 12's pinned libsodium-dev package.

The .deb is an ar archive; Bazel unpacks that, and the data.tar.xz inside
holds the headers and libsodium.a. Only those are kept.
"""

# Debian 12 (bookworm) libsodium-dev, from `apt-cache show libsodium-dev`.
# The same file is in the main archive and, as a security update, in the
# security archive; Bazel tries the URLs in order.
_VERSION = "1.0.18-1+deb12u1"
_SHA256 = "96c76e95027592650b20987ceef189aa70c614dff3e6ec13c09b786149145700"
_FILE = "libsodium-dev_{}_amd64.deb".format(_VERSION)
_URLS = [
    "http://deb.debian.org/debian/pool/main/libs/libsodium/" + _FILE,
    "http://deb.debian.org/debian-security/pool/updates/main/libs/libsodium/" + _FILE,
]

_BUILD = """\
# libsodium {version} from Debian 12, linked statically: binaries that use it
# gain no shared-library dependency.
cc_library(
    name = "libsodium",
    srcs = ["usr/lib/x86_64-linux-gnu/libsodium.a"],
    hdrs = ["usr/include/sodium.h"] + glob(["usr/include/sodium/*.h"]),
    includes = ["usr/include"],
    linkstatic = True,
    visibility = ["//visibility:public"],
)

# The same files for builds outside Bazel (tools/gpu_check compiles the
# loader with g++ and finds them in its runfiles).
filegroup(
    name = "files",
    srcs = ["usr/lib/x86_64-linux-gnu/libsodium.a", "usr/include/sodium.h"] +
           glob(["usr/include/sodium/*.h"]),
    visibility = ["//visibility:public"],
)
"""

def _libsodium_deb_impl(rctx):
    rctx.download_and_extract(url = _URLS, sha256 = _SHA256, output = "_deb", type = "deb")
    data = [e for e in rctx.path("_deb").readdir() if e.basename.startswith("data.tar")]
    if len(data) != 1:
        fail("libsodium: {} has no single data.tar.*".format(_FILE))
    rctx.extract(data[0], output = ".")
    rctx.delete("_deb")

    # The shared library's symlink points into libsodium23, which is not
    # fetched; documentation and pkg-config files are not needed either.
    for path in [
        "usr/lib/x86_64-linux-gnu/libsodium.so",
        "usr/lib/x86_64-linux-gnu/pkgconfig",
        "usr/share",
    ]:
        rctx.delete(path)
    rctx.file("BUILD.bazel", _BUILD.format(version = _VERSION))

libsodium_deb = repository_rule(
    implementation = _libsodium_deb_impl,
    doc = "Debian 12's libsodium-dev (headers and libsodium.a) as @libsodium//:libsodium.",
)
