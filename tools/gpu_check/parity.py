"""Output parity: a script run in a child (it loads the op library), and its verdict on a step."""

from __future__ import annotations

import re
from pathlib import Path

from check_run import tail

PARITY_ATOL = 1e-4
PARITY_RTOL = 1e-4

_PARITY = f"""\
import sys
import torch
import my_ops  # loads MY_OPS_LIBRARY: the package's custom ops and class

def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)

mode = sys.argv[1]
if mode == "repeat":
    # A batch of N copies of every tensor in a file: the default model treats batch rows alike.
    n, source, dest = int(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.save(tuple(torch.cat([t] * n) for t in as_tuple(torch.load(source))), dest)
    sys.exit(0)
if mode == "aoti":
    package, inputs, expected, device = sys.argv[2:6]
    model = torch._inductor.aoti_load_package(package)
    args = tuple(t.to(device) for t in as_tuple(torch.load(inputs)))
    with torch.no_grad():
        got = as_tuple(model(*args))
else:
    got_file, expected = sys.argv[2:4]
    got = as_tuple(torch.load(got_file))
want = as_tuple(torch.load(expected))
ok = len(got) == len(want)
worst = 0.0
for g, w in zip(got, want):
    g = g.cpu()
    if g.shape != w.shape or g.dtype != w.dtype:
        print(f"shape/dtype {{tuple(g.shape)}} {{g.dtype}} != {{tuple(w.shape)}} {{w.dtype}}")
        ok = False
        continue
    if g.numel():
        worst = max(worst, (g.double() - w.double()).abs().max().item())
    ok = ok and torch.allclose(g, w, atol={PARITY_ATOL}, rtol={PARITY_RTOL})
print(f"parity {{'ok' if ok else 'MISMATCH'}}: {{len(got)}} outputs, max abs diff {{worst:.3g}}")
sys.exit(0 if ok else 1)
"""


def parity_script(work: Path) -> Path:
    path = work / "parity.py"
    if not path.exists():
        path.write_text(_PARITY)
    return path


def run_parity(run, step, cmd: list[str], log_path, env, failure: str) -> None:
    """Runs a parity script and records its verdict (and the max abs diff) on the step."""
    rc, out = run.run(cmd, log_path, env)
    step.facts["max_abs_diff"] = _max_diff(out)
    passed = rc == 0
    step.status = "ok" if passed else "fail"
    step.facts["parity"] = "ok" if passed else "fail"
    if not passed:
        step.detail = failure
        run.say(f"{failure} (exit {rc}):\n{tail(out)}")


def _max_diff(out: str) -> str | None:
    m = re.search(r"max abs diff (\S+)", out)
    return m.group(1) if m else None
