"""Tests of nbhelpers.coalescing_report, what chapter 08 prints: the launch timings and the race
(from fake rows), the CPU's strided copies (from fake runs), and the copy-bandwidth run recorded on
the H100 (its numbers as the chapter quotes them)."""

import types
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from nbhelpers import coalescing_report as report
from nbhelpers.launch_timing import summarise
from nbhelpers.results import recorded_copy_bandwidth

ROOT = Path(__file__).resolve().parents[1]
STRIDES = (1, 2, 4, 8, 16, 32, 64)


def h100_run():
    runs = [r for r in recorded_copy_bandwidth(ROOT / "benchmarks" / "results") if "H100" in r["meta"]["gpu"]]
    if not runs:
        pytest.skip("no H100 copy run recorded")
    return runs[-1]


def timing_rows():
    nbytes = 2 * 4 * 2**26
    return [
        summarise("triton launch, wall clock, no synchronize", "wall, no synchronize", [20e-6, 25e-6], nbytes),
        summarise("triton launch, CUDA events, idle stream", "CUDA events, idle stream", [200e-6, 210e-6], nbytes),
        summarise("triton launch, CUDA events after queued work", "CUDA events, busy stream", [170e-6, 180e-6], nbytes),
    ]


def test_launch_timing_text_divides_by_the_peak_of_the_gpu_it_ran_on():
    text = report.launch_timing_text(timing_rows(), "NVIDIA H100 80GB HBM3")
    assert "x H100 SXM peak" in text and "H200" not in text
    # 536,870,912 bytes / 22.5 us = 23.86 TB/s, 7.12 x 3.35 TB/s
    assert "23.86" in text and "7.12" in text
    assert "cannot take less than 160 us; timings below that: triton launch, wall clock, no synchronize" in text
    assert "CUDA events on an idle stream minus after queued work: 30.0 us" in text
    assert "minus" not in report.launch_timing_text(timing_rows()[:2], "NVIDIA H100 80GB HBM3")
    other = report.launch_timing_text(timing_rows(), "NVIDIA A100-SXM4-80GB")  # no datasheet: no column
    assert "peak" not in other
    with pytest.raises(ValueError, match="no timing rows"):
        report.launch_timing_text([], "x")


def test_race_text_counts_the_early_reads_that_missed_the_copy():
    rows = [
        {"name": f"race, try {k}", "kind": "race", "before": b, "after": [2.0] * 2, "expected": [2.0] * 2,
         "event_before": b != [2.0] * 2 and False, "event_after": True}
        for k, b in ((1, [0.0, 0.0]), (2, [2.0, 2.0]))
    ]  # fmt: skip
    text = report.race_text(rows + timing_rows())
    assert "early reads that missed the copy: 1 of 2; every read after synchronize() holds the copy: True" in text
    with pytest.raises(ValueError, match="no race rows"):
        report.race_text(timing_rows())


def test_run_header_and_the_text_without_a_run():
    run = {"meta": {"gpu": "G", "date": "D", "command": "python x.py"}, "path": "/a/b/launch_timing_g.json"}
    assert report.run_header(run).splitlines() == [
        "recorded GPU run: G, D, driver None, torch None, triton None",
        "command: python x.py   (file: benchmarks/results/launch_timing_g.json)",
    ]
    assert report.run_header(run, live=True).startswith("measured now: G")
    text = report.not_recorded_text("benchmarks/gpu_x.py", "x", "it")
    assert "holds no x_*.json" in text and "python benchmarks/gpu_x.py" in text


