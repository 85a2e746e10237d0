"""The footprint table's reading of the dynamic loader's trace, and its verdicts."""

from __future__ import annotations

from deploy.bench import footprint

# The shape of glibc's LD_DEBUG=files lines (pid, tab, message).
TRACE = """\
     41:\tfile=libtorch_cpu.so [0];  needed by /opt/app/loader [0]
     41:\tfile=libtorch_cpu.so [0];  generating link map
     41:\tfile=libcudart.so.13 [0];  needed by /opt/lt/torch/lib/libtorch_cpu.so [0]
     41:\tfile=libcupti.so.13 [0];  needed by /opt/lt/torch/lib/libtorch_cpu.so [0]
     41:\tfile=libgomp.so.1 [0];  needed by /opt/lt/torch/lib/libtorch_cpu.so [0]
     41:\tfile=libgomp.so.1 [0];  needed by /opt/lt/torch/lib/libc10.so [0]
     41:\tcalling init: /opt/lt/nvidia/cu13/lib/libcudart.so.13
     41:\tcalling init: /opt/lt/nvidia/cu13/lib/libcupti.so.13
     41:\tcalling init: /opt/lt/torch/lib/libtorch_cpu.so
     41:\tcalling init: /opt/lt/torch/lib/libtorch_cuda.so
"""


def test_the_trace_gives_the_libraries_in_load_order():
    assert footprint.loaded_libraries(TRACE) == [
        "/opt/lt/nvidia/cu13/lib/libcudart.so.13",
        "/opt/lt/nvidia/cu13/lib/libcupti.so.13",
        "/opt/lt/torch/lib/libtorch_cpu.so",
        "/opt/lt/torch/lib/libtorch_cuda.so",
    ]


def test_the_trace_gives_who_needs_each_library():
    needed = footprint.needed_by(TRACE)
    assert needed["libcudart.so.13"] == {"libtorch_cpu.so"}
    assert needed["libgomp.so.1"] == {"libtorch_cpu.so", "libc10.so"}
    assert needed["libtorch_cpu.so"] == {"loader"}


def _footprint(name, wall, rss_mb, trace):
    return footprint.Footprint(
        name,
        [wall] * 3,
        [rss_mb * 1_000_000] * 3,
        footprint.loaded_libraries(trace),
        footprint.needed_by(trace),
    )


def test_a_cuda_library_beyond_libtorch_cpus_own_is_a_missed_target():
    ours = _footprint("loader", 0.3, 120, TRACE)
    before = _footprint("before", 0.6, 500, TRACE)
    rows, missed = footprint.footprint_rows([ours, before], baseline=before)
    assert missed == ["a CPU run loads CUDA libraries: libtorch_cuda.so"]
    assert ("loader: CUDA libraries beyond libtorch_cpu.so's own", "libtorch_cuda.so", "",
            "none") in rows  # fmt: skip


def test_peak_rss_and_start_are_judged_against_their_targets():
    cpu_only = "\n".join(line for line in TRACE.splitlines() if "torch_cuda" not in line)
    ours = _footprint("loader", 0.4, 140, cpu_only)
    before = _footprint("before", 0.6, 500, TRACE)
    _, missed = footprint.footprint_rows([ours, before], baseline=before)
    assert missed == ["peak RSS 140 MB > 135 MB", "start to first result 0.67x > 0.6x"]
    ours = _footprint("loader", 0.3, 120, cpu_only)
    assert footprint.footprint_rows([ours, before], baseline=before)[1] == []
