"""An op's description, and the one check that every Python entry point runs.

opgen writes each op's description (``<package>/_ops/<op>.py``) from its spec:
the dtypes, shapes, attributes and outputs as the spec states them. Every
Python entry point -- the JAX wrapper, the PyTorch fake (meta) kernel, the
torch_xla kernel, the torchax lowering -- checks a call with ``check``, which
asks the op's C++ rules (``<op>_rules.h``, through the package's
``_C.check``: opgen/shape_source.h) with the call's shapes, dtypes and
attributes alone. Those are the rules every C++ entry point (the typed FFI,
the legacy shims, the PyTorch kernels) runs on the buffers, so a rule and its
message are written once, and a refusal reads the same wherever it comes
from (shapes as ``[8, 3]``; dtypes spelled as numpy and PyTorch name them).

The rules also answer what the bindings build from a checked call: the
shape symbols and batch, each type variable's dtype, each output's and
workspace's shape and dtype. What stays here is Python's own: converting
Python values to the spec's types (a str where an int belongs is a TypeError
here, before C++ sees it), the arity of a call and the names of the outputs
asked for. Under ``torch.compile``'s symbolic sizes (SymInt), the C++ rules
check the sizes' hints (the example values traced with) and answer the dtypes,
and the shapes come out symbolic from the description's expressions
(``_symbolic_shapes``, with ``evaluate``: Python's one evaluator of them). An
unbacked size has no hint: the C++ dtype rules alone run, the dtypes of the
outputs follow from the type variables they bind, and the sizes are checked
when the kernel runs, as every call is.

Framework-free (numpy only): a shape is a tuple of sizes, a dtype is its
numpy/torch name (``"float32"``).

The jobs live in modules of their own, which this one gathers (the generated
descriptions and the adapters import them from here):
``_description`` (the op's description: Op, Tensor, Attr, ...), ``_check``
(checking a call: check, Call), ``_attrs`` (attributes' Python values),
``_symbolic`` (torch.compile's symbolic sizes, the one expression evaluator)
and ``_errors`` (OpTypeError, OpValueError).
"""

from ._attrs import INT64_LIMIT, attrs_key, check_attr, check_attrs, dtype_of
from ._check import Call, _compiled, _Shaped, asked_for, check, require_inputs, splits_evenly
from ._description import PLAIN_TYPES, REQUIRED, Attr, Backward, Constraint, Expr, Op, Opaque, Tensor
from ._errors import OpTypeError, OpValueError
from ._symbolic import evaluate

__all__ = [
    "INT64_LIMIT", "PLAIN_TYPES", "REQUIRED", "Attr", "Backward", "Call", "Constraint", "Expr", "Op", "OpTypeError",
    "OpValueError", "Opaque", "Tensor", "_Shaped", "_compiled", "attrs_key", "check", "check_attr", "check_attrs",
    "asked_for", "dtype_of", "evaluate", "require_inputs", "splits_evenly",
]