def test_cpu_models_and_the_first_stride_below_a_floor():
    models = report.cpu_copy_models(STRIDES)
    line, pair = models.values()
    np.testing.assert_allclose(line[-3:], 2 / 17)  # one line per read from stride 16
    np.testing.assert_allclose(pair[-2:], 2 / 33)  # one pair per read from stride 32
    eff = np.array([[1, 0.6, 0.37, 0.23, 0.14, 0.109, 0.094], [1, 0.6, 0.37, 0.23, 0.14, 0.119, 0.093]])
    assert report.first_stride_below(STRIDES, eff, 2 / 17) == 64  # one run above the floor at 32
    eff[1, 5] = 0.105
    assert report.first_stride_below(STRIDES, eff, 2 / 17) == 32
    assert report.first_stride_below(STRIDES, eff, 0.05) is None
    # with 10% of noise, 0.105 is at the floor (0.1176 x 0.9 = 0.106), 0.094 below it
    assert report.first_stride_below(STRIDES, eff, 2 / 17, tol=0.10) == 64
    assert report.floor_verdicts(eff[:, 4:], 2 / 17, 0.10) == ["above", "at", "below"]
    with pytest.raises(ValueError, match="tol"):
        report.floor_verdicts(eff, 2 / 17, -0.1)
    v = report.cpu_variants(STRIDES)
    assert v["streaming baseline, strided allocates"][0] == 1.0
    np.testing.assert_allclose(v["write-allocate, both copies"][-1], 3 / 18)


def test_cpu_runs_text_prints_each_run_and_the_checks():
    def fake(eff, bw):
        return types.SimpleNamespace(measured_efficiency=np.array(eff), bandwidth=[bw], array_bytes=2**26)

    effs = ([1, 0.6, 0.37, 0.23, 0.14, 0.109, 0.094], [1, 0.6, 0.36, 0.23, 0.14, 0.105, 0.093])
    runs = [(fake(e, 20e9), fake([1], 55e9)) for e in effs]
    text = report.cpu_runs_text(STRIDES, runs, "Test CPU", 32 * 2**20)
    assert text.startswith("Test CPU, last-level cache 32 MiB")
    assert "2 runs" in text and "run 2: contiguous copy 20.0 GB/s useful from DRAM, 55.0 GB/s from cache" in text
    # the largest spread, 4% at stride 32 (0.109 vs 0.105): both runs below 0.1176 x 0.96
    assert "the largest spread between runs (4%) as the noise: stride 16 above it, stride 32 below it" in text
    assert "below the one-line floor by more than the noise in every run from stride: 32" in text
    # runs 10% apart at stride 32, one of them at the floor: at it within the noise, below from 64
    noisy = ([1, 0.6, 0.37, 0.23, 0.14, 0.117, 0.098], [1, 0.6, 0.37, 0.23, 0.14, 0.106, 0.094])
    noisy_text = report.cpu_runs_text(STRIDES, [(fake(e, 20e9), fake([1], 55e9)) for e in noisy], "Test CPU", None)
    assert "stride 32 at it within the noise, stride 64 below it" in noisy_text
    assert "in every run from stride: 64" in noisy_text
    assert "reads per 4 KiB page at stride 16: 64, 32: 32, 64: 16" in noisy_text
    assert "strides 32, 64, all runs: 0.093 to 0.109" in text
    # mean 0.14 -> 0.107 -> 0.0935: 0.76 and 0.87 where the line model stays flat (1.00)
    assert "(line model): 1->2 0.60 (0.67), " in text and "16->32 0.76 (1.00), 32->64 0.87 (1.00)" in text
    mean = np.mean([np.array(e) for e in effs], axis=0)
    assert "smallest worst-case deviation, this run: reads only (64 B lines)" in report.cpu_variants_text(STRIDES, mean)
    both = report.cpu_variants_text(STRIDES, np.array(effs))
    assert both.splitlines()[2] == report.cpu_variants_text(STRIDES, mean).splitlines()[2]  # the same mean
    assert both.endswith(
        "stride 2, 2 runs: 0.600 to 0.600; every run below reads only (0.667): True; "
        "above the streaming baseline (0.500): True"
    )
    assert "stride 2, 1 run: " in report.cpu_variants_text(STRIDES, mean)
    with pytest.raises(ValueError, match="factor 2"):
        report.doubling_text((1, 3), [1, 0.5], [1, 0.5])


