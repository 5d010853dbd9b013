"""Tests of nbhelpers.memory_access: the 32-byte sector model (hand-computed cases, misaligned
bases, element sizes 1/2/4/8, a brute-force count over every byte), the 64-byte cache-line model
of a long strided read, the shape of the CPU measurement (no timing assertions: a unit test
cannot know this machine's bandwidth), and the load and store trace of a Triton kernel."""

import numpy as np
import pytest

from nbhelpers.memory_access import (
    CACHE_LINE_BYTES,
    SECTOR_BYTES,
    WARP_SIZE,
    MemoryRequest,
    SectorCount,
    StridedReads,
    cache_line_efficiency,
    loaded_addresses,
    measure_strided_read,
    memory_requests,
    sector_table,
    sectors_touched,
    warp_sectors,
)


def brute_force(addresses, elem_bytes, sector_bytes=SECTOR_BYTES):
    """Sets of every byte read and of the sector of each: the definition, counted naively."""
    touched = {a + k for a in addresses for k in range(elem_bytes)}
    sectors = {b // sector_bytes for b in touched}
    return len(sectors), len(touched)


# ------------------------------------------------------------------ hand-computed cases


def test_constants():
    assert (WARP_SIZE, SECTOR_BYTES, CACHE_LINE_BYTES) == (32, 32, 64)


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (4, 16), (8, 32), (16, 32), (32, 32), (1024, 32)])
def test_fp32_warp_by_hand(stride, sectors):
    # 32 threads x 4 bytes = 128 useful bytes; thread t's element is at 4 s t, in sector 4 s t // 32
    c = sectors_touched(elem_bytes=4, stride=stride)
    assert c == SectorCount(sectors, 128)
    assert c.moved_bytes == 32 * sectors
    assert c.efficiency == 128 / (32 * sectors)


def test_sector_table_is_the_chapters_prediction():
    rows = sector_table()
    assert [r["pattern"] for r in rows] == [
        "contiguous",
        "stride 2",
        "stride 4",
        "stride 8",
        "stride 16",
        "stride 32",
        "transposed (rows of 1024)",
    ]
    assert [r["efficiency"] for r in rows] == [1.0, 0.5, 0.25, 0.125, 0.125, 0.125, 0.125]
    assert [r["sectors"] for r in rows] == [4, 8, 16, 32, 32, 32, 32]
    assert all(r["useful_bytes"] == 128 and r["moved_bytes"] == 32 * r["sectors"] for r in rows)
    assert len(sector_table(strides=range(1, 33), row_elems=None)) == 32
    # stride 3: thread t at 12 t bytes; 32 threads span bytes 0..375, every sector 0..11 touched
    assert sector_table(strides=[3], row_elems=None)[0]["sectors"] == 12


def test_misaligned_bases():
    # fp32 contiguous from byte 4: bytes 4..131 -> sectors 0..4, 5 of them
    assert sectors_touched(base=4) == SectorCount(5, 128)
    assert sectors_touched(base=4).efficiency == 0.8
    # from byte 2: each element straddles nothing new, still bytes 2..129 -> 5 sectors
    assert sectors_touched(base=2).sectors == 5
    # a base that is a whole sector away changes nothing
    assert sectors_touched(base=32) == sectors_touched(base=0)
    # stride 8 (32 bytes apart) from byte 30: every element straddles two sectors -> 33
    c = sectors_touched(stride=8, base=30)
    assert c.sectors == 33 and c.efficiency == 128 / (33 * 32)
    # fp64 contiguous from byte 8: bytes 8..263 -> sectors 0..8
    assert sectors_touched(elem_bytes=8, base=8).sectors == 9


