"""Kernels for tests/test_exercises_ch10.py's audit of host code in a kernel
(nbhelpers.load_audit.host_code_problems): one of device code only, one full of ways out to the
host. Imported by that test after setup_device(), so that Triton is in the mode the other tests of
the process use."""

import numpy as np
import triton
import triton.language as tl

SHIFT: tl.constexpr = 4


@triton.jit
def device_helper(x):
    return x + SHIFT


@triton.jit
def device_only(off_ptr, out_ptr, E, BLOCK_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    x = tl.load(off_ptr + pid).to(tl.int64)
    for _ in tl.static_range(0, 3):
        x = device_helper(x) + tl.cdiv(x, BLOCK_M) + min(1, 2) + tl.float32.primitive_bitwidth
    if x > E:
        x = tl.where(x > 2 * E, x, 0)
    tl.store(out_ptr + pid, x)


def host_helper(x):
    return x


@triton.jit
def escapes(off_ptr, out_ptr, E, BLOCK_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    a = int(tl.load(off_ptr))
    b = triton.runtime.interpreter.np.asarray(pid)
    c = tl.core.builtins.eval("1")
    d = [a, b, c]
    e = triton.cdiv(a, 2)
    f = {k: 1 for k in d}
    g = np.asarray(tl.load(off_ptr).handle)
    h = host_helper(getattr(pid, "handle"))
    i = f"{pid}" == "3"
    tl.store(out_ptr + pid, a + e + f + g + h + i)
