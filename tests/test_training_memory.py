"""nbhelpers.training_memory: bytes per parameter of the training recipes, by hand."""

import pytest

from nbhelpers.training_memory import MEMORY_RECIPES, MemoryRecipe, bytes_per_parameter


def test_memory_recipes():
    assert bytes_per_parameter(MEMORY_RECIPES["bf16 + fp32 master, fp32 Adam"]) == 16
    assert bytes_per_parameter(MEMORY_RECIPES["fp32 weights, fp32 Adam"]) == 16
    assert bytes_per_parameter(MEMORY_RECIPES["fp8 weights + fp32 master, fp32 Adam"]) == 15
    assert bytes_per_parameter(MEMORY_RECIPES["bf16 + fp32 master, 8-bit Adam"]) == 10 + 2 * 4 / 2048
    assert MemoryRecipe("x").breakdown() == {
        "weights": 2,
        "gradients": 2,
        "master": 4,
        "adam m": 4,
        "adam v": 4,
        "compensation": 0,
    }
    with pytest.raises(ValueError):
        MemoryRecipe("bad", weights="fp12")


def test_decay_rounded_away_by_brute_force_and_bounds():
    import ml_dtypes
    import numpy as np

    from nbhelpers.training import decay_rounded_away

    # bf16 by an independent count: every positive normal bf16 through ml_dtypes' own rounding
    v = np.arange(0x0080, 0x7F80, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    for beta, want in ((0.9, 0.0), (0.99, 0.0), (0.999, 1.0), (1 - 3 * 2.0**-10, None)):
        got = decay_rounded_away("bf16", beta)
        # beta * v in float64 is exact enough: float64 keeps 53 bits, bf16 8 (a product of 8 and
        # 53 bits rounded to 53 bits cannot cross a bf16 midpoint, which is short)
        count = float(np.mean((beta * v).astype(ml_dtypes.bfloat16).astype(np.float64) == v))
        assert got == count
        if want is not None:
            assert got == want
    assert 0 < decay_rounded_away("bf16", 1 - 3 * 2.0**-10) < 1  # lost in the lower third of each binade only
    assert decay_rounded_away("fp16", 0.999) == 0.0  # 11 bits: 0.001 > 2**-10, just
    assert decay_rounded_away("fp32", 0.999) == 0.0 and decay_rounded_away("fp32", 1 - 2.0**-30) == 1.0
    with pytest.raises(ValueError, match="half gaps"):
        decay_rounded_away("fp32", 1 - 2.0**-24.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        decay_rounded_away("bf16", 1.0)


def test_caveats_name_the_moment_that_stops_decaying():
    from nbhelpers.training import recipe_caveats

    r = MemoryRecipe("bf16 Adam, round to nearest", master=None, adam_m="bf16", adam_v="bf16")
    (caveat,) = recipe_caveats(r)  # m (beta 0.9) decays; v (0.999) does not
    assert caveat.startswith("adam v in bf16: 0.999 * v rounds back to v for 100%")
    sr = MemoryRecipe("sr", master=None, adam_m="bf16", adam_v="bf16", state_rounding="stochastic")
    assert recipe_caveats(sr) == []
    assert all(recipe_caveats(r) == [] for r in MEMORY_RECIPES.values())  # the table's rows hold what they say
    with pytest.raises(ValueError, match="state_rounding"):
        MemoryRecipe("bad", state_rounding="up")
