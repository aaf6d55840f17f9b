"""Merge math of budget maintenance (DESIGN.md section 4), checked from first principles.

Merging (x1, a1) and (x2, a2) (same sign) into (z, a_z) with z = h x1 + (1 - h) x2 and
a_z = a1 k(x1, z) + a2 k(x2, z) leaves the feature-space error
|a1 phi(x1) + a2 phi(x2) - a_z phi(z)|^2 = (a1 + a2)^2 wd(m, kappa), m = a1 / (a1 + a2).
"""

from __future__ import annotations

import numpy as np
import pytest
from budgetsvm.merging import METHODS, merge_search
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

E_MINUS_2 = np.exp(-2.0)

unit = st.floats(0.0, 1.0, allow_nan=False)
# kappa spread over many orders of magnitude: kappa = exp(-t), t up to 60, plus 0 and 1.
kappas = st.one_of(
    unit,
    st.floats(0.0, 60.0).map(lambda t: float(np.exp(-t))),
    st.sampled_from([0.0, 1.0, E_MINUS_2]),
)
# m near the jump of h at m = 1/2 (paper 000 Lemma 1) as well as anywhere.
ms = st.one_of(unit, st.floats(0.49, 0.51), st.sampled_from([0.0, 0.5, 1.0]))


def s_of(h, m, kappa):
    return m * kappa ** ((1.0 - h) ** 2) + (1.0 - m) * kappa ** (h**2)


def wd_of(h, m, kappa):
    return m**2 + (1.0 - m) ** 2 + 2.0 * m * (1.0 - m) * kappa - s_of(h, m, kappa) ** 2


def k(a, b, gamma):
    return float(np.exp(-gamma * np.sum((np.asarray(a) - np.asarray(b)) ** 2)))


def explicit_error(x1, x2, a1, a2, h, gamma):
    """|a1 phi(x1) + a2 phi(x2) - a_z phi(z)|^2 through kernel values, z = h x1 + (1 - h) x2."""
    z = h * x1 + (1.0 - h) * x2
    k1z, k2z, k12 = k(x1, z, gamma), k(x2, z, gamma), k(x1, x2, gamma)
    a_z = a1 * k1z + a2 * k2z
    return (
        a1 * a1
        + a2 * a2
        + a_z * a_z
        + 2.0 * a1 * a2 * k12
        - 2.0 * a1 * a_z * k1z
        - 2.0 * a2 * a_z * k2z
    )


@st.composite
def merge_pairs(draw):
    d = draw(st.integers(1, 5))
    coords = st.floats(-2.0, 2.0, allow_nan=False)
    x1 = np.array(draw(st.lists(coords, min_size=d, max_size=d)))
    x2 = np.array(draw(st.lists(coords, min_size=d, max_size=d)))
    gamma = draw(st.floats(1e-2, 10.0))
    mags = st.floats(1e-3, 1e3)
    sign = draw(st.sampled_from([1.0, -1.0]))
    a1, a2 = sign * draw(mags), sign * draw(mags)
    return x1, x2, gamma, a1, a2


# --- (a) the normalised WD is the feature-space error of the explicit merge ---------------------


@given(merge_pairs())
def test_wd_is_feature_space_error_of_explicit_merge(pair):
    x1, x2, gamma, a1, a2 = pair
    kappa = k(x1, x2, gamma)
    m = a1 / (a1 + a2)
    h, wd = merge_search(m, kappa, "gss-precise")
    h, wd = float(h), float(wd)
    assert 0.0 <= h <= 1.0
    # The closed forms k(x1, z) = kappa^((1-h)^2), k(x2, z) = kappa^(h^2) behind the formula.
    z = h * x1 + (1.0 - h) * x2
    assert_allclose(k(x1, z, gamma), kappa ** ((1.0 - h) ** 2), rtol=1e-9, atol=1e-300)
    assert_allclose(k(x2, z, gamma), kappa ** (h**2), rtol=1e-9, atol=1e-300)
    scale = (a1 + a2) ** 2
    err = explicit_error(x1, x2, a1, a2, h, gamma)
    assert err >= -1e-12 * scale
    assert abs(wd * scale - err) <= 1e-10 * scale
    # The optimal merge loses no more than merging onto either endpoint.
    for h_end in (0.0, 1.0):
        assert err <= explicit_error(x1, x2, a1, a2, h_end, gamma) + 1e-10 * scale