@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8])
def test_element_sizes(elem_bytes):
    useful = 32 * elem_bytes
    # contiguous: exactly the sectors the useful bytes fill
    c = sectors_touched(elem_bytes=elem_bytes)
    assert c.sectors == useful // 32 and c.efficiency == 1.0
    # from one element per sector on (stride >= 32 / elem_bytes), every thread has its own sector
    s_far = 32 // elem_bytes
    for s in (s_far, 2 * s_far, 1000):
        c = sectors_touched(elem_bytes=elem_bytes, stride=s)
        assert c.sectors == 32 and c.efficiency == elem_bytes / 32
    # below that, stride s moves s times the useful bytes
    s = 1
    while s < s_far:
        assert sectors_touched(elem_bytes=elem_bytes, stride=s).efficiency == 1 / s
        s *= 2


def test_explicit_addresses():
    assert sectors_touched(np.arange(32) * 4) == sectors_touched(elem_bytes=4, stride=1)
    # every thread reads the same float (a broadcast): one sector, 4 distinct useful bytes
    assert sectors_touched([64] * 32) == SectorCount(1, 4)
    # order and duplicates do not matter
    addr = [0, 128, 4, 4, 256, 0]
    assert sectors_touched(addr) == sectors_touched(sorted(set(addr))) == SectorCount(3, 16)
    # overlapping elements count their bytes once
    assert sectors_touched([0, 2], elem_bytes=4) == SectorCount(1, 6)
    # nothing read: nothing moved
    empty = sectors_touched([])
    assert empty == SectorCount(0, 0) and empty.moved_bytes == 0 and empty.efficiency == 1.0
    assert sectors_touched(threads=0).sectors == 0
    # cache lines instead of sectors
    assert sectors_touched(stride=2, sector_bytes=64) == SectorCount(4, 128, 64)


def test_brute_force_by_set_counting():
    rng = np.random.default_rng(0)
    for trial in range(300):
        elem_bytes = int(rng.choice([1, 2, 4, 8, 3]))
        sector_bytes = int(rng.choice([32, 64, 16]))
        if trial % 3 == 0:  # a pattern
            stride, base, threads = int(rng.integers(1, 40)), int(rng.integers(0, 100)), int(rng.integers(0, 40))
            addresses = [base + t * stride * elem_bytes for t in range(threads)]
            got = sectors_touched(
                elem_bytes=elem_bytes, stride=stride, base=base, threads=threads, sector_bytes=sector_bytes
            )
        else:  # scattered, clustered or duplicated addresses
            span = int(rng.choice([16, 200, 5000]))
            addresses = rng.integers(0, span, size=int(rng.integers(0, 40))).tolist()
            got = sectors_touched(addresses, elem_bytes=elem_bytes, sector_bytes=sector_bytes)
        assert (got.sectors, got.useful_bytes) == brute_force(addresses, elem_bytes, sector_bytes), trial


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"^stride must be a positive int \(in elements\), got 0$"):
        sectors_touched(stride=0)
    with pytest.raises(ValueError, match=r"^elem_bytes must be a positive int, got 0$"):
        sectors_touched(elem_bytes=0)
    with pytest.raises(ValueError, match=r"^base must be a non-negative int \(a byte address\), got -4$"):
        sectors_touched(base=-4)
    with pytest.raises(TypeError, match=r"^stride must be a positive int \(in elements\), got 2.0$"):
        sectors_touched(stride=2.0)
    with pytest.raises(TypeError, match=r"^threads must be a non-negative int, got True$"):
        sectors_touched(threads=True)
    with pytest.raises(ValueError, match="non-negative"):
        sectors_touched([0, -4])
    with pytest.raises(TypeError, match="integers"):
        sectors_touched([0.0, 4.0])
    with pytest.raises(ValueError, match="1-D"):
        sectors_touched(np.zeros((2, 16), dtype=int))


# ------------------------------------------------------------------ the cache-line model


