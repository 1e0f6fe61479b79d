"""The errors of a refused call, for every Python entry point (opgen_ops._spec)."""

class OpTypeError(TypeError, RuntimeError):
    """A wrong kind of argument: a dtype, a Python type. A TypeError for JAX
    users, a RuntimeError as PyTorch's own kernels raise."""


class OpValueError(ValueError, RuntimeError):
    """A wrong value: a shape, a size, an attribute out of range."""
