"""The MPI test harness itself (tests/conftest.py): a failing inner case is named in the
failure, and a run in which no case ran fails."""

import pytest

FAILING = '''
import pytest
from helpers import WORLD, assert_everywhere


@pytest.mark.parametrize("n", [1, 2])
def test_fine(n):
    assert_everywhere(WORLD, n > 0, "not positive")


@pytest.mark.parametrize("case", ["good", "bad one"])
def test_only_good(case):
    assert_everywhere(WORLD, case == "good", f"{case} is not good")
'''


@pytest.fixture
def cases(tmp_path):
    path = tmp_path / "harness_cases.py"
    path.write_text(FAILING)
    return path


def test_a_failing_inner_case_is_named(run_cases, cases):
    with pytest.raises(pytest.fail.Exception) as failure:
        run_cases(cases, 2, timeout=60)
    headline, _, rest = str(failure.value).partition("\n")
    assert "1 inner case failed" in headline
    assert "harness_cases.py::test_only_good[bad one]" in headline
    assert "test_fine" not in headline  # only the failing case is named
    assert "bad one is not good (on ranks [0, 1])" in rest  # then the inner traceback


def test_passing_cases_return_the_output(run_cases, cases):
    out = run_cases(cases, 2, select="test_fine", timeout=60)
    assert "2 passed" in out


def test_a_selection_matching_nothing_fails(run_cases, cases):
    with pytest.raises(pytest.fail.Exception, match="no inner case ran"):
        run_cases(cases, 2, select="no_such_case", timeout=60)