def test_cache_line_efficiency_for_fp32():
    assert [cache_line_efficiency(s) for s in (1, 2, 4, 8, 16, 32, 1000)] == [
        1,
        1 / 2,
        1 / 4,
        1 / 8,
        1 / 16,
        1 / 16,
        1 / 16,
    ]
    assert cache_line_efficiency(3) == 1 / 3
    assert cache_line_efficiency(4, elem_bytes=8) == 1 / 4 and cache_line_efficiency(8, elem_bytes=8) == 1 / 8
    assert cache_line_efficiency(2, elem_bytes=1) == 1 / 2 and cache_line_efficiency(100, elem_bytes=1) == 1 / 64
    with pytest.raises(ValueError, match="divide"):
        cache_line_efficiency(2, elem_bytes=3)
    with pytest.raises(ValueError, match="stride"):
        cache_line_efficiency(0)


@pytest.mark.parametrize("elem_bytes", [1, 4, 8])
@pytest.mark.parametrize("stride", [1, 2, 3, 4, 5, 8, 12, 16, 32, 100])
def test_cache_line_model_is_the_line_count_of_a_long_read(stride, elem_bytes):
    # the same law by counting: 4096 elements read, 64-byte lines touched, as sectors_touched does
    counted = sectors_touched(elem_bytes=elem_bytes, stride=stride, threads=4096, sector_bytes=64).efficiency
    assert counted == pytest.approx(cache_line_efficiency(stride, elem_bytes), rel=0.01)


# ------------------------------------------------------------------ the measurement


@pytest.mark.parametrize("op", ["sum", "copy"])
def test_measurement_has_the_right_shape_and_sane_values(op):
    r = measure_strided_read(strides=(1, 2, 4, 8, 16, 32), n=2**16 + 3, repeats=3, op=op)
    assert isinstance(r, StridedReads) and r.op == op and r.repeats == 3
    assert r.array_bytes == 4 * (2**16 + 3)
    for field in (r.seconds, r.useful_bytes, r.bandwidth, r.measured_efficiency, r.predicted_efficiency):
        assert field.shape == (6,) and np.all(np.isfinite(field)) and np.all(field > 0)
    assert r.strides.tolist() == [1, 2, 4, 8, 16, 32]
    assert r.useful_bytes.tolist() == [4 * len(range(0, 2**16 + 3, s)) for s in r.strides]
    assert np.allclose(r.bandwidth, r.useful_bytes / r.seconds)
    assert r.measured_efficiency[0] == 1.0
    e = np.array([1, 1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 16])
    # a copy also writes the useful bytes, at every stride alike: (1 + 1) / (1 / e + 1)
    assert np.allclose(r.predicted_efficiency, e if op == "sum" else 2 / (1 / e + 1))
    assert r.predicted_efficiency.tolist()[:2] == ([1, 1 / 2] if op == "sum" else [1, 2 / 3])


def test_measurement_bad_arguments():
    with pytest.raises(ValueError, match="op"):
        measure_strided_read(n=64, op="max")
    with pytest.raises(ValueError, match="stride"):
        measure_strided_read(strides=(1, 0), n=64)
    with pytest.raises(ValueError, match="empty"):
        measure_strided_read(strides=(), n=64)
    with pytest.raises(ValueError, match="repeats"):
        measure_strided_read(n=64, repeats=0)


# ------------------------------------------------------------------ the address trace of a kernel


def _copy_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def masked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    @triton.jit
    def load_unmasked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs), mask=offs < n)

    return masked, load_unmasked


@pytest.mark.parametrize("dtype", ["float32", "int8", "float64"])
def test_loaded_addresses_are_the_elements_read(dtype):
    import torch

    masked, load_unmasked = _copy_kernels()
    n, block = 37, 16
    x = torch.arange(n + block, dtype=getattr(torch, dtype))  # room past n for the unmasked load
    out = torch.zeros_like(x)
    addr = loaded_addresses(masked, (3,), x, out, n, BLOCK=block)
    index = (addr.astype(np.int64) - x.data_ptr()) // x.element_size()
    assert sorted(index.tolist()) == list(range(n))  # each element once, none past the end
    assert torch.equal(out[:n], x[:n]) and not out[n:].any()  # the kernel really ran
    addr = loaded_addresses(load_unmasked, (3,), x, torch.zeros_like(x), n, BLOCK=block)
    index = (addr.astype(np.int64) - x.data_ptr()) // x.element_size()
    assert sorted(index.tolist()) == list(range(3 * block))  # 11 loads past n
    # the addresses agree with the sector counter: 48 float32 from an aligned base
    if dtype == "float32":
        assert sectors_touched(addr - addr.min(), elem_bytes=4).sectors == 3 * block * 4 // 32


