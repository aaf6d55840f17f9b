"""The engine's thread pool seen by threadpoolctl, as BLAS and OpenMP runtimes are: with
``threadpool_limits(1)`` (scikit-learn's and joblib's way to keep nested parallelism from
oversubscribing the cores) a fit inside runs on that many threads, and ``threadpool_info()``
lists the pool. The environment's limits (``RAYON_NUM_THREADS``, ``OMP_NUM_THREADS``) are read
by the engine itself (``core::common::parallel``)."""

from __future__ import annotations

from typing import Any

from budgetsvm import _budgetsvm


def _register() -> None:
    try:
        from threadpoolctl import LibController, register
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return

    class BudgetsvmController(LibController):  # type: ignore[misc]
        # "openmp": the engine's pool honours what limits OpenMP runtimes (OMP_NUM_THREADS),
        # so a limit asked of them (threadpool_limits(1, user_api="openmp")) reaches it too.
        user_api = "openmp"
        internal_api = "budgetsvm"
        filename_prefixes = ("_budgetsvm",)

        def set_additional_attributes(self) -> None:
            # What threadpool_limits restores on exit: the count as the user left it (0: the
            # default, which follows the environment), not the number it resolved to then.
            self.requested_threads = int(_budgetsvm.requested_num_threads())
            self.resolved_threads = int(_budgetsvm.get_num_threads())

        def get_num_threads(self) -> int:
            return int(_budgetsvm.get_num_threads())

        def set_num_threads(self, num_threads: Any) -> None:
            n = int(num_threads)
            if self.requested_threads == 0 and n == self.resolved_threads:
                n = 0
            _budgetsvm.set_num_threads(n)

        def get_version(self) -> str:
            return str(_budgetsvm.__version__)

    register(BudgetsvmController)


_register()
