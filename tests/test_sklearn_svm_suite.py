"""scikit-learn's own SVM tests against the exact estimators (../shared/checks/sklearn_svm_suite.py,
which swaps SVC / NuSVC / SVR / NuSVR / OneClassSVM for ours): every test passes but the check's
allowed ones and the three where we differ on purpose (the user guide's "Replacing
scikit-learn's SVMs"), so a convention that regresses fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import sklearn

CHECK = Path(__file__).resolve().parents[2] / "shared" / "checks" / "sklearn_svm_suite.py"

#: Where we differ from scikit-learn on purpose.
DIFFERENT = {
    # Its string kernel is right only for k(X, X); we call a callable against the support
    # rows only (scikit-learn against every training row).
    "test_custom_kernel_not_array_input",
    # A kernel returning 1 x 1 for 2 rows is refused at fit (scikit-learn fails at predict).
    "test_svr_errors",
}


@pytest.mark.skipif(not CHECK.exists(), reason="../shared/checks is not beside this tree")
# The check rewrites the imports of scikit-learn 1.9's test files; older releases (the newest on
# Python 3.9 is 1.6) spell them in ways it does not parse, so their files fail to collect.
@pytest.mark.skipif(
    tuple(map(int, re.match(r"(\d+)\.(\d+)", sklearn.__version__).groups())) < (1, 9),
    reason=f"the check is written for scikit-learn >= 1.9, not {sklearn.__version__}",
)
def test_scikit_learn_s_svm_tests_pass():
    out = subprocess.run(
        [sys.executable, str(CHECK)], capture_output=True, text=True, timeout=1200
    )
    lines = out.stdout.strip().splitlines()
    assert lines, out.stderr
    failed = {line.split()[1] for line in lines if line.startswith("failed:")}
    assert failed <= DIFFERENT, lines[-1]
    assert "passed" in lines[-1], lines[-1]
