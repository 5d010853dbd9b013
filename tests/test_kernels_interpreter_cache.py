"""Tests of nbhelpers.kernels.interpreter_cache: Triton's interpreter with the repeated scans of
``triton.language`` skipped gives every kernel of the course the same bits, and leaves
``triton.language`` in the same state, as the interpreter as Triton ships it; and it scans a
namespace about once a launch where Triton scans it at every call of a ``@triton.jit`` function.

Each side runs in a fresh interpreter (``TRITON_INTERPRET=1``, in a subprocess, also on a machine
with a GPU): importing :mod:`nbhelpers.kernels` installs the cache, and the plain side puts
Triton's own functions back before any kernel runs. The costs compared are counts of calls, not
times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Every kernel family, on inputs small enough for the interpreter: top-k by each method (NaNs of
# both signs, ties, -0 and +0 among the keys), the GEMM, the grouped GEMM, the copies. The
# script prints what the test compares: whether the cache is in place, a digest of every output's
# bits, which attributes of triton.language's namespaces are builtins after the launches, and how
# often inspect.getmembers, the interpreter's _patch_lang and triton.language's is_builtin ran.
SCRIPT = r"""
import hashlib, inspect, json, sys
import torch
import nbhelpers.kernels
from nbhelpers.kernels import interpreter_cache
from triton.runtime import interpreter
import triton.language as tl

if sys.argv[1] == "plain":  # Triton's functions as it ships them
    for name in interpreter_cache.KNOWN_SOURCES:
        fn = getattr(interpreter, name)
        setattr(interpreter, name, getattr(fn, "__wrapped__", fn))

installed = interpreter_cache.installed()
digests_known = interpreter_cache.source_digests() == interpreter_cache.KNOWN_SOURCES
calls = {"getmembers": 0, "patch_lang": 0, "is_builtin": 0}
real_getmembers, patch_lang, real_is_builtin = inspect.getmembers, interpreter._patch_lang, tl.core.is_builtin


def counted_getmembers(*a, **k):
    calls["getmembers"] += 1
    return real_getmembers(*a, **k)


def counted_patch_lang(fn):
    calls["patch_lang"] += 1
    return patch_lang(fn)


def counted_is_builtin(fn):
    calls["is_builtin"] += 1
    return real_is_builtin(fn)


inspect.getmembers, interpreter._patch_lang = counted_getmembers, counted_patch_lang
tl.core.is_builtin = counted_is_builtin

from nbhelpers.kernels.copy import copy, transpose
from nbhelpers.kernels.gemm import matmul
from nbhelpers.kernels.grouped_gemm import grouped_matmul
from nbhelpers.kernels.topk import topk

g = torch.Generator().manual_seed(11)
x = torch.randn(3, 700, generator=g)
x[0, :40] = 2.0  # ties at the top
x[1, 5], x[1, 9], x[1, 13] = float("nan"), -float("nan"), -0.0
x[2, ::3] = 0.0
outs = []
for dtype in (torch.float32, torch.bfloat16):
    for method, kw in (("row", {"block_v": 64}), ("two_stage", {"block_v": 32, "chunk": 96}), ("radix", {})):
        for k in (1, 9):
            outs += list(topk(x.to(dtype), k, method=method, **kw))
a = torch.randn(37, 40, generator=g)
b = torch.randn(40, 29, generator=g)
outs.append(matmul(a, b))
w = torch.randn(3, 40, 24, generator=g)
outs.append(grouped_matmul(a, w, [0, 10, 10, 37]))
outs.append(copy(torch.randn(3000, generator=g), block=256))
outs.append(transpose(torch.randn(45, 70, generator=g), block=(16, 32)))
digest = hashlib.sha256()
for t in outs:
    digest.update(str((t.dtype, tuple(t.shape))).encode())
    digest.update(t.contiguous().view(torch.uint8).numpy().tobytes())
tl.core.is_builtin = real_is_builtin
state = {}
for label, ns in (("tl", tl), ("tl.core", tl.core), ("tl.tensor", tl.tensor), ("tl.math", tl.math)):
    state[label] = sorted(n for n in dir(ns) if tl.core.is_builtin(getattr(ns, n, None)))
