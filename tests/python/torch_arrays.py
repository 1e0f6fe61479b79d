"""numpy arrays to torch tensors and back, for the tests, including the dtypes
numpy cannot hand to torch directly (bfloat16 and the fp8 types, which
ml_dtypes gives numpy)."""

import numpy as np
import torch

_BITS = {1: np.uint8, 2: np.int16}


def torch_attrs(op, attrs):
    """Attribute values as torch.ops takes them: a dtype attribute (the
    schema's ScalarType) as a torch.dtype."""
    return {k: getattr(torch, v) if k in op.dtype_attrs.values() else v for k, v in attrs.items()}


def to_torch(x, device="cpu"):
    """A torch copy of numpy array `x` on `device` (None stays None)."""
    if x is None:
        return None
    dtype = x.dtype.name
    if dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return torch.from_numpy(x.view(_BITS[x.dtype.itemsize]).copy()).view(getattr(torch, dtype)).to(device)
    return torch.from_numpy(np.array(x)).to(device)


def as_numpy(x):
    """`x` (a torch tensor on any device, or an array) as a numpy array; the
    dtypes numpy lacks come back as float32."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            return x.float().numpy()
        return x.numpy()
    return np.asarray(x)
