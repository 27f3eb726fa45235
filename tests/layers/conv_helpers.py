"""Forcing the (de)convolution layers' choices in tests: a plan, or Winograd on or off.

The layers call their rules through the rules' modules at every reshape
(``layers/convolution/plan.py``'s ``choose_plan`` and ``winograd_fits``) and at the first
inference pass after their weights change (``kernels/cpu/winograd_error.fits``). These context
managers replace the rules for the length of a with-block: a layer reshaped inside it takes
the forced choice, and keeps it until it is reshaped again outside.
"""
import contextlib
from unittest import mock

from pycaffe_cli.layers.convolution import plan as rules
from pycaffe_cli.layers.convolution.plan import Plan
from pycaffe_cli.layers.kernels.cpu import winograd_error


@contextlib.contextmanager
def forced_plan(plan):
    """Every (de)convolution layer reshaped inside the block runs ``plan`` where it can:
    DIRECT needs 2-d windows, so N-d ones keep GEMM (as ``choose_plan`` itself decides)."""
    def choose(use_2d, *args, **kwargs):
        return plan if use_2d else Plan.GEMM
    with mock.patch.object(rules, "choose_plan", choose):
        yield


@contextlib.contextmanager
def forced_winograd(on):
    """Inside the block, a Convolution layer's inference pass runs Winograd F(4x4, 3x3)
    wherever its window allows it (``on``: whatever its tiles, channels and error bound), or
    never (not ``on``)."""
    with mock.patch.object(rules, "winograd_fits", lambda *args: on), \
            mock.patch.object(winograd_error, "fits", lambda *args: on):
        yield
