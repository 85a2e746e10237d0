"""--profile-compile's accounting, on a made-up compiler log."""

from __future__ import annotations

from deploy.exporter.profile import breakdown, classify, format_breakdown, parse_log

# Command lines shaped as Inductor's (abridged), with made-up times.
LOG = """\
100.0 100.1 -dumpversion
100.5 104.5 /c/ua/cuar6sao.cpp -O3 -shared -o /c/ua/cuar6sao.so
104.5 105.0 /c/c6/c6tecwmp.main.cpp -O3 -shared -o /c/c6/c6tecwmp.main.so
105.0 110.0 -x c++-header /c/h/abc.h -o /c/h/abc.h.gch
110.0 120.0 /c/m/x.wrapper.cpp -O0 -c -o /c/m/x.wrapper.o
120.0 123.0 /c/m/y.kernel.cpp -O3 -c -o /c/m/y.kernel.o
121.0 122.0 /c/m/x/w.weights.S -c -o /c/m/x/w.weights.o
123.5 124.5 /c/m/x.wrapper.o /c/m/y.kernel.o /c/m/x/w.weights.o -shared -o /c/m/x.wrapper.so
not a log line
"""


def test_each_compiler_run_lands_in_its_step():
    runs = parse_log(LOG)
    assert [r.step for r in runs] == [
        "other", "isa check", "autotune", "headers", "wrapper", "kernels", "constants", "link",
    ]  # fmt: skip
    assert classify(["a.cpp", "-c", "-o", "a.o"]) == "other"


def test_codegen_is_the_stage_minus_the_time_under_any_compiler():
    rows = {step: (seconds, n) for step, seconds, n in breakdown(parse_log(LOG), 40.0)}
    assert rows["wrapper"] == (10.0, 1)
    assert rows["kernels"] == (3.0, 1)
    assert rows["link"] == (1.0, 1)
    assert rows["autotune"] == (0.5, 1)
    # Compilers were busy 0.1 + 4 + 0.5 + 5 + 10 + 3 + 1 s; the weights ran inside
    # the kernel compile and count once.
    assert abs(rows["codegen"][0] - (40.0 - 23.6)) < 1e-9


def test_the_table_names_every_step_with_its_share():
    text = format_breakdown(breakdown(parse_log(LOG), 40.0), 40.0)
    assert text.splitlines()[0] == "compile profile (40.0s):"
    assert "  wrapper      10.0s   25%  1 run" in text
    assert "  codegen      16.4s   41%" in text