def test_the_recorded_h100_copy_run_reads_as_the_chapter_says():
    run = h100_run()
    text = report.copy_run_text(run)
    assert "H100 SXM datasheet: 3.35 TB/s of HBM; torch's copy reached 0.90 of it" in text
    assert "not in this run's file" in text  # the 2026-12-06 run did not read the L2 limit
    assert report.copy_run_text({**run, "meta": {**run["meta"], "l2_fetch_granularity": 64}}).endswith("64 bytes")
    bounds = report.naive_transpose_bounds(run)
    assert [round(v / 1e9) for v in bounds.values()] == [672, 356]
    fetch = report.fetch_size_text(run)
    assert "0.222 = 672 GB/s (32-byte, measured 1.45x), 0.118 = 356 GB/s (64-byte, measured 2.74x)" in fetch
    # 1868/1742, 1146/1151, 575/656, 278/353, 262/326
    assert "torch's strided copy, per stride: 2 1.07, 4 1.00, 8 0.88, 16 0.79, 32 0.80" in fetch
    ax = report.copy_figure(run)
    labels = [ln.get_label() for ln in ax.lines]
    assert "torch's naive transpose, no L2 reuse, 64-byte fetch" in labels
    assert "NVIDIA H100 80GB HBM3 datasheet peak (3.35 TB/s)" in labels  # one pair of parentheses
    wide = next(ln for ln in ax.lines if ln.get_label().startswith("64-byte DRAM fetch model"))
    np.testing.assert_allclose(wide.get_xdata(), [3, 4, 5])  # strides 8, 16, 32
    np.testing.assert_allclose(wide.get_ydata(), [672, 356, 356], atol=0.5)
    assert ax.get_ylim()[0] == 200  # the stride-32 points (262 GB/s) sit above a labelled tick
    assert "recorded 2026-12-06" in ax.get_title()
    plt.close(ax.figure)


