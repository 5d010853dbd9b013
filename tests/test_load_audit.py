"""nbhelpers.load_audit.dot_operand_problems on the ways of writing a tl.dot that the interpreter
runs right and a GPU does not: unfilled masked loads reached through conversions, arithmetic,
tl.trans, annotated assignments and @triton.jit helpers; accumulators not started as float32
zeros; and right answers written otherwise (the precision in capitals, in a constexpr). The first
tests of the audit are in tests/test_exercises_ch09.py. The functions below are only read, never
run: the audit reads their source."""

from nbhelpers.device import setup_device

setup_device(verbose=False)  # before triton.jit decorates the helpers below

import triton
import triton.language as tl

from nbhelpers.load_audit import dot_operand_problems


@triton.jit
def load_unfilled(ptrs, mask):
    return tl.load(ptrs, mask=mask)


@triton.jit
def load_filled(ptrs, mask):
    return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def fill(x, mask):
    return tl.where(mask, x, 0.0)


@triton.jit
def mma_tf32(acc, a, b):
    return acc + tl.dot(a, b)


@triton.jit
def mma_ieee(acc, a, b, PREC: tl.constexpr):
    acc += tl.dot(a, b, input_precision=PREC)
    return acc


def _one(fn) -> str:
    problems = dot_operand_problems(fn)
    assert len(problems) == 1, problems
    return problems[0]


def test_an_unfilled_load_reaches_the_dot_through_what_is_computed_from_it():
    def converted(a_ptr, b_ptr, offs, mask):
        a = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(a.to(tl.float32), b, input_precision="ieee")

    def scaled(a_ptr, b_ptr, offs, mask):
        a = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(a * 1.0, b, input_precision="ieee")

    def turned(a_ptr, b_ptr, offs, mask):
        a = tl.load(a_ptr + offs, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs, mask=mask)
        return tl.dot(a, tl.trans(tl.trans(b)), input_precision="ieee")

    def added_to(a_ptr, b_ptr, offs, mask):
        a = tl.load(a_ptr + offs, mask=mask)
        a += 0.0
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(a, b, input_precision="ieee")

    def annotated(a_ptr, b_ptr, offs, mask):
        a: tl.tensor = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(a, b, input_precision="ieee")

    def filled_with_itself(a_ptr, b_ptr, offs, mask):
        a = tl.load(a_ptr + offs, mask=mask)
        a = tl.where(mask, a, a)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        return tl.dot(a, b, input_precision="ieee")

    assert _one(converted).startswith("a.to(tl.float32), an operand of the tl.dot")
    assert _one(scaled).startswith("a * 1.0, an operand of the tl.dot")
    assert _one(turned).startswith("tl.trans(tl.trans(b)), an operand of the tl.dot")
    for fn in (added_to, annotated, filled_with_itself):
        problem = _one(fn)
        assert problem.startswith("a, an operand of the tl.dot") and "without other=" in problem, fn.__name__


