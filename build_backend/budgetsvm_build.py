"""The project's PEP 517 backend: maturin's, building the portable wheel by default.

maturin's PEP 517 hooks build for the running machine unless build arguments say otherwise
(``--compatibility off``: a wheel tagged ``linux_x86_64`` and linked against this machine's
glibc, which PyPI refuses and older systems cannot load). The wheel this project ships is the
one for every x86-64 Linux with glibc 2.17 or newer: ``manylinux2014``, linked through zig
(``ziglang`` is a build requirement) and checked by maturin's auditwheel, for every CPython from
3.9 on (abi3, ``[tool.maturin] features``). So ``python -m build`` and ``pip install .`` both make
that wheel. Arguments given with ``-C maturin.build-args=...`` or ``MATURIN_PEP517_ARGS`` take
precedence (``--compatibility off`` for a wheel for this machine only).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import maturin
from maturin import (  # noqa: F401 - the hooks used as maturin has them
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

PORTABLE = "--compatibility manylinux2014 --zig"


def _portable(config_settings: Optional[Mapping[str, Any]]) -> dict:
    settings = dict(config_settings or {})
    given = "maturin.build-args" in settings or "build-args" in settings
    if not given and not os.environ.get("MATURIN_PEP517_ARGS"):
        settings["maturin.build-args"] = PORTABLE
    return settings


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Mapping[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    return maturin.build_wheel(wheel_directory, _portable(config_settings), metadata_directory)
