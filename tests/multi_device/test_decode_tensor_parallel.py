"""The Llama decoder of examples/decode_step split over devices, tensor-parallel
(attention, rotary and the caches by heads, the projections Megatron-style): in
JAX on 2 and 4 devices (host CPU devices, and GPUs where there are that many) it
picks the one-device decoder's tokens with logits within the f32 tolerance,
agrees with the reference written with jax.numpy alone, and its compiled step
holds two all-reduces a layer and no other collective; in PyTorch on 2 gloo
ranks (llama_torch.py as torchrun would start it) likewise. Each test draws a
new model (weights, caches, block tables) from the test's seed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from conftest import HOST_DEVICES, gpu_devices
from ranks import run_ranks

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "decode_step"
sys.path.insert(0, str(EXAMPLE))
import llama_inputs  # noqa: E402
import llama_jax  # noqa: E402

COLLECTIVE = re.compile(r"\b(all-reduce|all-gather|collective-permute|all-to-all|reduce-scatter)(-start)?\(")


PLATFORMS = [pytest.param(platform, n, id=f"{platform}-{n}", marks=pytest.mark.skipif(
                 platform == "gpu" and len(gpu_devices()) < n, reason=f"fewer than {n} GPUs"))
             for n in (2, HOST_DEVICES) for platform in ("cpu", "gpu")]


@pytest.mark.parametrize("platform, devices", PLATFORMS)
def test_jax_decoder_split_over_devices_decodes_as_one_device(rng, platform, devices):
    c = llama_inputs.CPU
    weights, state = llama_inputs.make_model(c, seed=int(rng.integers(2**31)))
    mesh = jax.sharding.Mesh(jax.devices(platform)[:devices], (llama_jax.MESH_AXIS,))
    w, st, tp_step = llama_jax.tensor_parallel(c, weights, state, mesh)
    with jax.default_device(jax.devices(platform)[0]), jax.default_matmul_precision("highest"):
        collectives = [m[1] for m in COLLECTIVE.finditer(tp_step.lower(w, st).compile().as_text())]
        assert collectives == ["all-reduce"] * (2 * c.L), \
            f"{c.L} layers: want an all-reduce after o and after down in each, got {collectives}"
        tokens, logits, _ = llama_jax.decode(tp_step, w, llama_jax.at_start(st, state), c.T)
        one_w = jax.tree.map(jax.numpy.asarray, weights)

        def fresh():
            return jax.tree.map(lambda a: jax.numpy.array(a, copy=True), state)

        one_tokens, one_logits, _ = llama_jax.decode(jax.jit(llama_jax.step), one_w, fresh(), c.T)
        inputs = np.concatenate([state["tokens"][None], tokens[:-1]])
        _, ref_logits, _ = llama_jax.decode(jax.jit(llama_jax.reference_step), one_w, fresh(), c.T, inputs)
    assert llama_inputs.check_same(f"jax {devices} devices", platform, tokens, logits, one_tokens, one_logits, c.tol)
    assert llama_inputs.check(f"jax {devices} devices", platform, tokens, logits, ref_logits, c.tol)


def test_torch_decoder_split_over_two_gloo_ranks_decodes_as_one_device(rng):
    outputs = run_ranks([sys.executable, str(EXAMPLE / "llama_torch.py"), "cpu", "--seed", str(rng.integers(2**31))],
                        2, {})
    printed = outputs[0]  # rank 0's: the others print nothing
    assert "torch eager, 2 ranks" in printed and "MISMATCH" not in printed, printed