def test_the_jit_functions_a_kernel_calls_are_read_with_what_it_passes_them():
    def loads_in_a_helper(a_ptr, b_ptr, offs, mask):
        a = load_unfilled(a_ptr + offs, mask)
        b = load_filled(b_ptr + offs, mask)
        return tl.dot(a, b, input_precision="ieee")

    def filled_by_a_helper(a_ptr, b_ptr, offs, mask):  # right: the helper fills the lanes
        a = fill(tl.load(a_ptr + offs, mask=mask), mask)
        b = load_filled(b_ptr + offs, mask)
        return tl.dot(a, b, input_precision="ieee")

    def dot_in_a_helper(a_ptr, b_ptr, offs, mask):
        a = tl.load(a_ptr + offs, mask=mask, other=0.0)
        acc = tl.zeros((16, 16), dtype=tl.float32)
        acc = mma_tf32(acc, a, a)
        return acc

    def ieee_helper(a_ptr, offs, mask):  # right: "ieee" passed to the helper's constexpr
        a = tl.load(a_ptr + offs, mask=mask, other=0.0)
        acc = tl.zeros((16, 16), dtype=tl.float32)
        acc = mma_ieee(acc, a, a, "ieee")
        return acc

    def unfilled_into_a_helper(a_ptr, offs, mask):
        a = tl.load(a_ptr + offs, mask=mask)
        acc = tl.zeros((16, 16), dtype=tl.float32)
        acc = mma_ieee(acc, a, a, PREC="ieee")
        return acc

    def half_into_a_helper(a_ptr, offs, mask):
        a = tl.load(a_ptr + offs, mask=mask, other=0.0)
        acc = tl.zeros((16, 16), dtype=tl.float16)
        acc = mma_ieee(acc, a, a, "ieee")
        return acc

    assert _one(loads_in_a_helper).startswith("a, an operand of the tl.dot")
    assert dot_operand_problems(filled_by_a_helper) == []
    problem = _one(dot_in_a_helper)
    assert "of mma_tf32 has no input_precision" in problem, problem
    assert dot_operand_problems(ieee_helper) == []
    problems = dot_operand_problems(unfilled_into_a_helper)
    assert problems and all("of mma_ieee" in p and "without other= (by its caller)" in p for p in problems)
    assert _one(half_into_a_helper).startswith("acc, the accumulator of the tl.dot")


def test_an_accumulator_added_to_by_assignment_must_start_as_float32_zeros():
    def python_float(a_ptr, offs):
        a = tl.load(a_ptr + offs)
        acc = 0.0
        for _ in range(2):
            acc = acc + tl.dot(a, a, input_precision="ieee")
        return acc

    def half(a_ptr, offs):
        a = tl.load(a_ptr + offs)
        acc = tl.zeros((16, 16), dtype=tl.float16)
        for _ in range(2):
            acc = acc + tl.dot(a, a, input_precision="ieee")
        return acc

    def half_round_trip(a_ptr, offs):
        a = tl.load(a_ptr + offs)
        acc = tl.zeros((16, 16), dtype=tl.float16)
        for _ in range(2):
            acc = tl.dot(a, a, acc.to(tl.float32), input_precision="ieee").to(tl.float16)
        return acc

    def right(a_ptr, offs):
        a = tl.load(a_ptr + offs)
        acc = tl.zeros((16, 16), dtype=tl.float32)
        for _ in range(2):
            acc = acc + tl.dot(a, a, input_precision="ieee")
        return acc

    def chained(a_ptr, offs):  # a product of products: x is an operand, not an accumulator
        x = tl.load(a_ptr + offs)
        x = tl.dot(x, x, input_precision="ieee")
        return x

    for fn in (python_float, half, half_round_trip):
        assert _one(fn).startswith("acc, the accumulator of the tl.dot"), fn.__name__
    assert dot_operand_problems(right) == []
    assert dot_operand_problems(chained) == []


def test_the_precision_in_capitals_or_in_a_constexpr_is_ieee():
    """Triton lowercases input_precision; a constexpr parameter default or a local constexpr that
    holds "ieee" says it as well as the string itself."""

    def capitals(a_ptr, offs):
        a = tl.load(a_ptr + offs)
        return tl.dot(a, a, input_precision="IEEE")

    def parameter_default(a_ptr, offs, PREC: tl.constexpr = "ieee"):
        a = tl.load(a_ptr + offs)
        return tl.dot(a, a, input_precision=PREC)

    def local_constexpr(a_ptr, offs):
        PREC: tl.constexpr = "ieee"
        a = tl.load(a_ptr + offs)
        return tl.dot(a, a, input_precision=PREC)

    def local_tf32(a_ptr, offs):
        PREC: tl.constexpr = "tf32"
        a = tl.load(a_ptr + offs)
        return tl.dot(a, a, input_precision=PREC)

    for fn in (capitals, parameter_default, local_constexpr):
        assert dot_operand_problems(fn) == [], fn.__name__
    assert 'no input_precision="ieee"' in _one(local_tf32)
