"""nlohmann/json (header-only), from Debian 12's pinned nlohmann-json3-dev package.

The .deb is an ar archive; Bazel unpacks that, and the data.tar.xz inside
holds the headers. Only those are kept.
"""

# Debian 12 (bookworm) nlohmann-json3-dev, from `apt-cache show
# nlohmann-json3-dev=3.11.2-2`. Architecture "all": headers only.
_VERSION = "3.11.2-2"
_SHA256 = "ec57940def6b6186c30be0e0ee81d1e58f86d11a54a145b28686a1e3e4aae801"
_FILE = "nlohmann-json3-dev_{}_all.deb".format(_VERSION)
_URLS = ["http://deb.debian.org/debian/pool/main/n/nlohmann-json3/" + _FILE]

_BUILD = """\
# nlohmann/json {version} from Debian 12. Header-only: binaries that use it
# gain no shared-library dependency.
cc_library(
    name = "nlohmann_json",
    hdrs = glob(["usr/include/nlohmann/**/*.hpp"]),
    includes = ["usr/include"],
    visibility = ["//visibility:public"],
)

# The same headers for builds outside Bazel (tools/gpu_check compiles the
# loader with g++ and finds them in its runfiles).
filegroup(
    name = "files",
    srcs = glob(["usr/include/nlohmann/**/*.hpp"]),
    visibility = ["//visibility:public"],
)
"""

def _nlohmann_json_deb_impl(rctx):
    rctx.download_and_extract(url = _URLS, sha256 = _SHA256, output = "_deb", type = "deb")
    data = [e for e in rctx.path("_deb").readdir() if e.basename.startswith("data.tar")]
    if len(data) != 1:
        fail("nlohmann_json: {} has no single data.tar.*".format(_FILE))
    rctx.extract(data[0], output = ".")
    rctx.delete("_deb")

    # CMake and pkg-config files and documentation are not needed.
    rctx.delete("usr/share")
    rctx.file("BUILD.bazel", _BUILD.format(version = _VERSION))

nlohmann_json_deb = repository_rule(
    implementation = _nlohmann_json_deb_impl,
    doc = "Debian 12's nlohmann-json3-dev (headers) as @nlohmann_json//:nlohmann_json.",
)