def test_memory_requests_are_every_load_and_store_lane_by_lane():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def tile_transposed(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        # a (BLOCK // 4, 4) tile of offsets, stored through its transpose
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK // 4)[:, None] * 4 + tl.arange(0, 4)[None, :]
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(out_ptr + tl.trans(offs), tl.trans(x), mask=tl.trans(offs) < n)

    n, block = 21, 16
    x = torch.arange(2 * block, dtype=torch.int16)
    out = torch.zeros_like(x)
    requests = memory_requests(tile_transposed, (2,), x, out, n, BLOCK=block)
    assert [r.op for r in requests] == ["load", "store"] * 2  # program by program, in order
    assert all(r.elem_bytes == 2 and r.addresses.dtype == np.uint64 for r in requests)
    assert torch.equal(out[:n], x[:n]) and not out[n:].any()  # the kernel really ran
    load, store = ((r.addresses.astype(np.int64) - t.data_ptr()) // 2 for r, t in zip(requests[2:], (x, out)))
    # every lane, in the tile's row-major order, the masked-off ones too
    assert load.tolist() == list(range(16, 32))
    assert store.tolist() == [16 + 4 * (i % 4) + i // 4 for i in range(16)]
    assert requests[2].active.tolist() == [i < n - 16 for i in range(16)]
    assert requests[3].active.tolist() == [16 + 4 * (i % 4) + i // 4 < n for i in range(16)]
    # loaded_addresses is the loads' active lanes
    loads = np.concatenate([r.addresses[r.active] for r in requests if r.op == "load"])
    assert np.array_equal(
        loaded_addresses(tile_transposed, (2,), x, out, n, BLOCK=block) - x.data_ptr(), loads - x.data_ptr()
    )


def test_loaded_addresses_needs_cpu_tensors_and_restores_the_interpreter():
    import torch
    from triton.runtime import interpreter

    masked, _ = _copy_kernels()
    before = interpreter.InterpreterBuilder.create_masked_load
    before_store = interpreter.InterpreterBuilder.create_masked_store
    x = torch.zeros(4)
    empty = loaded_addresses(masked, (0,), x, x, 0, BLOCK=16)  # no program: no load
    assert empty.dtype == np.uint64 and empty.size == 0
    with pytest.raises(Exception):
        loaded_addresses(masked, (1,), x, x, 4)  # BLOCK missing: the kernel fails
    assert interpreter.InterpreterBuilder.create_masked_load is before
    assert interpreter.InterpreterBuilder.create_masked_store is before_store
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="CPU"):
            loaded_addresses(masked, (1,), x.cuda(), x.cuda(), 4, BLOCK=16)


def test_warp_sectors_counts_each_warp_of_each_request_per_op():
    """32 consecutive lanes make a warp; masked-off lanes are left out; loads and stores apart."""
    contiguous = np.arange(40, dtype=np.uint64) * 4  # fp32: 4 sectors, then 8 lanes in 1
    column = np.arange(32, dtype=np.uint64) * 4096  # one sector a lane
    on = np.ones(40, dtype=bool)
    half = np.arange(32) < 16
    requests = [
        MemoryRequest("load", contiguous, on, 4),
        MemoryRequest("store", column, np.ones(32, dtype=bool), 4),
        MemoryRequest("load", column, half, 4),
        MemoryRequest("store", column, np.zeros(32, dtype=bool), 4),
    ]
    assert warp_sectors(requests) == {"load": 4 + 1 + 16, "store": 32}
    assert warp_sectors([]) == {"load": 0, "store": 0}
    assert warp_sectors(requests[:1], warp=8) == {"load": 5, "store": 0}
