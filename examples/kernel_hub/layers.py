"""The layers of opgen_ops as a Kernel Hub kernel (`python -m opgen.hub --layers` copies this
file into the kernel as `layers.py`, beside the package folder `opgen_ops`).

kernels' layer mapping replaces a layer's `forward` with the `forward` of a class here,
called on the layer itself: so each class has no constructor, no state and no method but
`forward`, whose signature is the replaced layer's, and reads the attributes that layer has
(kernels checks all of this when it loads the class).
"""

import torch
from torch import nn

from .opgen_ops.torch import rms_norm


class RMSNorm(nn.Module):
    """transformers' "RMSNorm" mapping (LlamaRMSNorm and the other models' norms of the same
    attributes): `weight` of the input's dtype, `variance_epsilon`. rms_norm refuses a weight
    of another dtype (nothing is cast), where LlamaRMSNorm would multiply in the weight's."""

    weight: torch.Tensor
    variance_epsilon: float

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)[0]
