"""Every estimator under any parameter values a user can type: a fit returns a model (scikit-
learn's model where scikit-learn has the estimator) or raises ValueError / TypeError naming the
parameter. Each parameter's domain is written here from the documentation, independently of
the checks in the package, and hypothesis draws values inside and outside it: 0, negatives,
integers beyond 64 bits and beyond float64, nan, infinities, bools, strings, None and numpy
scalars."""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Callable, Dict

import numpy as np
import pytest
from budgetsvm import (
    BudgetSVC,
    BudgetSVR,
    KernelNuSVC,
    KernelNuSVR,
    KernelOneClassSVM,
    KernelSVC,
    KernelSVR,
)
from conftest import xor_data
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC, SVR, NuSVC, NuSVR, OneClassSVM

# Values a hostile user tries, for every parameter.
EDGES = [0, -1, 1, 2, 0.5, -0.0, 1e300, 1e-300, 2**63, 2**64, 2**70, 2**2000, math.nan,
         math.inf, -math.inf, True, False, "1", "scale", None, np.int64(3), np.uint64(2**63),
         np.float32(0.25), np.float64(math.nan), np.bool_(True)]


def _real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _float(v: Any) -> float:
    try:
        return float(v)
    except OverflowError:
        return math.inf


def positive_finite(v: Any) -> bool:
    return _real(v) and math.isfinite(_float(v)) and _float(v) > 0


def positive(v: Any) -> bool:  # inf allowed: the exact machines' hard margin
    return _real(v) and not math.isnan(_float(v)) and _float(v) > 0


def nonnegative_finite(v: Any) -> bool:
    return _real(v) and math.isfinite(_float(v)) and _float(v) >= 0


def unit_interval(v: Any) -> bool:  # (0, 1]
    return _real(v) and 0 < _float(v) <= 1


def integer(minimum: int) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        return (isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
                and minimum <= int(v) < 2**63)
    return check


def gamma(v: Any) -> bool:
    return v in ("scale", "auto") if isinstance(v, str) else positive_finite(v)


# Each estimator: its parameters' domains and the values of an ordinary fit, which scikit-
# learn's counterpart (if any) must match.
BUDGETED = dict(C=(positive_finite, [0.5, 4.0]), gamma=(gamma, ["scale", 1.0]),
                budget=(integer(2), [5, 30]), epochs=(integer(1), [1, 2]),
                polish_tol=(nonnegative_finite, [1e-5]),
                polish_max_iter=(integer(1), [50]))
EXACT = dict(gamma=(gamma, ["scale", 0.5, 2.0]), tol=(positive_finite, [1e-3]),
             cache_size=(positive_finite, [200, 1.0]), coef0=(_finite := lambda v: _real(v)
                                                             and math.isfinite(_float(v)), [0.0]),
             max_iter=(lambda v: integer(1)(v) or (integer(-1)(v) and int(v) == -1), [-1]))
ESTIMATORS: Dict[str, tuple] = {
    "BudgetSVC": (BudgetSVC, None, dict(BUDGETED)),
    "BudgetSVR": (BudgetSVR, None, dict(BUDGETED, epsilon=(nonnegative_finite, [0.1]))),
    "KernelSVC": (KernelSVC, SVC, dict(EXACT, C=(positive, [0.5, 10.0]))),
    "KernelSVR": (KernelSVR, SVR, dict(EXACT, C=(positive, [1.0, 10.0]),
                                       epsilon=(nonnegative_finite, [0.05, 0.2]))),
    "KernelNuSVC": (KernelNuSVC, NuSVC, dict(EXACT, nu=(unit_interval, [0.3, 0.5]))),
    "KernelNuSVR": (KernelNuSVR, NuSVR, dict(EXACT, C=(positive_finite, [1.0, 10.0]),
                                             nu=(unit_interval, [0.3, 0.6]))),
    "KernelOneClassSVM": (KernelOneClassSVM, OneClassSVM,
                          dict(EXACT, nu=(unit_interval, [0.2, 0.5]))),
}


def data(name: str):
    X, y = xor_data(60, 17)
    if name.endswith("SVR"):
        y = np.sin(3 * X[:, 0]) + X[:, 1]
    return X, y


def fit(estimator: Any, name: str) -> Any:
    X, y = data(name)
    return estimator.fit(X) if name == "KernelOneClassSVM" else estimator.fit(X, y)


def outputs(model: Any, name: str) -> np.ndarray:
    X, _ = data(name)
    return model.predict(X) if name.endswith("SVR") else model.decision_function(X)


@st.composite
def settings_of(draw, name: str):
    """Parameter values, each an ordinary value or (at most two of them) a hostile one."""
    spec = ESTIMATORS[name][2]
    params = {p: draw(st.sampled_from(good)) for p, (_, good) in spec.items()}
    for p in draw(st.lists(st.sampled_from(sorted(spec)), max_size=2, unique=True)):
        params[p] = draw(st.sampled_from(EDGES))
    return params


def check_one(name: str, params: dict) -> None:
    make, counterpart, spec = ESTIMATORS[name]
    bad = sorted(p for p, v in params.items() if not spec[p][0](v))
    ordinary = all(any(v is g or v == g for g in spec[p][1]) for p, v in params.items())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            model = fit(make(**params), name)
        except (ValueError, TypeError) as e:
            message = str(e)
            if bad:
                assert any(p in message for p in bad), (params, message)
                return
            # A value inside the domain may still be unusable for these rows (gamma=1e300
            # underflows every kernel value): the error names a parameter all the same.
            assert not ordinary, (params, message)
            assert any(p in message for p in params), (params, message)
            return
    assert not bad, f"{name} accepted {bad} of {params}"
    values = outputs(model, name)
    assert np.all(np.isfinite(values)), params
    if counterpart is None or not ordinary:
        return
    sk_params = {p: v for p, v in params.items() if p not in ("cache_size",)}
    sk_params.update(tol=1e-6, max_iter=-1) if "tol" in sk_params else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = fit(counterpart(**sk_params), name)
        ours = fit(make(**dict(params, tol=1e-6)), name)
    expected, got = outputs(reference, name), outputs(ours, name)
    scale = max(1.0, float(np.max(np.abs(expected))))
    assert np.max(np.abs(got - expected)) <= 2e-3 * scale, (params, np.max(np.abs(got - expected)))


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_any_parameter_values_give_a_model_or_an_error_naming_the_parameter(name):
    @settings(max_examples=60)
    @given(settings_of(name))
    def check(params):
        check_one(name, params)

    check()


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_hostile_value_of_every_parameter(name):
    # Exhaustively, one parameter at a time, beside hypothesis's mixtures above.
    spec = ESTIMATORS[name][2]
    ordinary = {p: good[0] for p, (_, good) in spec.items()}
    for p in sorted(spec):
        for value in EDGES:
            check_one(name, dict(ordinary, **{p: value}))
