"""The former home of ``budgetsvm.dask.search``, now ``budgetsvm/dask/_search.py``: an alias
module, so that ``from budgetsvm._dask_search import DaskTaskMap`` keeps working."""

from budgetsvm.dask._search import DaskTaskMap, search

__all__ = ["DaskTaskMap", "search"]