def test_swapped_m_of_paper_000_disagrees():
    # Paper 000 Algorithm 1 uses m = a2 / (a1 + a2) but still builds z = h x1 + (1 - h) x2.
    # With unequal coefficients that z is the wrong point: the true error of the merge is not
    # the reported WD, and it is worse than the merge with m = a1 / (a1 + a2).
    x1, x2, gamma = np.array([0.0, 0.0]), np.array([1.0, 0.5]), 0.8
    a1, a2 = 1.0, 3.0
    kappa = k(x1, x2, gamma)
    scale = (a1 + a2) ** 2

    h, wd = (float(v) for v in merge_search(a1 / (a1 + a2), kappa, "gss-precise"))
    right = explicit_error(x1, x2, a1, a2, h, gamma)
    assert_allclose(right, wd * scale, rtol=1e-10)

    h_bad, wd_bad = (float(v) for v in merge_search(a2 / (a1 + a2), kappa, "gss-precise"))
    wrong = explicit_error(x1, x2, a1, a2, h_bad, gamma)
    assert abs(wrong - wd_bad * scale) > 0.01 * scale
    assert wrong > right + 0.01 * scale
    # Lemma 1's slip: (a1 + a2) in place of (a1 + a2)^2 is off by the factor a1 + a2.
    assert abs(wd * (a1 + a2) - right) > 0.01 * scale


@given(merge_pairs())
def test_swapped_m_never_better(pair):
    x1, x2, gamma, a1, a2 = pair
    kappa = k(x1, x2, gamma)
    h, _ = merge_search(a1 / (a1 + a2), kappa, "gss-precise")
    h_bad, _ = merge_search(a2 / (a1 + a2), kappa, "gss-precise")
    scale = (a1 + a2) ** 2
    right = explicit_error(x1, x2, a1, a2, float(h), gamma)
    wrong = explicit_error(x1, x2, a1, a2, float(h_bad), gamma)
    assert right <= wrong + 1e-10 * scale


# --- (b) gss-precise finds the global maximum of s(h) -------------------------------------------

GRID = np.linspace(0.0, 1.0, 20001)


@given(st.lists(st.tuples(ms, kappas), min_size=1, max_size=40))
def test_gss_precise_is_global_maximiser(pairs):
    m, kappa = (np.array(v, dtype=np.float64) for v in zip(*pairs))
    h, wd = merge_search(m, kappa, "gss-precise")
    assert np.all((h >= 0.0) & (h <= 1.0))
    s_grid = s_of(GRID[None, :], m[:, None], kappa[:, None]).max(axis=1)
    assert np.all(s_of(h, m, kappa) >= s_grid - 1e-9)
    # Its wd is the formula at its h, non-negative, and no worse than merging onto an endpoint:
    # WD(h=0) = m^2 (1 - kappa^2), WD(h=1) = (1 - m)^2 (1 - kappa^2).
    assert_allclose(wd, wd_of(h, m, kappa), rtol=0, atol=1e-12)
    assert np.all(wd >= -1e-15)
    bound = np.minimum(m, 1.0 - m) ** 2 * (1.0 - kappa**2)
    assert np.all(wd <= bound + 1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_known_values(method):
    # kappa = 1: identical points, nothing lost. m in {0, 1}: one coefficient is 0, nothing lost.
    # kappa = 0: orthogonal points, the merge keeps the larger one: WD = min(m, 1 - m)^2.
    m = np.array([0.5, 0.2, 0.0, 1.0, 0.0, 1.0, 0.3, 0.5])
    kappa = np.array([1.0, 1.0, 0.4, 0.4, 0.0, 0.0, 0.0, 0.0])
    expected = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.09, 0.25])
    _, wd = merge_search(m, kappa, method)
    atol = 1e-3 if method == "gss" else 1e-5
    assert_allclose(wd, expected, rtol=0, atol=atol)
    _, wd = merge_search(m, kappa, "gss-precise")
    assert_allclose(wd, expected, rtol=0, atol=1e-12)


# --- (c) lookup and coarse GSS against gss-precise ----------------------------------------------


@given(st.lists(st.tuples(ms, kappas), min_size=1, max_size=60))
def test_lookup_and_gss_against_precise(pairs):
    m, kappa = (np.array(v, dtype=np.float64) for v in zip(*pairs))
    _, wd_p = merge_search(m, kappa, "gss-precise")
    smooth = kappa > E_MINUS_2  # where h(m, kappa) is continuous
    for method in ("lookup-h", "lookup-wd"):
        h, wd = merge_search(m, kappa, method)
        assert np.all((h >= 0.0) & (h <= 1.0))
        assert np.all(np.abs(wd - wd_p)[smooth] < 5e-5), method
        # The looked-up h itself is nearly optimal: merging at it loses < 1e-5 more.
        loss = wd_of(h, m, kappa) - wd_p
        assert np.all(loss[smooth] < 1e-5), method
        assert np.all(loss > -1e-12), method
        # And within 1e-3 of the optimum everywhere, also across the jump of h at m = 1/2.
        assert np.all(np.abs(wd - wd_p) < 1e-3), method
        assert np.all(loss < 1e-3), method
    # lookup-h computes its WD by the formula at its h: it can never beat the optimum.
    h, wd = merge_search(m, kappa, "lookup-h")
    assert_allclose(wd, wd_of(h, m, kappa), rtol=0, atol=1e-12)
    assert np.all(wd >= wd_p - 1e-12)

    h, wd = merge_search(m, kappa, "gss")
    assert_allclose(wd, wd_of(h, m, kappa), rtol=0, atol=1e-12)
    assert np.all(wd >= wd_p - 1e-12)
    # GSS to 0.01 in h loses about |ln kappa| * 1e-4 of s, so 1e-3 holds for kappa >= 1e-6 (below
    # that kappa^(h^2) is so steep near h = 0 that a step of 0.003 in h already costs more).
    moderate = kappa >= 1e-6
    assert np.all(np.abs(wd - wd_p)[moderate] < 1e-3)