print(json.dumps({
    "installed": installed,
    "digests_known": digests_known,
    "outputs": digest.hexdigest(),
    "n_outputs": len(outs),
    "builtins_after": state,
    **calls,
}))
"""


def _run(mode: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def both() -> dict[str, dict]:
    return {mode: _run(mode) for mode in ("cached", "plain")}


def test_installed_exactly_where_the_sources_are_the_checked_ones(both):
    cached, plain = both["cached"], both["plain"]
    assert cached["installed"] == cached["digests_known"]
    assert not plain["installed"]
    # the Triton the course pins is the one checked: an upgrade that changes the two functions
    # fails here, and the cache must be checked against it (or the digests left as they are)
    import triton

    lock = (ROOT / "requirements" / "cpu.txt").read_text()
    if f"triton=={triton.__version__}\n" in lock:
        assert cached["digests_known"], f"Triton {triton.__version__}'s interpreter is not the one checked"


def _skip_unless_checked(cached: dict) -> None:
    """Where the cache does not install (another Triton), both sides run Triton as shipped and
    comparing them would check nothing."""
    if not cached["digests_known"]:
        import triton

        pytest.skip(f"Triton {triton.__version__}'s interpreter is not the one the cache was checked against")
    assert cached["installed"]


def test_every_kernel_gives_the_same_bits_and_leaves_triton_language_as_triton_does(both):
    cached, plain = both["cached"], both["plain"]
    _skip_unless_checked(cached)
    assert cached["n_outputs"] == plain["n_outputs"] == 28
    assert cached["outputs"] == plain["outputs"]
    assert cached["builtins_after"] == plain["builtins_after"]
    assert len(plain["builtins_after"]["tl"]) > 50  # the snapshot sees the builtins at all


def test_each_namespace_is_scanned_once_instead_of_at_every_device_call(both):
    cached, plain = both["cached"], both["plain"]
    _skip_unless_checked(cached)
    # the same kernels made the same calls into the language: hundreds of them
    assert cached["patch_lang"] == plain["patch_lang"] > 500
    # Triton scans four or five namespaces per call; the cache scans a namespace again only when
    # its attributes changed (a launch adds and removes a few): a hundred times fewer scans here
    assert plain["getmembers"] >= 4 * plain["patch_lang"]
    assert 100 * cached["getmembers"] < plain["getmembers"]
    # and each call tests a namespace's members for being builtins only when one of those that
    # are (or were) changed: once on the way into a kernel and once on the way out, not at every
    # call inside it, where Triton tests every member at every call
    assert 20 * cached["is_builtin"] < plain["is_builtin"], (cached["is_builtin"], plain["is_builtin"])


def test_install_refuses_sources_it_was_not_checked_against(monkeypatch):
    from triton.runtime import interpreter

    from nbhelpers.kernels import interpreter_cache

    for name in interpreter_cache.KNOWN_SOURCES:  # Triton's own functions, not wrapped
        fn = getattr(interpreter, name)
        monkeypatch.setattr(interpreter, name, getattr(fn, "__wrapped__", fn))
    monkeypatch.setitem(interpreter_cache.KNOWN_SOURCES, "_patch_lang", "0" * 64)
    assert not interpreter_cache.installed()
    assert interpreter_cache.install() is False
    assert not interpreter_cache.installed()
    assert not hasattr(interpreter._patch_lang, "_nbhelpers_cache")


# A builtin's name removed and another name added (the namespace keeps its size): the next launch
# lists the namespace again and runs as before; the name put back is a builtin again.
NAMESPACE_CHANGES = r"""
import torch
import nbhelpers.kernels
import triton.language as tl
from nbhelpers.kernels import interpreter_cache
from nbhelpers.kernels.topk import topk

x = torch.randn(2, 300, generator=torch.Generator().manual_seed(3))
before = topk(x, 5)
saved = tl.math.sqrt
del tl.math.sqrt
tl.math.not_a_builtin = 1
during = topk(x, 5)
del tl.math.not_a_builtin
tl.math.sqrt = saved
after = topk(x, 5)
same = all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(before, during, after))
print(interpreter_cache.installed(), same, tl.core.is_builtin(tl.math.sqrt))
"""


def test_a_namespace_that_loses_a_builtin_and_gains_a_name_is_listed_again():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, "-c", NAMESPACE_CHANGES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    installed, same, builtin = out.stdout.split()[-3:]
    assert same == "True" and builtin == "True", out.stdout
    if installed != "True":
        pytest.skip("the cache is not installed over this Triton: Triton's own functions ran")
