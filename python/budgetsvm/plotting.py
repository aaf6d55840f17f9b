"""Curves of training histories: the figures of paper 002 (objectives, test accuracy, merge
fraction), against epochs or against seconds.

Needs matplotlib (``pip install "budgetsvm[plot]"``). Each history is the ``history_`` of an
estimator fitted with ``record_history=True``.

>>> from budgetsvm import BudgetSVC
>>> from budgetsvm.plotting import plot_histories
>>> fits = {s: BudgetSVC(solver=s, record_history=True).fit(X, y, eval_set=(Xt, yt))
...         for s in ("bsgd", "bsca")}                                      # doctest: +SKIP
>>> fig = plot_histories({s: f.history_ for s, f in fits.items()})       # doctest: +SKIP
>>> fig.savefig("curves.png")                                            # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

PANELS = {
    "objective": "objective (C-form)",
    "val_accuracy": "test accuracy",
    "maintenance_fraction": "merge fraction",
}
X_AXES = {"epoch": "epoch", "seconds": "training seconds"}


def plot_histories(
    histories: Mapping[str, Mapping[str, Sequence[float]]],
    against: str = "epoch",
    panels: Sequence[str] = ("objective", "val_accuracy", "maintenance_fraction"),
    axes: Optional[Sequence[Any]] = None,
    title: Optional[str] = None,
) -> Any:
    """Draws one panel per quantity, one line (or pair of lines) per history.

    Parameters
    ----------
    histories : mapping of label -> history
        E.g. ``{"BSCA B=500": clf1.history_, "BSGD B=500": clf2.history_}``.
    against : {'epoch', 'seconds'}
        The x axis: epochs (paper 002 figures 1-3) or cumulative training seconds.
    panels : sequence of {'objective', 'val_accuracy', 'train_accuracy', 'maintenance_fraction',
        'n_sv'}
        ``'objective'`` draws the primal objective (solid) and, where it was computed, the dual
        objective (dashed) of each history on a symmetric-log scale, since the dual of a
        budgeted model can be negative.
    axes : sequence of matplotlib Axes, optional
        Where to draw (one per panel); a new figure otherwise.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - exercised only without matplotlib
        raise ImportError('plotting needs matplotlib: pip install "budgetsvm[plot]"') from exc
    if against not in X_AXES:
        raise ValueError(f"against must be one of {sorted(X_AXES)}, got {against!r}")
    allowed = set(PANELS) | {"train_accuracy", "n_sv"}
    for panel in panels:
        if panel not in allowed:
            raise ValueError(f"unknown panel {panel!r}; choose from {sorted(allowed)}")
    if not histories:
        raise ValueError("no histories to plot")
    for label, history in histories.items():
        if history is None or "epoch" not in history:
            raise ValueError(
                f"history {label!r} is empty: fit the estimator with record_history=True"
            )
    if axes is None:
        fig, created = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
        axes = np.atleast_1d(created)
    elif len(axes) != len(panels):
        raise ValueError(f"got {len(axes)} axes for {len(panels)} panels")
    fig = axes[0].figure
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, panel in zip(axes, panels):
        for k, (label, history) in enumerate(histories.items()):
            color = colors[k % len(colors)]
            x = np.asarray(history[against], dtype=float)
            if panel == "objective":
                ax.plot(x, history["primal"], color=color, label=f"{label} primal")
                dual = np.asarray(history["dual"], dtype=float)
                if np.any(np.isfinite(dual)):
                    ax.plot(x, dual, color=color, linestyle="--", label=f"{label} dual")
                ax.set_yscale("symlog")
            else:
                ax.plot(x, history[panel], color=color, label=label)
        ax.set_xlabel(X_AXES[against])
        ax.set_ylabel(PANELS.get(panel, panel.replace("_", " ")))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
