"""Tolerances from float32 error analysis, for comparisons that hold on every CPU and BLAS.

BLAS kernels (OpenBLAS's Haswell, SkylakeX, Sandybridge...), thread counts and operand orders
sum a product's terms in different orders, with or without fused multiply-adds, so two
correct float32 results of the same product may differ in their last bits. What does not
depend on the order is the bound on the error (Higham, "Accuracy and Stability of Numerical
Algorithms", 2nd ed., section 3.1 and eq. 3.13): a float32 dot product of n terms, summed in
any order, with or without FMA, is within

    gamma(n) * sum |x_i y_i|,   gamma(n) = n u / (1 - n u),   u = 2**-24,

of the exact value. A matrix product ``a @ b`` is n = k dot products, elementwise. Two
float32 results of the same product are each within that of the exact value, so within twice
it of each other. These bounds are proven, so they are the same on every machine; they are
loose for long sums (the errors of random data grow like sqrt(n) rather than n), which still
leaves them far below what a wrong result gives (an error of the size of the value).

``close_to`` is numpy's assert_allclose with an absolute term scaled to the data, for values
that may sit near zero: a relative tolerance alone fails a value that is the difference of
larger numbers (-0.00166 against -0.0016604).
"""
import numpy as np

UNIT_ROUNDOFF = 2.0 ** -24  # float32: half the distance from 1 to the next float32


def gamma(n):
    """Higham's gamma_n for float32: the relative error bound of n accumulated roundings."""
    nu = n * UNIT_ROUNDOFF
    if nu >= 1:
        raise ValueError(f"gamma({n}): too many terms for a float32 bound")
    return nu / (1 - nu)


def product_bound(a, b, extra_terms=0):
    """Elementwise bound on |fl(a @ b) - a @ b| for float32 ``a`` (..., m, k) and ``b``
    (..., k, n) computed in any order: gamma(k + extra_terms) * (|a| @ |b|), in float64.
    ``extra_terms`` counts other values summed into the result (a bias, an accumulated
    output)."""
    a, b = np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64))
    return gamma(a.shape[-1] + extra_terms) * (a @ b)


def assert_within(actual, desired, bound, err_msg=""):
    """|actual - desired| <= bound, elementwise (``bound`` an array or a scalar), with the
    worst element reported."""
    actual = np.asarray(actual, np.float64)
    desired = np.asarray(desired, np.float64)
    error = np.abs(actual - desired)
    bound = np.broadcast_to(np.asarray(bound, np.float64), error.shape)
    excess = error - bound
    if excess.size and not (excess <= 0).all():
        worst = np.unravel_index(np.nanargmax(np.where(np.isnan(excess), np.inf, excess)),
                                 excess.shape)
        raise AssertionError(
            f"{err_msg}: {int((~(excess <= 0)).sum())} of {excess.size} elements outside the "
            f"bound; worst at {worst}: {actual[worst]!r} vs {desired[worst]!r}, error "
            f"{error[worst]:.3g} > bound {bound[worst]:.3g}")


def assert_product(actual, a, b, addend=None, results=1, err_msg="product"):
    """``actual`` is a float32 result of ``a @ b`` (+ ``addend``, summed in any order with
    the products), checked against the exact value (computed in float64) within the proven
    bound gamma(k + 1) (|a| @ |b| + |addend|). ``results`` is how many such float32 results
    the comparison spans (2 where ``actual`` is compared with another float32 result rather
    than with the exact value)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    want = a64 @ b64
    magnitude = np.abs(a64) @ np.abs(b64)
    terms = a64.shape[-1]
    if addend is not None:
        want = want + np.asarray(addend, np.float64)
        magnitude = magnitude + np.abs(np.asarray(addend, np.float64))
        terms += 1
    assert_within(actual, want, results * gamma(terms) * magnitude, err_msg)


def close_to(actual, desired, rtol, err_msg=""):
    """assert_allclose(actual, desired, rtol, atol=rtol * max|desired|): relative to each
    value and to the data's scale, so values near zero (differences of larger numbers) are
    judged against the magnitudes they were computed from."""
    desired = np.asarray(desired)
    scale = float(np.abs(desired).max()) if desired.size else 0.0
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=rtol * scale, err_msg=err_msg)
