"""What test_kernel_hub.py runs in a process of its own: the package laid out as a Kernel Hub
kernel (argv[1], the repository), loaded through `kernels`, its ops against references and a
small random-weight transformers Llama whose RMSNorms kernels' layer mapping replaces with the
kernel's layer, against the same model unreplaced, in float32 and bfloat16, on DEVICE. A process
of its own, because the kernel holds a second copy of the package, whose torch namespace the
test process's copy (from PYTHONPATH) has registered already. Prints one JSON line of what it
saw; exits non-zero on a mismatch.

    python kernel_hub_checks.py REPO SEED DEVICE

DEVICE is `cpu` (the variant of a CPU build, asked for by name: kernels picks the backend of the
torch build, cu128 for PyPI's Linux wheel even without a GPU) or `cuda` (the variant of a CUDA
build, the one kernels picks for torch's CUDA by itself, as `get_kernel` does, run on the GPU).
"""

import copy
import importlib
import json
import sys
from pathlib import Path

import jax
import numpy as np
import torch
from kernels import LocalLayerRepository, Metadata, Mode, get_local_kernel, kernelize, use_kernel_mapping
from kernels.validate import ArchValidator
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm

repo, seed, device = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
assert device in ("cpu", "cuda"), f"DEVICE must be cpu or cuda, not {device!r}"
rng = np.random.default_rng(seed)
torch.manual_seed(seed)
# float32 matrix products in float32 (torch's default; TF32's 10-bit inputs would turn the norms'
# last-bit differences into ones the float32 comparison below does not allow).
torch.set_float32_matmul_precision("highest")

kernel = get_local_kernel(repo, backend="cpu") if device == "cpu" else get_local_kernel(repo)
variant = Path(kernel.__file__).parent
seen = {"module": kernel.__name__, "variant": variant.name, "device": device}
if device == "cuda":
    # What get_kernel checks beyond get_local_kernel: the build's architectures (metadata.json's
    # "9.0+PTX" for CMake's 90) take this GPU's compute capability; raises where they do not.
    metadata = Metadata.read_from_file(variant / "metadata.json")
    ArchValidator().validate_metadata(metadata=metadata, variant=variant.name)
    seen["archs"], seen["capability"] = metadata.backend.archs, list(torch.cuda.get_device_capability())

# The ops, as the kernel's functions on DEVICE, against references in float64 from the same
# (rounded) inputs. float32: accumulated in f32 over 64 elements, well inside 1e-5. bfloat16:
# each output is the f32 result rounded once, at most half an ulp, 2^-8 of the value.
tolerances = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2**-8 + 1e-5, 1e-6)}
x = rng.standard_normal((3, 5, 64)).astype(np.float32)
w = rng.standard_normal(64).astype(np.float32)
eps = float(rng.uniform(1e-6, 1e-2))
for dtype, (rtol, atol) in tolerances.items():
    xt, wt = torch.from_numpy(x).to(device, dtype), torch.from_numpy(w).to(device, dtype)
    x64, w64 = xt.double().cpu().numpy(), wt.double().cpu().numpy()
    out, rstd = kernel.rms_norm(xt, wt, eps=eps)
    assert out.device.type == device and out.dtype == dtype, (out.device, out.dtype)
    want_rstd = 1 / np.sqrt((x64**2).mean(-1) + eps)
    np.testing.assert_allclose(out.double().cpu().numpy(), x64 * want_rstd[..., None] * w64, rtol=rtol, atol=atol)
    np.testing.assert_allclose(rstd.cpu().numpy(), want_rstd, rtol=1e-5)
    g = kernel.glu(xt, activation="silu").double().cpu().numpy()
    gate = x64[..., 32:]
    np.testing.assert_allclose(g, x64[..., :32] * gate / (1 + np.exp(-gate)), rtol=rtol, atol=atol)
seen["ops"] = ["rms_norm", "glu"]

# The JAX half, from the kernel's copy of the package, on the same device (an error where JAX
# has none of that kind).
jax_ops = importlib.import_module(f"{kernel.__name__}.opgen_ops.jax")
x64, w64 = x.astype(np.float64), w.astype(np.float64)
jax_device = jax.devices("cpu" if device == "cpu" else "gpu")[0]
jax_out = jax_ops.rms_norm(jax.device_put(x, jax_device), jax.device_put(w, jax_device), eps=eps)[0]
assert jax_out.devices() == {jax_device}, jax_out.devices()
np.testing.assert_allclose(np.asarray(jax_out), x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + eps) * w64,
                           rtol=1e-5, atol=1e-5)
