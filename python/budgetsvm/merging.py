"""Merge math of budget maintenance, vectorised for research use.

Merging support vectors (x1, a1) and (x2, a2) of the same sign replaces them by
z = h x1 + (1 - h) x2 with coefficient a_z = a1 kappa^((1-h)^2) + a2 kappa^(h^2), where
kappa = k(x1, x2) and m = a1 / (a1 + a2). The squared feature-space error of the merge is
(a1 + a2)^2 * wd(m, kappa, h); the best h maximises s(h) = m kappa^((1-h)^2) + (1-m) kappa^(h^2).

Methods (plug-in replacements for each other):

``gss``         golden section search on h to precision 0.01 (the reference BSGD setting)
``gss-precise`` the same to precision 1e-10
``lookup-h``    h from a precomputed table (bilinear interpolation), WD from the formula
``lookup-wd``   WD interpolated directly from a table; h looked up for the chosen pair only
"""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from budgetsvm import _budgetsvm

METHODS = ("gss", "gss-precise", "lookup-h", "lookup-wd")
DEFAULT_TABLE_SIZE: int = _budgetsvm.DEFAULT_TABLE_SIZE


def merge_search(
    m: Any, kappa: Any, method: str = "lookup-wd", table_size: int = DEFAULT_TABLE_SIZE
) -> Tuple[np.ndarray, np.ndarray]:
    """Optimal merge coefficient ``h`` and normalised weight degradation ``wd`` for each (m, kappa).

    Parameters
    ----------
    m, kappa : array-like of float in [0, 1], broadcast against each other
    method : one of ``gss``, ``gss-precise``, ``lookup-h``, ``lookup-wd``
    table_size : grid size n of the n x n lookup tables (400 as in paper 000)

    Returns
    -------
    h, wd : arrays of the broadcast shape

    Examples
    --------
    >>> from budgetsvm.merging import merge_search
    >>> h, wd = merge_search([0.5], [1.0], "gss-precise")
    >>> float(h[0]), float(wd[0])
    (0.5, 0.0)
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    m_arr, k_arr = np.broadcast_arrays(
        np.asarray(m, dtype=np.float64), np.asarray(kappa, dtype=np.float64)
    )
    if not (np.all(np.isfinite(m_arr)) and np.all(np.isfinite(k_arr))):
        raise ValueError("m and kappa must be finite")
    if (
        isinstance(table_size, bool)
        or not isinstance(table_size, (int, np.integer))
        or table_size < 2
    ):
        raise ValueError(f"table_size must be an integer >= 2, got {table_size!r}")
    shape = m_arr.shape
    h, wd = _budgetsvm.merge_search(
        np.ascontiguousarray(m_arr.ravel()),
        np.ascontiguousarray(k_arr.ravel()),
        method,
        int(table_size),
    )
    return h.reshape(shape), wd.reshape(shape)
