"""Docstring sections the estimators share word for word.

The methods that take only rows X (``predict``, ``decision_function``, ``score_samples``,
``predict_proba``, ...) document X alike in every estimator; ``rows_doc`` writes their numpydoc
Parameters and Returns sections, so each method states only its summary and what it returns.
The result is a complete docstring, as ``help()``, numpydoc and the API reference read it.
"""

from __future__ import annotations

import inspect
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

#: The rows parameter of every estimator's prediction methods.
ROWS = "X : {array-like, sparse matrix} of shape (n_samples, n_features)"


def rows_doc(
    returns: str = "ndarray of shape (n_samples,)", returns_note: str = "", rows_note: str = ""
) -> Callable[[F], F]:
    """Appends the Parameters (X, with ``rows_note`` under it) and Returns (``returns``, with
    ``returns_note``) sections to the decorated method's summary. Notes keep their line
    breaks. Apply it below decorators that copy the docstring (``available_if``)."""

    def under(note: str) -> list:
        return ["    " + line for line in note.splitlines()]

    def decorate(method: F) -> F:
        sections = ["Parameters", "----------", ROWS, *under(rows_note), ""]
        sections += ["Returns", "-------", returns, *under(returns_note)]
        method.__doc__ = inspect.cleandoc(method.__doc__ or "") + "\n\n" + "\n".join(sections)
        return method

    return decorate
