"""The exporter's command-line errors and Inductor settings; none of these compile."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import error_lines, run_export, writable_copy
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from deploy.exporter import compile as export_compile
from deploy.exporter.environment import ScopedEnvironment

# export --help: "Exit status 0 on success, 2 on bad usage, 3 when --out may not
# be replaced (nothing is touched), 130 when interrupted, 1 on any other failure".
EXIT_FAILURE = 1
EXIT_USAGE = 2


def _assert_clean_failure(proc, tmp_path: Path, needle: str, code: int) -> None:
    assert proc.returncode != 0, proc.stdout
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("export: error: "), proc.stderr
    assert needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "model, needle",
    [
        ("no_colon_here", "module:factory"),
        ("two words:f", "module:factory"),
        ("surely_not_a_module_xyz:make", "cannot import"),
        ("bad_models:does_not_exist", "no attribute"),
        ("bad_models:NOT_CALLABLE", "not callable"),
        ("bad_models:raises", "factory failed"),
        ("bad_models:incomplete", "no 'module' attribute"),
        ("bad_models:import_error_in_factory", "factory failed"),
    ],
)
def test_bad_model(tmp_path: Path, model: str, needle: str) -> None:
    proc = run_export(["--model", model, "--out", str(tmp_path / "out")], tmp_path / "tmp")
    _assert_clean_failure(proc, tmp_path, needle, EXIT_FAILURE)
    assert not (tmp_path / "out").exists()
    assert os.listdir(tmp_path) == ["tmp"]


def test_cuda_without_gpu_fails_first(tmp_path: Path) -> None:
    import torch

    # The behaviour under test is the refusal on a machine without a GPU; with
    # one, --device cuda is valid and the export path is covered elsewhere.
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    # A broken --model proves the device check runs before any other work.
    proc = run_export(
        ["--device", "cuda", "--model", "no_such_module:f", "--out", str(tmp_path / "o")],
        tmp_path / "tmp",
    )
    _assert_clean_failure(proc, tmp_path, "GPU", EXIT_FAILURE)
    assert not (tmp_path / "o").exists()


def test_unwritable_out(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    # Works even as root, unlike a chmod-based read-only folder.
    proc = run_export(["--out", str(blocker / "out")], tmp_path / "tmp")
    _assert_clean_failure(proc, tmp_path, "cannot write output folder", EXIT_FAILURE)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kv-cache", "1"], "--kv-cache must be an int >= 2"),
        # The default model's factory is not a decoder's.
        (["--kv-cache", "16"], "--kv-cache: the model factory 'make_model' takes no kv_cache"),
    ],
)
def test_kv_cache_needs_a_length_and_a_decoder_factory(tmp_path: Path, args, message) -> None:
    out = tmp_path / "out"
    proc = run_export([*args, "--out", str(out)], tmp_path / "tmp")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not out.exists()


def test_usage_error_is_one_line(tmp_path: Path) -> None:
    proc = run_export(["--max-batch", "0"], tmp_path / "tmp")
    assert proc.returncode == 2
    assert len(error_lines(proc.stderr)) == 1, proc.stderr


# Every flag that takes a value. An empty one is what a script passes when its variable is
# unset: read as "not given", `--signing-key "$KEY"` would write an unsigned export and
# `--out "$DIR"` would replace the default folder.
_VALUE_FLAGS = [
    "--out",
    "--device",
    "--model",
    "--target",
    "--isa",
    "--max-batch",
    "--kv-cache",
    "--mode",
    "--inductor-option",
    "--cache-dir",
    "--cache-max-mb",
    "--signing-key",
    "--generate-key",
    "--sign",
    "--base",
    "--quantize",
    "--quantize-skip",
    "--min-cosine",
    "--float-linear",
    "--smooth-alpha",
]


@pytest.mark.parametrize("inline", [False, True], ids=["separate", "inline"])
@pytest.mark.parametrize("flag", _VALUE_FLAGS)
def test_an_empty_flag_value_is_a_usage_error(tmp_path: Path, flag: str, inline: bool) -> None:
    given = [f"{flag}="] if inline else [flag, ""]
    args = ["--model", "no_such_module:f", "--out", str(tmp_path / "o")]
    if flag in args:
        at = args.index(flag)
        del args[at : at + 2]
    proc = run_export([*args, *given], tmp_path / "tmp")
    _assert_clean_failure(proc, tmp_path, f"argument {flag}: needs a non-empty value", EXIT_USAGE)
    assert not (tmp_path / "o").exists()


def test_every_flag_that_takes_a_value_is_checked_for_an_empty_one() -> None:
    from deploy.exporter import cli

    taking = sorted(
        a.option_strings[0]
        for a in cli.argument_parser()._actions
        if a.option_strings and a.nargs != 0
    )
    assert taking == sorted(_VALUE_FLAGS)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--no-cache", "--cache-dir", "c"], "--no-cache and --cache-dir"),
        (["--cache-max-mb", "0"], "--cache-max-mb must be >= 1"),
        (["--inductor-option", "cpp_wrapper"], "must be KEY=VALUE"),
        (["--inductor-option", "no_such.option=1"], "torch._inductor.config has no no_such.option"),
        (["--inductor-option", "aot_inductor.custom_ops_to_c_shims={}"], "the exporter sets this"),
        (["--quantize", "int2"], "argument --quantize: invalid choice: 'int2'"),
        (["--quantize-skip", "lm_head"], "--quantize-skip is for --quantize int8 or int4"),
        (["--quantize", "int8", "--min-cosine", "1.5"], "--min-cosine must be in (0, 1]"),
        (["--quantize", "int8", "--smooth-alpha", "-0.1"], "--smooth-alpha must be in [0, 1]"),
    ],
)
def test_bad_cache_and_compile_flags(tmp_path: Path, args: list[str], needle: str) -> None:
    proc = run_export([*args, "--model", "no_such_module:f", "--out", str(tmp_path / "o")],
                      tmp_path / "tmp")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc.stderr) == [error_lines(proc.stderr)[0]]
    assert needle in proc.stderr


def test_an_unusable_cache_dir_is_an_error_only_when_asked_for(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    # Asked for: one line naming the flag, nothing else happens.
    proc = run_export(
        ["--cache-dir", str(blocker / "c"), "--model", "no_such_module:f",
         "--out", str(tmp_path / "o")],
        tmp_path / "tmp",
    )  # fmt: skip
    _assert_clean_failure(proc, tmp_path, "--cache-dir", EXIT_FAILURE)
    assert "--no-cache" in proc.stderr
    # The default folder (here under XDG_CACHE_HOME): the export goes on without it,
    # as far as the model, which does not exist.
    env = {"XDG_CACHE_HOME": str(blocker)}
    proc = run_export(
        ["--model", "no_such_module:f", "--out", str(tmp_path / "o")], tmp_path / "tmp2", env
    )
    assert "cache:   off" in proc.stdout
    assert "cannot import 'no_such_module'" in proc.stderr


def test_export_failure_keeps_previous_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.pt2").write_text("previous")
    (out / "manifest.json").write_text(json.dumps({"format": "my_ops.manifest/1"}))
    proc = run_export(["--model", "bad_models:data_dependent", "--out", str(out)], tmp_path / "tmp")
    _assert_clean_failure(proc, tmp_path, "torch.export failed", EXIT_FAILURE)
    assert "hint" in proc.stderr
    assert (out / "model.pt2").read_text() == "previous"
    assert sorted(os.listdir(tmp_path)) == ["out", "tmp"]
    assert os.listdir(tmp_path / "tmp") == []


def test_help(tmp_path: Path) -> None:
    proc = run_export(["--help"], tmp_path / "tmp")
    assert proc.returncode == 0
    for flag in ("--out", "--device", "--model", "--isa", "--max-batch", "--signing-key",
                 "--generate-key", "--cache-dir", "--no-cache", "--cache-max-mb",
                 "--profile-compile", "--inductor-option", "--mode", "--quantize",
                 "--quantize-skip", "--min-cosine", "--smooth-alpha"):  # fmt: skip
        assert flag in proc.stdout
    # The --out rule: what the export may replace.
    assert "previous export" in proc.stdout
    # The exit status the failures above are held to (argparse rewraps the epilog).
    assert "1 on any other failure" in " ".join(proc.stdout.split())
    assert "12 when --quantize's model falls below --min-cosine" in " ".join(proc.stdout.split())


def test_generate_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    proc = run_export(["--generate-key", str(keys)], tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    private, public = keys / "signing_key.pem", keys / "public_key.pem"
    assert proc.stdout.split() == [str(private), str(public)]
    assert private.stat().st_mode & 0o777 == 0o600
    assert private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    # A second run must not replace a key that may already be in use.
    before = private.read_bytes()
    proc = run_export(["--generate-key", str(keys)], tmp_path / "tmp")
    _assert_clean_failure(proc, tmp_path, "not overwriting", EXIT_FAILURE)
    assert private.read_bytes() == before


def test_generate_key_checks_both_paths_first(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    public = keys / "public_key.pem"
    public.write_text("someone's public key\n")
    proc = run_export(["--generate-key", str(keys)], tmp_path / "tmp")
    _assert_clean_failure(proc, tmp_path, str(public), EXIT_FAILURE)
    # A private key without its public key would be a key nobody can check.
    assert os.listdir(keys) == ["public_key.pem"]
    assert public.read_text() == "someone's public key\n"


def test_sign_an_existing_export(tmp_path: Path, default_package: Path, signing_keys: Path) -> None:
    folder = writable_copy(default_package, tmp_path / "pkg")
    before = {name: (folder / name).read_bytes() for name in os.listdir(folder)}
    proc = run_export(
        ["--sign", str(folder), "--signing-key", str(signing_keys / "signing_key.pem")],
        tmp_path / "tmp",
    )
    assert proc.returncode == 0, proc.stderr
    # The package's weights beside it are signed with it: the loader asks for weights.sig too.
    assert proc.stdout.split() == [str(folder / "manifest.sig"), str(folder / "weights.sig")]
    # Nothing else changed or left behind (no staged signature).
    assert sorted(os.listdir(folder)) == sorted([*before, "manifest.sig", "weights.sig"])
    assert all((folder / name).read_bytes() == data for name, data in before.items())
    public_key = load_pem_public_key((signing_keys / "public_key.pem").read_bytes())
    # Raises InvalidSignature unless each signature signs its manifest's bytes.
    public_key.verify((folder / "manifest.sig").read_bytes(), before["manifest.json"])
    public_key.verify((folder / "weights.sig").read_bytes(), before["weights.json"])


def test_sign_refuses_weights_of_another_package(
    tmp_path: Path, default_package: Path, signing_keys: Path
) -> None:
    folder = writable_copy(default_package, tmp_path / "pkg")
    weights = json.loads((folder / "weights.json").read_text())
    weights["package"]["sha256"] = "0" * 64
    (folder / "weights.json").write_text(json.dumps(weights))
    proc = run_export(
        ["--sign", str(folder), "--signing-key", str(signing_keys / "signing_key.pem")],
        tmp_path / "tmp",
    )
    assert proc.returncode != 0
    assert "weights.json is for another package" in proc.stderr, proc.stderr
    assert not (folder / "weights.sig").exists()


def test_sign_refuses_a_manifest_of_another_package(
    tmp_path: Path, default_package: Path, signing_keys: Path
) -> None:
    folder = writable_copy(default_package, tmp_path / "pkg")
    data = bytearray((folder / "model.pt2").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "model.pt2").write_bytes(bytes(data))
    names = sorted(os.listdir(folder))
    proc = run_export(
        ["--sign", str(folder), "--signing-key", str(signing_keys / "signing_key.pem")],
        tmp_path / "tmp",
    )
    _assert_clean_failure(
        proc, tmp_path, f"{folder / 'model.pt2'} is not the package", EXIT_FAILURE
    )
    assert sorted(os.listdir(folder)) == names


@pytest.mark.parametrize(
    "args, needle, code",
    [
        (["--sign", "{tmp}/pkg"], "--sign needs --signing-key", EXIT_USAGE),
        (["--sign", "{tmp}/pkg", "--generate-key", "{tmp}/k", "--signing-key", "{key}"],
         "contradict", EXIT_USAGE),
        (["--sign", "{tmp}/missing", "--signing-key", "{key}"],
         "cannot read {tmp}/missing/manifest.json", EXIT_FAILURE),
    ],
)  # fmt: skip
def test_bad_sign_arguments(
    tmp_path: Path, signing_keys: Path, args: list[str], needle: str, code: int
) -> None:
    fill = {"tmp": str(tmp_path), "key": str(signing_keys / "signing_key.pem")}
    proc = run_export([a.format(**fill) for a in args], tmp_path / "tmp")
    _assert_clean_failure(proc, tmp_path, needle.format(**fill), code)
    assert sorted(os.listdir(tmp_path)) == ["tmp"]


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "cannot read --signing-key"),
        (b"not a key", "neither"),
        (b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "neither"),
    ],
)
def test_bad_signing_key_fails_first(tmp_path: Path, content: bytes | None, needle: str) -> None:
    key = tmp_path / "key.pem"
    if content is not None:
        key.write_bytes(content)
    # A broken --model proves the key is read before any other work.
    proc = run_export(
        ["--signing-key", str(key), "--model", "no_such_module:f", "--out", str(tmp_path / "o")],
        tmp_path / "tmp",
    )
    _assert_clean_failure(proc, tmp_path, needle, EXIT_FAILURE)
    assert not (tmp_path / "o").exists()


def _config_value(path: str):
    import torch._inductor.config

    obj = torch._inductor.config
    for part in path.split("."):
        assert hasattr(obj, part), f"torch._inductor.config has no {path}"
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("isa", ["portable", "native"])
def test_inductor_options(device: str, isa: str) -> None:
    signature = '[{"dtype":"Float","sizes":[{"min":1,"max":16},{"min":8,"max":8}]}]'
    opts = export_compile.inductor_options(device, isa, "/usr/bin/g++", signature)
    # A misspelt key would be ignored silently by a config patch.
    for key in opts:
        _config_value(key)
    # A CUDA package carries its kernels in its .so instead of loading them
    # from the extraction folder, as fatbins rather than one GPU's cubins.
    cuda = {"aot_inductor.embed_kernel_binary": True, "aot_inductor.emit_multi_arch_kernel": True}
    for key, value in cuda.items():
        assert opts.get(key) == (value if device == "cuda" else None), key
    # The host-side C++ targets the chosen CPU instruction set on both devices.
    assert opts["cpp.march"] == {"portable": "x86-64-v3", "native": "native"}[isa]
    assert opts.get("cpp.simdlen") == (256 if isa == "portable" else None)
    assert opts["cpp.cxx"] == (None, "/usr/bin/g++")
    assert opts["aot_inductor.check_lowerbound"] is False
    # No assert_size_stride after each custom-op call (see inductor_options).
    assert opts["size_asserts"] is False
    assert opts["aot_inductor.metadata"] == {"my_ops.inputs": signature}


@pytest.mark.parametrize(
    ("args", "mode"),
    [
        ([], "no-autotune"),
        (["--isa", "native"], "no-autotune"),
        (["--mode", "max-autotune"], "max-autotune"),
        (["--device", "cuda"], "no-autotune"),
        (["--target", "linux-aarch64"], "no-autotune"),
        (["--quantize", "int8"], "no-autotune"),
        (["--quantize", "int4", "--mode", "max-autotune"], "max-autotune"),
    ],
)
def test_the_default_mode_holds_the_weights_once(args: list[str], mode: str) -> None:
    """Without --mode a package is compiled with Inductor's defaults (each weight once, weights
    files taken) for every device, target and scheme; max-autotune is asked for."""
    from deploy.exporter import cli

    assert cli.parse_args(args).mode == mode


@pytest.mark.parametrize(
    "args", [["--device", "cuda"], ["--target", "linux-aarch64"]], ids=["cuda", "aarch64"]
)
def test_max_autotune_is_refused_where_it_cannot_tune(tmp_path: Path, args: list[str]) -> None:
    proc = run_export(
        [*args, "--mode", "max-autotune", "--model", "no_such_module:f",
         "--out", str(tmp_path / "o")],
        tmp_path / "tmp",
    )  # fmt: skip
    _assert_clean_failure(proc, tmp_path, "--mode max-autotune is for --device cpu", EXIT_USAGE)
    assert not (tmp_path / "o").exists()


def test_max_autotune_freezes_and_tunes_the_matrix_products() -> None:
    tuned = export_compile.mode_options("max-autotune")
    # A misspelt key would be ignored silently by a config patch.
    for key in tuned:
        _config_value(key)
    assert tuned["freezing"] is True
    assert tuned["max_autotune"] is True
    assert set(tuned["max_autotune_gemm_backends"].split(",")) == {"CPP", "ATEN"}
    # Quietly: no table per tuned matrix product on stderr.
    assert tuned["autotune_num_choices_displayed"] == 0
    assert tuned["max_autotune_report_choices_stats"] is False
    assert export_compile.frozen(tuned)
    assert export_compile.mode_options("no-autotune") == {}
    assert not export_compile.frozen({})
    # --inductor-option comes after the mode and wins.
    assert not export_compile.frozen(tuned | {"freezing": False})


def test_the_cpp_gemm_template_alone_is_tuned_where_it_applies() -> None:
    from torch._inductor import select_algorithm
    from torch._inductor.codegen.cpp_template_kernel import CppTemplateCaller

    # Bare instances: the filter looks at the kind of candidate only.
    template_a = object.__new__(CppTemplateCaller)
    template_b = object.__new__(CppTemplateCaller)
    aten = object.__new__(select_algorithm.ExternKernelCaller)
    selector = select_algorithm.get_algorithm_selector_cache()

    def filtered(choices: list) -> list:
        for fn in selector.preprocessing_fns:
            choices = fn(choices)
        return choices

    def callers_own(choices: list) -> list:
        return choices

    selector.add_preprocessing_fn(callers_own)
    try:
        before = list(selector.preprocessing_fns)
        assert export_compile.prefers_cpp_gemm_template("max-autotune")
        assert not export_compile.prefers_cpp_gemm_template("no-autotune")
        with export_compile.prefer_cpp_gemm_template(True):
            assert filtered([aten, template_a, template_b]) == [template_a, template_b]
            # A product the template cannot take keeps ATen, rather than failing the compile.
            assert filtered([aten]) == [aten]
        with export_compile.prefer_cpp_gemm_template(False):
            assert filtered([aten, template_a]) == [aten, template_a]
        # Gone after the compile, even one that failed; the caller's own function stays.
        with pytest.raises(RuntimeError), export_compile.prefer_cpp_gemm_template(True):
            raise RuntimeError("compile failed")
        assert selector.preprocessing_fns == before
        assert filtered([aten, template_a]) == [aten, template_a]
    finally:
        selector.preprocessing_fns.remove(callers_own)


def test_headers_are_precompiled_only_where_they_are_kept(tmp_path: Path) -> None:
    from torch._inductor import codecache

    saved = codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR
    with ScopedEnvironment() as env:
        assert export_compile.keep_precompiled_headers(None, env) == {
            "aot_inductor.precompile_headers": False
        }
        kept = str(tmp_path / "headers")
        assert export_compile.keep_precompiled_headers(kept, env) == {
            "aot_inductor.precompile_headers": True
        }
        # Where Inductor's _precompile_header writes them.
        assert codecache._HEADER_DIR == kept
        assert codecache._HEADER_LOCK_DIR.startswith(kept)
    # The export's setting ends with it.
    assert (codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR) == saved


def _exported(module, inputs, dynamic_shapes=None):
    import torch

    return torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)


def test_input_signature_is_the_json_the_loader_reads() -> None:
    import torch

    class TwoInputs(torch.nn.Module):
        def forward(self, x, ids, mask):
            return x.sum() + ids.sum() + mask.sum()

    batch = torch.export.Dim("batch", min=1, max=8)
    seq = torch.export.Dim("seq", min=2)
    ep = _exported(
        TwoInputs(),
        (torch.zeros(4, 16), torch.zeros(4, 3, dtype=torch.int64), torch.zeros((), dtype=bool)),
        {"x": {0: batch}, "ids": {0: batch, 1: seq}, "mask": None},
    )
    text = export_compile.input_signature(ep)
    assert json.loads(text) == [
        {"dtype": "Float", "sizes": [{"min": 1, "max": 8}, {"min": 16, "max": 16}]},
        {"dtype": "Long", "sizes": [{"min": 1, "max": 8}, {"min": 2, "max": None}]},
        {"dtype": "Bool", "sizes": []},
    ]
    # Compact: it is stored in the package's metadata as it is.
    assert " " not in text


def test_input_signature_is_none_for_a_dtype_the_loader_does_not_know() -> None:
    import torch

    class Identity(torch.nn.Module):
        def forward(self, x):
            return x * 2

    ep = _exported(Identity(), (torch.zeros(2, dtype=torch.complex64),))
    assert export_compile.input_signature(ep) is None


def test_a_scoped_environment_puts_back_what_the_export_changed(monkeypatch) -> None:
    import logging
    import tempfile
    import types

    monkeypatch.setenv("MY_OPS_SCOPED_SET", "before")
    monkeypatch.delenv("MY_OPS_SCOPED_ABSENT", raising=False)
    monkeypatch.setenv("MY_OPS_SCOPED_UNSET", "here")
    holder = types.SimpleNamespace(kept=1)
    logger = logging.getLogger("my_ops.scoped_environment_test")
    logger.setLevel(logging.INFO)
    tempdir = tempfile.tempdir
    order: list[str] = []
    with pytest.raises(RuntimeError), ScopedEnvironment() as env:
        env.on_restore(lambda: order.append("last"))
        env.set_env("MY_OPS_SCOPED_SET", "during")
        env.set_env("MY_OPS_SCOPED_SET", "again")
        env.set_env("MY_OPS_SCOPED_ABSENT", "during")
        env.unset_env("MY_OPS_SCOPED_UNSET")
        env.set_tempdir("/nonexistent/scoped")
        env.set_attribute(holder, "kept", 2)
        env.set_attribute(holder, "added", 3)
        env.quiet_logger(logger.name)
        env.on_restore(lambda: order.append("first:" + os.environ["MY_OPS_SCOPED_SET"]))
        assert os.environ["MY_OPS_SCOPED_SET"] == "again"
        assert "MY_OPS_SCOPED_UNSET" not in os.environ
        assert os.environ["TMPDIR"] == tempfile.tempdir == "/nonexistent/scoped"
        assert (holder.kept, holder.added, logger.level) == (2, 3, logging.ERROR)
        raise RuntimeError("the export failed")
    # Undone in reverse order, even after a failure: a callback sees the changes made before it.
    assert order == ["first:again", "last"]
    assert os.environ["MY_OPS_SCOPED_SET"] == "before"
    assert "MY_OPS_SCOPED_ABSENT" not in os.environ
    assert os.environ["MY_OPS_SCOPED_UNSET"] == "here"
    assert tempfile.tempdir == tempdir
    assert holder.kept == 1 and not hasattr(holder, "added")
    assert logger.level == logging.INFO
