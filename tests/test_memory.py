"""nbhelpers.memory: bytes per parameter of the training recipes, by hand."""
import pytest

from nbhelpers.memory import MEMORY_RECIPES, MemoryRecipe, bytes_per_parameter


def test_memory_recipes():
    assert bytes_per_parameter(MEMORY_RECIPES["bf16 + fp32 master, fp32 Adam"]) == 16
    assert bytes_per_parameter(MEMORY_RECIPES["fp32 weights, fp32 Adam"]) == 16
    assert bytes_per_parameter(MEMORY_RECIPES["fp8 weights + fp32 master, fp32 Adam"]) == 15
    assert bytes_per_parameter(MEMORY_RECIPES["bf16 + fp32 master, 8-bit Adam"]) == 10 + 2 * 4 / 2048
    assert MemoryRecipe("x").breakdown() == {"weights": 2, "gradients": 2, "master": 4, "adam m": 4,
                                             "adam v": 4, "compensation": 0}
    with pytest.raises(ValueError):
        MemoryRecipe("bad", weights="fp12")
