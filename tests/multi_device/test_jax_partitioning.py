"""XLA's SPMD partitioner splits every batch-partitionable op (an op whose
outputs all have the batch dimensions '...') across devices under jax.jit
with shardings: on 4 host CPU devices (and on every GPU there is, where
there are two or more), for every op, dtype and api_version XLA runs there,
the batch sharded over the devices gives the unsharded call's results, the
compiled program has no collective, and the custom call sees the local
shard. Ops that are not batch-partitionable are replicated, and still right."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import op_problems
from split_problems import draw_divisible
import opgen_ops.jax as jops
from conftest import HOST_DEVICES, gpu_devices
from opgen_ops import _ops

COLLECTIVES = ("all-gather", "all-reduce", "collective-permute", "all-to-all", "reduce-scatter")
PLATFORMS = [pytest.param("cpu", id="cpu")] + \
    [pytest.param("gpu", id="gpu", marks=pytest.mark.skipif(len(gpu_devices()) < 2, reason="fewer than 2 GPUs"))]
CASES = [pytest.param(op, dtypes, id=f"{op.name}[{op_problems.instantiation_id(dtypes)}]")
         for op in _ops.OPS for dtypes in op_problems.instantiations(op)[:1] if "cpu" in op.platforms]


def mesh_of(platform):
    devices = jax.devices(platform)
    assert len(devices) >= 2, f"{len(devices)} {platform} devices"
    return jax.sharding.Mesh(np.array(devices[:HOST_DEVICES] if platform == "cpu" else devices), ("x",))


def api_versions(op, platform):
    return [v for v in op.api_versions if platform == "gpu" or v in (3, 4)]


def sharded_call(p, mesh, api_version):
    """The op under jax.jit with every batched input sharded on its first
    dimension over the mesh, and the other inputs replicated."""
    shardings = [NamedSharding(mesh, PartitionSpec("x") if t.batch else PartitionSpec()) for t in p.op.inputs
                 if not (t.optional and x is None) for x in [p.inputs[p.op.inputs.index(t)]]]
    given = [x for x in p.inputs if x is not None]
    where = [i for i, x in enumerate(p.inputs) if x is not None]

    def f(*xs):
        inputs = [None] * len(p.inputs)
        for i, x in zip(where, xs):
            inputs[i] = x
        return getattr(jops, p.op.name)(*inputs, **p.attrs, api_version=api_version)

    jitted = jax.jit(f, in_shardings=shardings)
    args = [jax.device_put(x, s) for x, s in zip(given, shardings)]
    return jitted, args


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("op, dtypes", CASES)
def test_a_sharded_batch_runs_on_each_device_s_shard(rng, platform, op, dtypes):
    mesh = mesh_of(platform)
    if not any(t.batch for t in op.inputs):
        pytest.skip(f"{op.name} has no batch dimensions")
    shards = mesh.devices.size
    p = op_problems.draw(op, dtypes, rng, batch=(2 * shards, 3))
    for v in api_versions(op, platform):
        jitted, args = sharded_call(p, mesh, v)
        hlo = jitted.lower(*args).compile().as_text()
        got = jitted(*args)
        got = list(got) if isinstance(got, tuple) else [got]
        with jax.default_device(jax.devices("cpu")[0]):
            want = getattr(jops, op.name)(*p.inputs, **p.attrs, api_version=api_versions(op, "cpu")[0])
        want = list(want) if isinstance(want, tuple) else [want]
        for g, w, t in zip(got, want, op.outputs):
            if w is None:
                continue
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-5, atol=1e-5,
                                       err_msg=f"api_version {v}, output '{t.name}'")
        found = [c for c in COLLECTIVES if c in hlo]
        local = f"[{2},3,"  # the batch's first dimension on one device: 2 * shards / shards
        if op.batch_partitionable:
            assert not found, f"api_version {v}: the compiled program has {found}"
            calls = [line for line in hlo.splitlines() if "custom-call(" in line and "opgen_ops" in line]
            assert calls and all(local in line.replace(" ", "") for line in calls), \
                f"api_version {v}: the custom call does not run on the local shard:\n" + "\n".join(calls)


def test_grad_and_vmap_of_a_partitioned_op(rng):
    """jax.grad through the op's backward, and jax.vmap over a jitted op,
    on a sharded batch (vmap maps the plain custom call)."""
    mesh = mesh_of("cpu")
    batched, replicated = NamedSharding(mesh, PartitionSpec("x")), NamedSharding(mesh, PartitionSpec())
    x = jax.device_put(rng.standard_normal((8, 16)).astype(np.float32), batched)
    w = jax.device_put(rng.standard_normal(16).astype(np.float32), replicated)

    def loss(x, w):
        return (jops.rms_norm(x, w)[0] ** 2).sum()

    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    want = jax.grad(loss, argnums=(0, 1))(np.asarray(x), np.asarray(w))
    for g, r in zip(grads, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-4)
    stacked = rng.standard_normal((3, 8, 16)).astype(np.float32)
    mapped = jax.vmap(jax.jit(lambda a: jops.glu(a, activation="silu")))(stacked)
    for k in range(3):
        np.testing.assert_allclose(np.asarray(mapped[k]), np.asarray(jops.glu(stacked[k], activation="silu")),
                                   rtol=1e-6, atol=1e-6)


SPLIT_CASES = [pytest.param(op, name, id=f"{op.name}[{name}]") for op in _ops.OPS for name in op.splits
               if "cpu" in op.platforms]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("op, split", SPLIT_CASES)
def test_a_split_runs_on_each_device_s_part(rng, platform, op, split):
    """The split's dimensions (attention's heads) cut over the devices: the
    same results as the unsharded call, and no collective."""
    mesh = mesh_of(platform)
    symbols = op.splits[split]
    p = draw_divisible(op, symbols, mesh.devices.size, rng)
    shardings = [NamedSharding(mesh, PartitionSpec(*("x" if d in symbols else None for d in t.shape)))
                 for t, x in zip(op.inputs, p.inputs) if x is not None]
    given = [x for x in p.inputs if x is not None]
    where = [i for i, x in enumerate(p.inputs) if x is not None]
    for v in api_versions(op, platform):
        def f(*xs, v=v):
            inputs = [None] * len(p.inputs)
            for i, x in zip(where, xs):
                inputs[i] = x
            return getattr(jops, op.name)(*inputs, **p.attrs, api_version=v)

        jitted = jax.jit(f, in_shardings=shardings)
        args = [jax.device_put(x, s) for x, s in zip(given, shardings)]
        hlo = jitted.lower(*args).compile().as_text()
        found = [c for c in COLLECTIVES if c in hlo]
        assert not found, f"api_version {v}: the compiled program has {found}"
        got = jitted(*args)
        got = list(got) if isinstance(got, tuple) else [got]
        want = f(*[jax.device_put(x, jax.devices("cpu")[0]) for x in given], v=api_versions(op, "cpu")[0])
        want = list(want) if isinstance(want, tuple) else [want]
        for g, w, t in zip(got, want, op.outputs):
            if w is not None:
                np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-5,
                                           atol=1e-5, err_msg=f"api_version {v}, output '{t.name}'")
