"""Without the CUDA simulator and without a device, every GPU test skips with its reason and
every CPU test still runs (what a user's ``NUMBA_ENABLE_CUDASIM=0 make test`` does on a
machine with no GPU). The rest of the suite runs in a child pytest with the simulator off and
every device hidden (CUDA_VISIBLE_DEVICES empty), so a real GPU here would not be used.

It re-runs the whole suite, so it is not part of ``make test``: its name does not match pytest's
``test_*.py`` and it runs only when named, as ``make test-gpu-skips`` does."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests.gpu_helpers import NO_CUDA

HERE = pathlib.Path(__file__)


@pytest.mark.slow
def test_without_a_device_the_gpu_tests_skip_cleanly():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         f"--ignore={HERE}", str(HERE.parent)],
        env=env, cwd=HERE.parent.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    summary = re.search(r"(\d+) passed, (\d+) skipped", done.stdout)
    assert summary, done.stdout[-2000:]
    assert int(summary[1]) > 2000 and int(summary[2]) > 500, summary[0]
    reasons = {line.split(": ", 1)[1] for line in done.stdout.splitlines()
               if line.startswith("SKIPPED")}
    # the PTX check also skips where no CUDA compiler is installed, simulator or not; the
    # real read-only-folder snapshot test where root can write anyway (as in CI); and the
    # tests of our mends to the simulator itself
    expected = (NO_CUDA, "needs a CUDA device", "no NVVM (CUDA toolkit) here",
                "root writes into read-only folders", "tests numba's CUDA simulator")
    assert all(reason.startswith(expected) for reason in reasons), reasons
