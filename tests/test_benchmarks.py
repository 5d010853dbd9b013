"""nbhelpers.benchmarks: the results file that is rewritten after every row, and the sweep that
fills it, so that a benchmark which fails halfway keeps what it measured."""
import json

import pytest

from nbhelpers.benchmarks import ResultsFile, best_time, sweep


def read(path):
    return json.loads(path.read_text())


def test_best_time():
    assert best_time(lambda: None, 3) >= 0
    with pytest.raises(ValueError, match="repeats"):
        best_time(lambda: None, 0)


def test_results_file_is_written_after_every_row_and_completed_by_finish(tmp_path):
    path = tmp_path / "sub" / "r.json"
    res = ResultsFile(path, {"gpu": "Test GPU"})
    assert not path.exists()  # nothing measured, nothing written
    res.add({"x": 1})
    assert read(path) == {"meta": {"gpu": "Test GPU", "complete": False}, "rows": [{"x": 1}]}
    res.add({"x": 2})
    assert [r["x"] for r in read(path)["rows"]] == [1, 2] and not list(tmp_path.glob("sub/*.partial"))
    res.finish(rows=[{"x": 1, "y": 10}, {"x": 2, "y": 20}], best="x=2")
    data = read(path)
    assert data["meta"]["complete"] is True and data["best"] == "x=2" and data["rows"][1] == {"x": 2, "y": 20}
    assert list(data) == ["meta", "best", "rows"]


def test_results_file_refuses_bad_input(tmp_path):
    with pytest.raises(TypeError, match="meta must be a dict"):
        ResultsFile(tmp_path / "r.json", ["gpu"])
    res = ResultsFile(tmp_path / "r.json", {})
    with pytest.raises(TypeError, match="a row must be a dict"):
        res.add([1, 2])
    with pytest.raises(ValueError, match="cannot replace meta"):
        res.finish(meta={})
    assert res.finish() == tmp_path / "r.json" and read(tmp_path / "r.json")["rows"] == []


def test_a_sweep_that_fails_on_the_third_case_keeps_the_first_two(tmp_path):
    """The timer raises on the third shape, as a GPU error or a killed run would: the sweep stops
    with the error, and the file holds the two rows measured before it, marked incomplete."""
    calls = []

    def timer(shape):
        calls.append(shape)
        if len(calls) == 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return 1.0

    def measure(shape):
        yield {"shape": shape, "ms": timer(shape)}

    res = ResultsFile(tmp_path / "r.json", {"gpu": "Test GPU"})
    with pytest.raises(RuntimeError, match="illegal memory access"):
        sweep([1, 2, 3, 4], measure, res)
    data = read(tmp_path / "r.json")
    assert [r["shape"] for r in data["rows"]] == [1, 2] and data["meta"]["complete"] is False
