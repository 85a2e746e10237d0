"""Providers: the contract between the rules, with upstream's names and fields where they exist."""

# The architecture numbers the archs flag accepts (upstream's list).
cuda_archs = [
    "30",
    "32",
    "35",
    "37",
    "50",
    "52",
    "53",
    "60",
    "61",
    "62",
    "70",
    "72",
    "75",
    "80",
    "86",
    "87",
    "89",
    "90",
    "90a",
    "100",
    "100a",
    "100f",
    "101",
    "101a",
    "101f",
    "103",
    "103a",
    "103f",
    "110",
    "110a",
    "110f",
    "120",
    "120a",
    "120f",
    "121",
    "121a",
    "121f",
]

Stage2ArchInfo = provider(
    doc = "What one stage-1 (PTX) architecture is turned into: exactly one of virtual, gpu and lto is True.",
    fields = {
        "arch": "string: the architecture number, for example '80' or '90a'",
        "virtual": "bool: embed PTX (code=compute_<arch>)",
        "gpu": "bool: a cubin (code=sm_<arch>)",
        "lto": "bool: LTO-IR (code=lto_<arch>)",
    },
)

ArchSpecInfo = provider(
    doc = "One virtual architecture and what it is compiled into.",
    fields = {
        "stage1_arch": "string: the virtual architecture's number",
        "stage2_archs": "list of Stage2ArchInfo",
    },
)

CudaArchsInfo = provider(
    doc = "The GPU architectures to compile for.",
    fields = {
        "arch_specs": "list of ArchSpecInfo",
    },
)

CudaInfo = provider(
    doc = "Device objects for linking: the subset of upstream's fields that cuda_objects fills.",
    fields = {
        "defines": "depset of string",
        "objects": "depset of File: non-PIC objects (none here: every object is PIC)",
        "pic_objects": "depset of File: position-independent objects",
    },
)

CudaToolkitInfo = provider(
    doc = "The toolkit the @cuda repository found (this module's own; upstream uses a toolchain).",
    fields = {
        "nvcc": "string: nvcc's path, absolute on the host or execroot-relative in a deliverable toolkit; empty when no toolkit was found",
        "files": "depset of File: the toolkit's files every compile takes as inputs (empty for a host toolkit)",
        "version": "string: the toolkit version, for example '13.0'",
        "host_glibc": "string: the host's glibc, for example '2.43'; empty when unknown",
        "overlay_include": "string or None: an include directory searched before the toolkit's",
        "overlay_files": "depset of File: the files under overlay_include",
        "overlay_min_glibc": "string: the overlay is used only with a glibc at least this new",
    },
)
