"""sdk_archive: the C++ SDK as a tarball, for the host or another platform."""

load("@libtorch//:defs.bzl", "CXX11_ABI", "TORCH_VERSION")
load("//deploy/runtime:headers.bzl", "PUBLIC_HEADERS")
load("//tools/platforms:platform_data.bzl", "platform_data")

# Where each of the SDK's files comes from, by its path in the archive: the
# runtime library's public headers, and the example.
_FILES = {
    "share/my_ops/example/CMakeLists.txt": "example/CMakeLists.txt",
    "share/my_ops/example/main.cpp": "example/main.cpp",
} | {header: "//deploy/runtime:" + header for header in PUBLIC_HEADERS}

_TEMPLATES = {
    "lib/cmake/my_ops/my_opsConfig.cmake": "cmake/my_opsConfig.cmake.in",
    "lib/cmake/my_ops/my_opsConfigVersion.cmake": "cmake/my_opsConfigVersion.cmake.in",
}

# Shipped with the SDKs for another CPU than the build machine's.
_CROSS_FILES = {
    "aarch64": {
        "share/my_ops/aarch64-linux-gnu.toolchain.cmake": "cmake/aarch64-linux-gnu.toolchain.cmake",
    },
}

def sdk_archive(name, arch, version, platform = None, **kwargs):
    """<name>.tar.gz: my_ops_sdk-<version>-linux-<arch>/ with include/, lib/ and share/.

    Args:
      name: the target; the archive is <name>.tar.gz.
      arch: "x86_64" or "aarch64", the CPU the SDK's libraries are built for
        (my_opsConfigVersion.cmake refuses a build for another).
      version: the SDK's version, <major>.<minor>.<patch>; <major> is the
        soname's (libmy_ops_deploy.so.<major>).
      platform: the platform to build the libraries for, through a transition;
        None for the host's build.
      **kwargs: passed to the genrule (visibility, target_compatible_with).
    """
    deploy_lib, ops_lib = ":libmy_ops_deploy.so", "//ops:libmy_ops.so"
    if platform:
        platform_data(name = name + "_deploy_lib", platform = platform, target = deploy_lib)
        platform_data(name = name + "_ops_lib", platform = platform, target = ops_lib)
        deploy_lib, ops_lib = ":" + name + "_deploy_lib", ":" + name + "_ops_lib"
    files = dict(_FILES)
    files.update(_CROSS_FILES.get(arch, {}))
    native.genrule(
        name = name,
        srcs = files.values() + _TEMPLATES.values() + [deploy_lib, ops_lib],
        outs = [name + ".tar.gz"],
        cmd = " ".join([
            "$(execpath :make_sdk) --out $@",
            "--top my_ops_sdk-{}-linux-{}".format(version, arch),
            "--subst VERSION=" + version,
            "--subst SOVERSION=" + version.split(".")[0],
            "--subst TORCH_RELEASE=" + TORCH_VERSION.split("+")[0],
            "--subst CXX11_ABI={}".format(CXX11_ABI),
            "--subst ARCH=" + arch,
            "--library lib/libmy_ops_deploy.so.{}=$(execpath {})".format(version, deploy_lib),
            "--file lib/libmy_ops.so=$(execpath {})".format(ops_lib),
        ] + [
            "--file {}=$(execpath {})".format(dest, src)
            for dest, src in files.items()
        ] + [
            "--template {}=$(execpath {})".format(dest, src)
            for dest, src in _TEMPLATES.items()
        ]),
        tools = [":make_sdk"],
        **kwargs
    )
