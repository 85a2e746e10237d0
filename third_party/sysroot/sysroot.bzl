"""A Debian sysroot, extracted from pinned .deb packages, as a repository.

The packages and their sha256 sums are listed in a lock file (see
bookworm_amd64.lock and bookworm_arm64.lock). The repository's root is the
sysroot: usr/include, usr/lib/<triple>, lib/<triple>, usr/lib/gcc/... . Two fixes
make it usable from inside Bazel's execroot and sandboxes:

- absolute symlinks (usr/lib/x86_64-linux-gnu/libm.so -> /lib/...) become
  relative ones, since they would otherwise point at the host's files;
- the linker scripts' absolute paths (libc.so: GROUP ( /lib/.../libc.so.6 ...))
  get ld's `=` prefix, "relative to the sysroot". ld only prefixes plain
  absolute paths when the script's real path lies inside the sysroot, which
  is not so in a sandbox whose files are symlinks into the output base.

Symlinks left dangling (the sanitizer runtimes, which no package here ships)
are removed.
"""

load("//third_party/debian:debian_package.bzl", "extract_deb")

_ARCHIVES = [
    ("pool/updates/", "http://deb.debian.org/debian-security/"),
    ("pool/", "http://deb.debian.org/debian/"),
]

_BUILD = """\
package(default_visibility = ["//visibility:public"])

# Every file of the sysroot: headers, crt files, libraries, linker scripts.
filegroup(
    name = "all_files",
    srcs = glob(
        ["**"],
        exclude = [
            "BUILD.bazel",
            "REPO.bazel",
            "WORKSPACE",
            "defs.bzl",
            "packages.txt",
        ],
    ),
)
"""

_DEFS = """\
\"\"\"Facts about this sysroot, read from its lock file.\"\"\"

# glibc of the sysroot (the libc6 package's upstream version).
GLIBC_VERSION = "{glibc}"

# The sysroot's path relative to the execroot, for --sysroot.
SYSROOT_PATH = "external/{name}"

# Debian's multiarch triple: the sysroot's libraries are in usr/lib/<triple>.
MULTIARCH = "{multiarch}"
"""

# Debian architecture (the .deb file name's suffix) -> multiarch triple.
_MULTIARCH = {
    "amd64": "x86_64-linux-gnu",
    "arm64": "aarch64-linux-gnu",
}

def _parse_lock(content):
    """Returns [struct(name, version, path, sha256)] from a lock file's text."""
    packages = []
    for line in content.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(" ")
        fields = [f for f in fields if f]
        if len(fields) != 4:
            fail("sysroot: a lock line needs 'name version path sha256': " + line)
        packages.append(struct(name = fields[0], version = fields[1], path = fields[2], sha256 = fields[3]))
    return packages

def _glibc_version(packages):
    """The libc6 package's upstream version, for example '2.36'."""
    for pkg in packages:
        if pkg.name == "libc6":
            version = pkg.version.split(":")[-1].split("-")[0]
            return ".".join(version.split(".")[:2])
    fail("sysroot: the lock file has no libc6")

def _multiarch(packages):
    """The multiarch triple of the packages' architecture; all must share one."""
    archs = {p.path.rsplit("_", 1)[-1].removesuffix(".deb"): True for p in packages}
    archs.pop("all", None)
    if len(archs) != 1 or list(archs)[0] not in _MULTIARCH:
        fail("sysroot: the lock file mixes or names unknown architectures: " + ", ".join(archs))
    return _MULTIARCH[list(archs)[0]]

def _url(path):
    for prefix, base in _ARCHIVES:
        if path.startswith(prefix):
            return base + path
    fail("sysroot: '{}' is not under pool/".format(path))

def _relative(link, target):
    """The relative path from the directory of link to target (both sysroot-relative)."""
    link_dir = link.split("/")[:-1]
    target_parts = target.split("/")
    common = 0
    for i in range(min(len(link_dir), len(target_parts))):
        if link_dir[i] != target_parts[i]:
            break
        common = i + 1
    up = [".."] * (len(link_dir) - common)
    return "/".join(up + target_parts[common:]) or "."

def _run(rctx, args):
    result = rctx.execute(args)
    if result.return_code != 0:
        fail("sysroot: '{}' failed: {}{}".format(" ".join(args), result.stdout, result.stderr))
    return result.stdout

def _debian_sysroot_impl(rctx):
    packages = _parse_lock(rctx.read(rctx.attr.lock))
    for pkg in packages:
        extract_deb(rctx, [_url(pkg.path)], pkg.sha256, "sysroot: " + pkg.path)

    # Documentation and man pages are not needed to compile or link.
    rctx.delete("usr/share")

    # Absolute symlinks -> relative ones. Bazel's extraction may already have
    # re-rooted a package's absolute link (/lib/x) at this repository's own
    # absolute path, which would break when the output base moves.
    root = str(rctx.path(".")) + "/"
    links = _run(rctx, ["find", ".", "-type", "l", "-lname", "/*", "-printf", "%P\\t%l\\n"])
    for line in links.splitlines():
        link, target = line.split("\t")
        target = target.removeprefix(root).lstrip("/")
        _run(rctx, ["ln", "-sfn", _relative(link, target), link])

    # Dangling symlinks (runtimes of packages not in the sysroot) would break glob().
    _run(rctx, ["find", ".", "-xtype", "l", "-delete"])

    # Linker scripts: absolute paths -> sysroot-relative ('=' prefix).
    scripts = _run(rctx, ["find", ".", "-name", "*.so", "-type", "f", "-size", "-2k", "-printf", "%P\\n"])
    for script in scripts.splitlines():
        text = rctx.read(script)
        if text[1:4] == "ELF" or not ("GROUP" in text or "INPUT" in text):
            continue
        lines = []
        for line in text.splitlines():
            if line.startswith("GROUP") or line.startswith("INPUT"):
                line = line.replace(" /", " =/")
            lines.append(line)
        rctx.file(script, "\n".join(lines) + "\n", executable = False)

    rctx.file("packages.txt", "".join(["{} {}\n".format(p.name, p.version) for p in packages]))
    rctx.file("defs.bzl", _DEFS.format(
        glibc = _glibc_version(packages),
        name = rctx.name,
        multiarch = _multiarch(packages),
    ))
    rctx.file("BUILD.bazel", _BUILD)

debian_sysroot = repository_rule(
    implementation = _debian_sysroot_impl,
    doc = "A sysroot made of the Debian packages in `lock`, with sha256 pins.",
    attrs = {
        "lock": attr.label(mandatory = True, allow_single_file = True, doc = "The lock file: name version path sha256 per line."),
    },
)

def _sysroot_extension_impl(module_ctx):
    for mod in module_ctx.modules:
        for tag in mod.tags.debian:
            debian_sysroot(name = tag.name, lock = tag.lock)

_debian = tag_class(attrs = {
    "lock": attr.label(mandatory = True, doc = "The lock file, for example //third_party/sysroot:bookworm_amd64.lock."),
    "name": attr.string(mandatory = True),
})

sysroot = module_extension(
    implementation = _sysroot_extension_impl,
    tag_classes = {"debian": _debian},
)
