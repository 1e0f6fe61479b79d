"""What test_kernel_hub.py runs in a process of its own: the package laid out as a Kernel Hub
kernel (argv[1], the repository), loaded through `kernels`, its ops against references and a
small random-weight transformers Llama whose RMSNorms kernels' layer mapping replaces with the
kernel's layer, against the same model unreplaced. A process of its own, because the kernel
holds a second copy of the package, whose torch namespace the test process's copy (from
PYTHONPATH) has registered already. Prints one JSON line of what it saw; exits non-zero on a
mismatch.

    python kernel_hub_checks.py REPO SEED
"""

import copy
import importlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
from kernels import Mode, get_local_kernel, kernelize, use_kernel_mapping
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm

repo, seed = Path(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(seed)
torch.manual_seed(seed)

# The package was built for the CPU: kernels picks the backend of the torch build (cu128 for
# PyPI's Linux wheel, even without a GPU), so the CPU variant is asked for by name.
kernel = get_local_kernel(repo, backend="cpu")
seen = {"module": kernel.__name__}

# The ops, as the kernel's functions, against references in float64.
x = rng.standard_normal((3, 5, 64)).astype(np.float32)
w = rng.standard_normal(64).astype(np.float32)
eps = float(rng.uniform(1e-6, 1e-2))
out, rstd = kernel.rms_norm(torch.from_numpy(x), torch.from_numpy(w), eps=eps)
x64 = x.astype(np.float64)
want_rstd = 1 / np.sqrt((x64**2).mean(-1) + eps)
np.testing.assert_allclose(out.numpy(), x64 * want_rstd[..., None] * w, rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(rstd.numpy(), want_rstd, rtol=1e-5)
g = kernel.glu(torch.from_numpy(x), activation="silu").numpy()
gate = x64[..., 32:]
np.testing.assert_allclose(g, x64[..., :32] * gate / (1 + np.exp(-gate)), rtol=1e-5, atol=1e-6)
seen["ops"] = ["rms_norm", "glu"]

# The JAX half, from the kernel's copy of the package.
jax_ops = importlib.import_module(f"{kernel.__name__}.opgen_ops.jax")
np.testing.assert_allclose(np.asarray(jax_ops.rms_norm(x, w, eps=eps)[0]), x64 * want_rstd[..., None] * w,
                           rtol=1e-5, atol=1e-5)
seen["jax"] = jax_ops.__name__

# A small Llama with random weights (norm weights too: LlamaRMSNorm starts them at one).
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config).eval()
norms = [m for m in model.modules() if isinstance(m, LlamaRMSNorm)]
for norm in norms:
    norm.weight.data = torch.from_numpy(rng.uniform(0.5, 1.5, norm.weight.shape).astype(np.float32))
reference = copy.deepcopy(model)
ids = torch.from_numpy(rng.integers(0, config.vocab_size, (2, 16)))
with torch.inference_mode():
    want = reference(ids).logits


class CpuVariant:
    """kernels' LayerRepositoryProtocol (what a mapping holds: `layer_name`, `load()` giving the
    layer class) for the CPU variant: LocalLayerRepository (kernels 0.17.2) takes no backend,
    so on a CUDA build of torch it looks for a CUDA variant. Where torch has no CUDA, the test
    maps LocalLayerRepository itself."""

    def __init__(self, path, layer_name):
        self.path, self.layer_name = path, layer_name

    def load(self):
        return getattr(get_local_kernel(self.path, backend="cpu").layers, self.layer_name)


if torch.version.cuda is None:
    from kernels import LocalLayerRepository

    layer = LocalLayerRepository(repo, layer_name="RMSNorm")
else:
    layer = CpuVariant(repo, "RMSNorm")
with use_kernel_mapping({"RMSNorm": {"cpu": layer}}, inherit_mapping=False):
    kernelize(model, mode=Mode.INFERENCE, device="cpu")
replaced = [n for n in norms if n.forward.__func__ is kernel.layers.RMSNorm.forward]
seen["norms"], seen["replaced"] = len(norms), len(replaced)
assert len(norms) == 2 * config.num_hidden_layers + 1 and len(replaced) == len(norms), seen

# Count the package's rms_norm calls through the layer (it looks the name up when it runs).
calls = []
package_rms_norm = kernel.layers.rms_norm
kernel.layers.rms_norm = lambda *a, **k: calls.append(1) or package_rms_norm(*a, **k)
with torch.inference_mode():
    got = model(ids).logits
seen["rms_norm_calls"] = len(calls)
assert len(calls) == len(norms), seen
seen["max_abs_error"] = float((got - want).abs().max())
torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
print(json.dumps(seen))