# --- (d) custom table size ----------------------------------------------------------------------


def test_small_table_works_and_is_less_accurate():
    rng = np.random.default_rng(5)
    m = rng.uniform(0.0, 1.0, 4000)
    kappa = rng.uniform(0.0, 1.0, 4000)
    _, wd_p = merge_search(m, kappa, "gss-precise")
    for method in ("lookup-h", "lookup-wd"):
        errors = {}
        for size in (50, 400):
            h, wd = merge_search(m, kappa, method, table_size=size)
            assert h.shape == wd.shape == m.shape
            assert np.all((h >= 0.0) & (h <= 1.0))
            assert np.all(np.isfinite(wd))
            errors[size] = np.mean(np.abs(wd - wd_p))
        assert errors[50] > errors[400], (method, errors)
        assert errors[50] < 1e-2, (method, errors)
    # The default size is 400.
    assert_array_equal(
        merge_search(m, kappa, "lookup-wd")[1], merge_search(m, kappa, "lookup-wd", 400)[1]
    )


def test_table_size_two_is_the_smallest():
    h, wd = merge_search([0.3, 0.7], [0.5, 0.9], "lookup-wd", table_size=2)
    assert np.all(np.isfinite(h)) and np.all(np.isfinite(wd))


@pytest.mark.parametrize("method", ["gss", "gss-precise"])
def test_table_size_irrelevant_to_gss(method):
    m, kappa = np.array([0.1, 0.4, 0.8]), np.array([0.2, 0.6, 0.95])
    a = merge_search(m, kappa, method)
    b = merge_search(m, kappa, method, table_size=50)
    assert_array_equal(a[0], b[0])
    assert_array_equal(a[1], b[1])


# --- (e) bad input and broadcasting -------------------------------------------------------------


@pytest.mark.parametrize(
    "m, kappa",
    [
        (-0.1, 0.5),
        (1.1, 0.5),
        (0.5, -1e-9),
        (0.5, 1.5),
        (np.nan, 0.5),
        (0.5, np.nan),
        (np.inf, 0.5),
        (0.5, -np.inf),
        ([0.2, 2.0], [0.5, 0.5]),
    ],
)
@pytest.mark.parametrize("method", METHODS)
def test_out_of_range_rejected(m, kappa, method):
    with pytest.raises(ValueError, match="m|kappa"):
        merge_search(m, kappa, method)


def test_unknown_method_rejected():
    with pytest.raises(ValueError, match="method"):
        merge_search(0.5, 0.5, "bisection")


@pytest.mark.parametrize("table_size", [1, 0, -5, 2.5, True, "400"])
def test_bad_table_size_rejected(table_size):
    with pytest.raises(ValueError, match="table_size"):
        merge_search(0.5, 0.5, "lookup-wd", table_size=table_size)


def test_shapes_broadcast():
    h, wd = merge_search(0.3, 0.5, "lookup-h")
    assert h.shape == wd.shape == ()
    h, wd = merge_search(0.3, [0.1, 0.5, 0.9], "gss")
    assert h.shape == wd.shape == (3,)
    m = np.array([[0.1], [0.5]])
    kappa = np.array([0.2, 0.4, 0.6])
    h, wd = merge_search(m, kappa, "gss-precise")
    assert h.shape == wd.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            hij, wdij = merge_search(m[i, 0], kappa[j], "gss-precise")
            assert h[i, j] == hij and wd[i, j] == wdij
    h, wd = merge_search([], [], "lookup-wd")
    assert h.shape == wd.shape == (0,)
    with pytest.raises(ValueError):
        merge_search([0.1, 0.2], [0.1, 0.2, 0.3], "gss")


def test_inputs_not_modified_and_non_contiguous():
    rng = np.random.default_rng(6)
    m = rng.uniform(size=(5, 4))
    kappa = rng.uniform(size=(5, 4))
    m_saved, kappa_saved = m.copy(), kappa.copy()
    h, wd = merge_search(m.T, kappa.T, "gss-precise")  # Fortran-ordered views
    assert_array_equal(m, m_saved)
    assert_array_equal(kappa, kappa_saved)
    h2, wd2 = merge_search(np.ascontiguousarray(m.T), np.ascontiguousarray(kappa.T), "gss-precise")
    assert_array_equal(h, h2)
    assert_array_equal(wd, wd2)


@given(ms, kappas)
def test_methods_agree_on_scalar(m, kappa):
    _, wd_p = merge_search(m, kappa, "gss-precise")
    for method in ("lookup-h", "lookup-wd", "gss"):
        if method == "gss" and kappa < 1e-6:
            continue  # see test_lookup_and_gss_against_precise
        _, wd = merge_search(m, kappa, method)
        assert abs(float(wd) - float(wd_p)) < 1e-3, method
