"""Providers that are the contract between the CUDA rules."""

CudaToolkitInfo = provider(
    doc = "A detected CUDA toolkit.",
    fields = {
        "nvcc": "string: absolute path of nvcc",
        "version": "string: the toolkit version, for example '13.0'",
        "host_glibc": "string: the host's glibc, for example '2.43'; empty when unknown",
        "overlay_include": "string or None: an include directory searched before the toolkit's",
        "overlay_files": "depset of File: the files under overlay_include",
        "overlay_min_glibc": "string: the overlay is used only with a glibc at least this new",
    },
)

CudaArchsInfo = provider(
    doc = "The GPU architectures to compile for.",
    fields = {
        "archs": "list of string: real architectures such as 'sm_80'; PTX is added for the newest",
    },
)
