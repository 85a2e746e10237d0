"""Python bytecode for a wheel's modules, beside them in the runfiles.

Python compiles a module it imports unless it finds the module's bytecode in
the __pycache__ folder beside it. A wheel unpacked by rules_python has none,
and tests run with bytecode writing off (tools/pytest), so every Python
process a test started compiled torch's modules again: `import torch` took
3.9 s instead of 2.2 s, and CI starts hundreds of them. The annotations in
MODULE.bazel add a py_bytecode target to each heavy wheel's repository and
its output to the wheel's py_library data, so that the bytecode is in every
runfiles tree beside the sources.

The bytecode is unchecked-hash (PEP 552): Python uses it without comparing
the source's time stamp, which a sandbox or a remote worker does not keep,
and the files are the same bytes wherever they are built. Both come from the
same sources in the same build, so they cannot disagree.
"""

_PY_TOOLCHAIN = "@rules_python//python:toolchain_type"

def _py_bytecode_impl(ctx):
    if ctx.label.package:
        fail("py_bytecode must be in its repository's root package, not '{}'".format(ctx.label.package))
    runtime = ctx.toolchains[_PY_TOOLCHAIN].py3_runtime
    inputs = list(ctx.files.srcs) + [ctx.file._compiler]
    if runtime.interpreter:
        interpreter = runtime.interpreter.path
        inputs.append(runtime.interpreter)
    else:
        interpreter = runtime.interpreter_path
    root = ctx.label.workspace_root + "/" if ctx.label.workspace_root else ""
    pairs = ctx.actions.args()
    outputs = []
    for src in ctx.files.srcs:
        if not src.path.startswith(root) or not src.basename.endswith(".py"):
            fail("py_bytecode: {} is not a .py file of {}".format(src.path, ctx.label.workspace_name))
        folder = src.path[len(root):-len(src.basename)]
        out = ctx.actions.declare_file("{}__pycache__/{}.{}.pyc".format(
            folder,
            src.basename[:-len(".py")],
            ctx.attr.cache_tag,
        ))
        pairs.add(src)
        pairs.add(out)
        outputs.append(out)
    pairs.use_param_file("%s", use_always = True)
    pairs.set_param_file_format("multiline")
    ctx.actions.run(
        executable = interpreter,
        arguments = ["-I", "-B", ctx.file._compiler.path, ctx.attr.cache_tag, pairs],
        inputs = inputs,
        outputs = outputs,
        mnemonic = "PyBytecode",
        progress_message = "Compiling %{{label}}'s {} Python modules to bytecode".format(len(outputs)),
    )
    return [DefaultInfo(files = depset(outputs), runfiles = ctx.runfiles(files = outputs))]

py_bytecode = rule(
    implementation = _py_bytecode_impl,
    doc = "Unchecked-hash bytecode for srcs (.py files), at __pycache__/NAME.CACHE_TAG.pyc beside each.",
    attrs = {
        "cache_tag": attr.string(
            default = "cpython-311",
            doc = "sys.implementation.cache_tag of the Python that runs the modules; the build checks it.",
        ),
        "srcs": attr.label_list(allow_files = [".py"]),
        "_compiler": attr.label(
            default = "@@//third_party/python:compile_bytecode.py",
            allow_single_file = True,
        ),
    },
    toolchains = [_PY_TOOLCHAIN],
)
