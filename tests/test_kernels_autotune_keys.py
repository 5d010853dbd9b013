"""Every autotuned kernel of nbhelpers.kernels is tuned once per kernel that really runs: each
compile-time argument (tl.constexpr) that the launcher passes, rather than the configurations
set, is in the autotune key. Otherwise two different kernels share one cache entry, and the
second (fp8 fast accumulation after promotion, TF32 after IEEE) runs with the first's config.

The keys are read from the source (the tuned wrappers exist only where kernels compile, on a
GPU); the kernels' own signatures come from the functions themselves."""

import ast
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["gemm", "scaled_gemm"]


def autotune_keys(source: str) -> dict[str, list[str]]:
    """kernel function name -> its `triton.autotune(..., key=[...])` list, from a module's source."""
    tree = ast.parse(source)
    keys = {}
    for node in ast.walk(tree):
        # triton.autotune(configs=..., key=[...])(kernel)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Call):
            inner = node.func
            if getattr(inner.func, "attr", None) == "autotune":
                key = next(kw.value for kw in inner.keywords if kw.arg == "key")
                keys[node.args[0].id] = [ast.literal_eval(e) for e in key.elts]
    return keys


def constexpr_args(kernel) -> list[str]:
    fn = getattr(kernel, "fn", kernel)
    return [name for name, p in inspect.signature(fn).parameters.items() if "constexpr" in str(p.annotation)]


@pytest.mark.parametrize("module", MODULES)
def test_every_launch_time_constexpr_is_in_the_autotune_key(module):
    import importlib

    mod = importlib.import_module(f"nbhelpers.kernels.{module}")
    keys = autotune_keys((ROOT / "nbhelpers" / "kernels" / f"{module}.py").read_text())
    assert keys, f"no autotuned kernel found in {module}"
    configs = mod.GPU_CONFIGS if module == "gemm" else mod.FP8_GPU_CONFIGS
    from_configs = set().union(*(c.kwargs for c in configs))
    for kernel_name, key in keys.items():
        launch_time = [a for a in constexpr_args(getattr(mod, kernel_name)) if a not in from_configs]
        missing = [a for a in launch_time if a not in key]
        assert not missing, f"{module}.{kernel_name}: autotune key {key} lacks {missing}"


def test_the_check_finds_a_missing_argument():
    """The check can fail: a kernel whose key leaves out a launch-time constexpr is reported."""
    src = (
        "import triton\nimport triton.language as tl\n"
        "def k(x, M, FLAG: tl.constexpr, BLOCK: tl.constexpr):\n    pass\n"
        "t = triton.autotune(configs=[], key=['M'])(k)\n"
    )
    keys = autotune_keys(src)
    assert keys == {"k": ["M"]}
    ns = {}
    exec(compile(src.split("t = triton")[0], "fake", "exec"), ns)
    assert [a for a in constexpr_args(ns["k"]) if a != "BLOCK" and a not in keys["k"]] == ["FLAG"]
