"""What the per-op examples share: the api_versions an op has a handler for
on a platform, a jitted call timed after its compile, and the relative error
against a float64 reference."""

import time

import jax
import numpy as np

from opgen_ops import _ops


def api_versions(op_name, where):
    """The api_versions the op has a handler for on `where` (its generated description says)."""
    return getattr(_ops, op_name).OP.handlers[where]


def timed(f, *args):
    f(*args)  # compile
    start = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    return out, time.perf_counter() - start


def relative(got, ref):
    return np.linalg.norm(np.asarray(got, np.float64) - ref) / np.linalg.norm(ref)
