"""The archs build setting, in upstream's grammar (nvcc's extended notation).

    ARCH_SPECS   ::= ARCH_SPEC [ ';' ARCH_SPECS ]
    ARCH_SPEC    ::= [ VIRTUAL_ARCH ':' ] GPU_ARCHS
    GPU_ARCHS    ::= GPU_ARCH [ ',' GPU_ARCHS ]
    GPU_ARCH     ::= 'sm_' NUMBER | 'lto_' NUMBER | VIRTUAL_ARCH
    VIRTUAL_ARCH ::= 'compute_' NUMBER

Each spec compiles one PTX architecture into every listed code:
- `compute_80:sm_80,sm_86`: PTX for 8.0, cubins for sm_80 and sm_86, no PTX kept;
- `compute_80:compute_80,sm_80`: the same cubin, and the PTX kept for newer GPUs;
- `sm_80,sm_86`: as `compute_80:sm_80,sm_86` (the lowest number is the PTX);
- `sm_80;sm_90`: two specs, each with its own PTX architecture.
"""

load("//cuda/private:providers.bzl", "ArchSpecInfo", "CudaArchsInfo", "Stage2ArchInfo", "cuda_archs")

_PREFIXES = ["compute_", "sm_", "lto_"]

def _number(spec_string, code):
    for prefix in _PREFIXES:
        if code.startswith(prefix):
            number = code[len(prefix):]
            if number in cuda_archs:
                return prefix, number
    fail("@rules_cuda//cuda:archs: '{}' in '{}' is not compute_N, sm_N or lto_N with N one of {}".format(
        code,
        spec_string,
        ", ".join(cuda_archs),
    ))

def _sort_key(number):
    digits = number.rstrip("abcdefghijklmnopqrstuvwxyz")
    return (int(digits), number[len(digits):])

def parse_arch_specs(specs_string):
    """Parses a flag value (see the module docstring).

    Args:
      specs_string: for example "compute_80:sm_80;compute_90:sm_90,compute_90".

    Returns:
      A list of ArchSpecInfo, one per ';'-separated spec.
    """
    specs = []
    for spec_string in specs_string.split(";"):
        spec_string = spec_string.strip()
        if not spec_string:
            continue
        parts = spec_string.split(":")
        if len(parts) > 2:
            fail("@rules_cuda//cuda:archs: '{}' has more than one ':'".format(spec_string))
        codes = [c.strip() for c in parts[-1].split(",")]
        stage2 = []
        for code in codes:
            prefix, number = _number(spec_string, code)
            stage2.append(Stage2ArchInfo(
                arch = number,
                virtual = prefix == "compute_",
                gpu = prefix == "sm_",
                lto = prefix == "lto_",
            ))
        if len(parts) == 2:
            prefix, stage1 = _number(spec_string, parts[0].strip())
            if prefix != "compute_":
                fail("@rules_cuda//cuda:archs: '{}' before ':' must be a virtual architecture (compute_N)".format(parts[0]))
        else:
            stage1 = sorted([s.arch for s in stage2], key = _sort_key)[0]
        specs.append(ArchSpecInfo(stage1_arch = stage1, stage2_archs = stage2))
    return specs

def _cuda_archs_flag_impl(ctx):
    return CudaArchsInfo(arch_specs = parse_arch_specs(ctx.build_setting_value))

cuda_archs_flag = rule(
    implementation = _cuda_archs_flag_impl,
    doc = "A string build setting with the architectures to compile for; provides CudaArchsInfo.",
    build_setting = config.string(flag = True),
    provides = [CudaArchsInfo],
)