def test_measure_copy_run_says_why_the_benchmark_did_not_run(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU: the script stops with code 2
    with pytest.raises(RuntimeError, match="exited with 2:\n.*needs an NVIDIA GPU"):
        report.measure_copy_run(tmp_path)


def test_strided_layout_text_spreads_a_warps_lanes_by_the_elements_each_thread_holds():
    layouts = [
        {
            "block": 1024,
            "num_warps": 4,
            "stride": 8,
            "target": "sm_90",
            "size_per_thread": 4,
            "loads": {"1": 8},
            "triton": "t",
        },
        {
            "block": 128,
            "num_warps": 4,
            "stride": 8,
            "target": "sm_90",
            "size_per_thread": 1,
            "loads": {"1": 1},
            "triton": "t",
        },
    ]
    text = report.strided_layout_text(layouts, strides=(2, 4, 8, 32))
    assert "BLOCK = 1024, 4 warps, stride 8, sm_90, Triton t: sizePerThread = [4]" in text
    assert "(8 scalar ld.global per thread)" in text
    rows = [ln.split() for ln in text.splitlines()[-8:]]
    # stride, layout, lanes apart (bytes), sectors, 128-byte lines, span (KiB), new sectors per instruction
    assert rows == [
        ["2", "[4]", "32", "32", "8", "1", "32", "0", "0", "0"],
        ["2", "[1]", "8", "8", "2", "0.25", "8"],
        ["4", "[4]", "64", "32", "16", "2", "32", "0", "32", "0"],
        ["4", "[1]", "16", "16", "4", "0.5", "16"],
        ["8", "[4]", "128", "32", "32", "4", "32", "32", "32", "32"],
        ["8", "[1]", "32", "32", "8", "1", "32"],
        ["32", "[4]", "512", "32", "32", "16", "32", "32", "32", "32"],
        ["32", "[1]", "128", "32", "32", "4", "32"],
    ]


def test_run_new_sectors_counts_what_each_instruction_of_a_run_adds():
    # lane t, instruction j reads byte (4 t + j) * 4 s: at s = 4 that is 64 t + 16 j
    assert report.run_new_sectors(4, 2) == [32, 0, 0, 0]
    assert report.run_new_sectors(4, 4) == [32, 0, 32, 0]
    assert report.run_new_sectors(4, 8) == [32, 32, 32, 32]
    assert report.run_new_sectors(1, 1) == [4]


def test_recorded_layout_text_reads_the_gpu_runs_compile_record(tmp_path):
    text = report.recorded_layout_text()
    assert "strided_read_kernel, BLOCK = 1024, 4 warps, 3 stages, fp32, stride 8" in text
    assert "Triton 3.6.0" in text and "s3" not in text
    assert "loads {'1': 8}, stores {'v4': 2}, 28 registers" in text
    assert report.recorded_layout_text(results_dir=tmp_path) == (
        "strided_read_kernel: no GPU run's compile record holds it"
    )


def test_strided_read_layouts_compiles_for_sm_90_without_a_gpu():
    pytest.importorskip("triton.backends.nvidia")
    layouts = report.strided_read_layouts(((1024, 4), (128, 4), (1024, 32)), stride=8)
    assert [(lay["size_per_thread"], lay["loads"], lay["stores"]) for lay in layouts] == [
        (4, {"1": 8}, {"v4": 2}),  # the stores' 16-byte vectors: a thread holds 4 consecutive outputs
        (1, {"1": 1}, {"1": 1}),
        (1, {"1": 1}, {"1": 1}),
    ]
    assert all(lay["one_layout"] for lay in layouts)  # the load and the store share one layout
    text = report.strided_layout_text(layouts[:1], strides=(8,))
    assert "sizePerThread = [4] (the load's and the store's), loads {'1': 8} (8 scalar" in text
    assert "per thread), stores {'v4': 2}" in text


def test_transpose_answer_text_gives_both_no_reuse_bounds_and_the_measured_share():
    run = {
        "meta": {"gpu": "G", "date": "2026-01-02T00:00"},
        "rows": [
            {"name": "torch copy", "bandwidth": 3.0e12},
            {"name": "torch transpose", "bandwidth": 1.0e12},
        ],
    }
    text = report.transpose_answer_text(4.8e12, run)
    assert text.startswith("134217728 bytes; tiled 28.0 us")
    assert "32-byte fetch: e = 0.125, 0.2222 of the copy, 125.8 us" in text
    assert "64-byte fetch: e = 0.0625, 0.1176 of the copy, 237.7 us" in text
    assert text.endswith("(G, 2026-01-02): 0.333 of the copy, 83.9 us")
    assert "measured" not in report.transpose_answer_text(4.8e12, None)


def test_cpu_identity_adds_family_and_model_where_cpuinfo_has_them(monkeypatch):
    from nbhelpers import device

    monkeypatch.setattr(device, "_cpuinfo", lambda: {"model name": "AMD EPYC", "cpu family": "26", "model": "2"})
    assert report.cpu_identity() == "AMD EPYC (family 26, model 2)"
    monkeypatch.setattr(device, "_cpuinfo", lambda: {"model name": "X"})
    assert report.cpu_identity() == "X"


def test_anon_huge_pages_sums_every_mapping_the_array_covers(tmp_path):
    import sys

    a = np.ones(2**22, dtype=np.float32)
    got = report.anon_huge_pages(a)
    if sys.platform.startswith("linux"):
        # at most the array's share of each mapping it spans, whole 2 MiB pages: two ends
        assert got is not None and got % (2 * 2**20) == 0 and 0 <= got <= a.nbytes + 4 * 2**20
    else:
        assert got is None
    # a mapping split at the first page boundary inside the array, as numpy's madvise leaves it
    base = a.__array_interface__["data"][0]
    page = (base // 4096 + 1) * 4096
    end = base + a.nbytes
    smaps = tmp_path / "smaps"
    smaps.write_text(
        f"{base - base % 4096:x}-{page:x} rw-p 00000000 00:00 0\nAnonHugePages:         0 kB\n"
        f"{page:x}-{end + 8192:x} rw-p 00000000 00:00 0\nAnonHugePages:     63488 kB\n"
        f"{end + 8192:x}-{end + 2**22:x} rw-p 00000000 00:00 0\nAnonHugePages:      2048 kB\n"
    )
    # the second mapping's 62 MiB capped at the array's 16 MiB in it; the third lies past it
    assert report.anon_huge_pages(a, str(smaps)) == a.nbytes
    smaps.write_text(
        f"{base - base % 4096:x}-{page:x} rw-p 00000000 00:00 0\nAnonHugePages:         0 kB\n"
        f"{page:x}-{end + 8192:x} rw-p 00000000 00:00 0\nAnonHugePages:      8192 kB\n"
    )
    assert report.anon_huge_pages(a, str(smaps)) == 8 * 2**20  # fewer than the array's share
    assert report.anon_huge_pages(a, str(tmp_path / "absent")) is None


def test_grid_text_lists_each_program_and_its_masked_lanes():
    text = report.grid_text(1000, 256)
    assert text.startswith("n = 1000, BLOCK = 256: cdiv(n, BLOCK) = 4 programs, 1024 lanes, 24 masked off")
    assert [ln.split() for ln in text.splitlines()[-4:]] == [
        ["0", "0..255", "256", "0"],
        ["1", "256..511", "256", "0"],
        ["2", "512..767", "256", "0"],
        ["3", "768..1023", "232", "24"],
    ]


def test_masked_lanes_text_tells_a_written_slot_and_the_allocators_padding():
    torch = pytest.importorskip("torch")
    x = torch.arange(1000, dtype=torch.float32) + 0.5
    out = torch.full((1024,), -1.0)
    out[:1000] = x
    text = report.masked_lanes_text(x, out)
    assert "out[:n] equals x bit for bit: True" in text
    assert "24 of 24 still -1 (nothing written)" in text
    assert "x: 4000 bytes; its block on a GPU: 4096 bytes, 24 float32 of padding past n" in text
    out[1010] = 3.0  # a masked lane that wrote
    assert "23 of 24 still -1" in report.masked_lanes_text(x, out)


def test_programs_answer_text_counts_programs_lanes_and_the_masked_tail():
    assert report.programs_answer_text(10**6, 1024) == "977 1000448 448 976 999424"
    assert report.programs_answer_text(1024, 1024) == "1 1024 0 0 0"


def test_inflight_answer_text_sets_the_need_against_the_resident_programs():
    from nbhelpers import perf_model

    text = report.inflight_answer_text(perf_model.H100_SXM, (0.5e-6, 1e-6), 18, block=256)
    assert text == (
        # decimal throughout: 0.84 MB / 132 = 6.3 KB; 16 x 1,024 bytes = 16.4 KB
        "H100 SXM: 3.35 TB/s, 132 SMs; reads 1.68 TB/s, 0.84-1.68 MB in flight, need 6.3-12.7 KB per SM; "
        "BLOCK = 256, 4 warps, 18 registers: 16 programs (bound by warps) of 1,024 bytes, 16.4 KB, "
        "1.3x-2.6x the need"
    )


def test_prediction_text_gives_each_patterns_share_of_the_peak():
    rows = [ln.rsplit(None, 3) for ln in report.prediction_text(4.8e12).splitlines()[2:]]
    got = {name.strip(): (e, f, gbs) for name, e, f, gbs in rows}
    assert got["copy (contiguous)"] == ("1.0000", "1.000", "4800")
    assert got["strided read, stride 2"] == ("0.5000", "0.667", "3200")
    assert got["strided read, stride 8"] == ("0.1250", "0.222", "1067")
    assert got["naive transpose, no reuse from L2"] == ("0.1250", "0.222", "1067")
    assert len(got) == 8


def test_sector_text_counts_each_patterns_sectors_and_the_two_odd_cases():
    text = report.sector_text(strides=(1, 2, 8, 32), row_elems=1024)
    rows = {ln.rsplit(None, 5)[0].strip(): ln.split()[-5:] for ln in text.splitlines()[2:6]}
    assert rows["contiguous"] == ["4", "128", "128", "1.0000", "1/1"]
    assert rows["stride 2"] == ["8", "128", "256", "0.5000", "1/2"]
    assert rows["stride 8"] == rows["stride 32"] == ["32", "128", "1024", "0.1250", "1/8"]
    assert "transposed (rows of 1024)" in text and "stride 3 " not in text
    assert "starting 16 bytes into a sector: 5 sectors, efficiency 0.80" in text
    assert "bf16 (2 bytes) at stride 16: 32 sectors for 64 useful bytes, efficiency 1/16" in text


def test_l2_fetch_text_flattens_where_each_fetch_size_holds_one_element():
    text = report.l2_fetch_text((1, 2, 4, 8, 16, 32, 64), (32, 64, 128))
    rows = {int(ln.split()[0]): ln.split()[1:] for ln in text.splitlines()[3:10]}
    assert rows[16] == ["1/8", "1/16", "1/16", "0.222", "0.118", "0.118"]
    assert rows[64] == ["1/8", "1/16", "1/32", "0.222", "0.118", "0.061"]
    assert " 32 B fetch: flat from stride 8, floor 1/8" in text
    assert " 64 B fetch: flat from stride 16, floor 1/16" in text
    assert "128 B fetch: flat from stride 32, floor 1/32" in text
    assert "128 B fetch: not flat at these strides" in report.l2_fetch_text((1, 2, 4), (128,))


def test_copy_inflight_sets_the_resident_programs_loads_against_the_need():
    compiled = {
        "meta": {"triton": "9.9", "date": "2026-01-02T00:00:00"},
        "rows": [
            {
                "kernel": "copy_kernel",
                "target": "sm_80",
                "config": "1024 w4",
                "registers": 255,
                "num_warps": 4,
                "shared": 0,
            },
            {
                "kernel": "copy_kernel",
                "target": "sm_90",
                "config": "1024 w4",
                "registers": 18,
                "num_warps": 4,
                "shared": 0,
            },
        ],
    }
    need = (9.1e3, 18.2e3)  # bytes per SM at 0.5 and 1 us
    got = report.copy_inflight(compiled, need, 4.8e12, (0.5e-6, 1e-6), 132)
    assert got["blocks"] == 16 and got["block_bytes"] == 4096 and got["row"]["registers"] == 18
    assert "18 registers (Triton 9.9, 2026-01-02" in got["text"]
    assert "4,096 bytes each: 65.5 KB in flight per SM, 3.6x to 7.2x the need" in got["text"]
    # 4096 B x 132 SMs / 1 us = 0.54 TB/s read, twice that copied, 23% of 4.8 TB/s
    assert "would read 0.54-1.08 TB/s, a copy of 1.08-2.16 TB/s: 23%-45% of the peak" in got["text"]
    with pytest.raises(ValueError, match="no copy_kernel row for sm_90"):
        report.copy_inflight(
            {"meta": compiled["meta"], "rows": compiled["rows"][:1]}, need, 4.8e12, (0.5e-6, 1e-6), 132
        )


def test_launch_predictions_text_splits_the_copy_into_its_bound_and_the_launch():
    from nbhelpers import perf_model

    text = report.launch_predictions_text(perf_model.H200, 2**27, 16, 4096, (0.5e-6, 1e-6))
    copy_line, one_line = text.splitlines()
    # 2^30 bytes / 4.8 TB/s = 223.7 us, + 5 us = 228.7 us: 4.70 TB/s, latency-proof
    assert copy_line == (
        "perf_model, copy_kernel: 4.70 TB/s predicted, bound by HBM (1 GiB: 223.7 us by HBM + 5 us launch = 228.7 us)"
    )
    assert one_line == "perf_model, one program per SM: 1.08-2.14 TB/s predicted, bound by dependent steps"


def test_copy_widths_text_compiles_the_copy_for_two_lengths():
    pytest.importorskip("triton.backends.nvidia")
    lines = report.copy_widths_text((2**20, 1000), jobs=1).splitlines()
    assert lines[0].startswith("copy_kernel, BLOCK = 1024, 4 warps, sm_90, Triton ")
    assert lines[1:] == [
        "  n = 1,048,576: loads {'v4': 2}, stores {'v4': 2}",  # n divisible by 16: vector loads
        "      n = 1,000: loads {'1': 8}, stores {'1': 8}",
    ]