seen["jax"], seen["jax_device"] = jax_ops.__name__, str(jax_device)

# A small Llama with random weights (norm weights too: LlamaRMSNorm starts them at one).
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config).eval()
for norm in [m for m in model.modules() if isinstance(m, LlamaRMSNorm)]:
    norm.weight.data = torch.from_numpy(rng.uniform(0.5, 1.5, norm.weight.shape).astype(np.float32))
ids = torch.from_numpy(rng.integers(0, config.vocab_size, (2, 16)))
with torch.inference_mode():
    exact = copy.deepcopy(model).double()(ids).logits  # the float64 model, on the CPU


class CpuVariant:
    """kernels' LayerRepositoryProtocol (what a mapping holds: `layer_name`, `load()` giving the
    layer class) for the CPU variant: LocalLayerRepository (kernels 0.17.2) takes no backend,
    so on a CUDA build of torch it looks for a CUDA variant. Where torch has no CUDA, the test
    maps LocalLayerRepository itself, as it does for the CUDA variant."""

    def __init__(self, path, layer_name):
        self.path, self.layer_name = path, layer_name

    def load(self):
        return getattr(get_local_kernel(self.path, backend="cpu").layers, self.layer_name)


if device == "cpu" and torch.version.cuda is not None:
    layer = CpuVariant(repo, "RMSNorm")
else:
    layer = LocalLayerRepository(repo, layer_name="RMSNorm")

# Count the package's rms_norm calls through the layer (it looks the name up when it runs).
calls = []
package_rms_norm = kernel.layers.rms_norm
kernel.layers.rms_norm = lambda *a, **k: calls.append(1) or package_rms_norm(*a, **k)
for dtype in (torch.float32, torch.bfloat16):
    name = str(dtype).removeprefix("torch.")
    unreplaced = copy.deepcopy(model).to(device, dtype)
    replaced = copy.deepcopy(model).to(device, dtype)
    with use_kernel_mapping({"RMSNorm": {device: layer}}, inherit_mapping=False):
        kernelize(replaced, mode=Mode.INFERENCE, device=device)
    norms = [m for m in replaced.modules() if isinstance(m, LlamaRMSNorm)]
    seen[f"norms_{name}"] = len(norms)
    seen[f"replaced_{name}"] = sum(n.forward.__func__ is kernel.layers.RMSNorm.forward for n in norms)
    assert len(norms) == 2 * config.num_hidden_layers + 1 and seen[f"replaced_{name}"] == len(norms), seen
    calls.clear()
    with torch.inference_mode():
        base = unreplaced(ids.to(device)).logits
        got = replaced(ids.to(device)).logits
    seen[f"rms_norm_calls_{name}"] = len(calls)
    assert len(calls) == len(norms) and got.device.type == device and got.dtype == dtype, seen
    got, base = got.double().cpu(), base.double().cpu()
    seen[f"max_abs_error_{name}"] = float((got - base).abs().max())
    if dtype == torch.float32:
        # Both models compute the same sums, each norm in its own order: measured <= 3e-7 over
        # 240 seeds on the CPU (logits of about 0.7); 1e-5 leaves room for the GPU's reduction orders.
        torch.testing.assert_close(got, base, rtol=1e-5, atol=1e-5)
    else:
        # Each bf16 op rounds: both models are about an ulp of the logits (2^-8) from the
        # float64 model. The layer rounds each norm once where LlamaRMSNorm rounds twice (its
        # normalised input, then the product with the weight), so the replaced model is as close
        # to the float64 one as transformers' own: measured at most 1.35 times its distance
        # over 240 seeds on the CPU; 2 fails a layer that is off by more than the rounding.
        ours, theirs = float((got - exact).abs().max()), float((base - exact).abs().max())
        seen["bf16_distance_to_float64"] = {"replaced": ours, "unreplaced": theirs}
        assert ours <= 2 * theirs, seen
print(json.dumps(seen))
