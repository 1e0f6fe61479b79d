"""XLA's SPMD partitioner splits every batch-partitionable op (an op whose
outputs all have the batch dimensions '...') across devices under jax.jit
with shardings: on 4 host CPU devices (and on every GPU there is, where
there are two or more), for every op, dtype and api_version XLA runs there,
the batch sharded over the devices gives the unsharded call's results, the
compiled program has no collective, and the custom call sees the local
shard. Ops that are not batch-partitionable are replicated, and still right.
Each test runs on a mesh of Auto axes (a custom_partitioning call) and on
one of explicit axes inside jax.set_mesh (a jax.shard_map), where the
installed JAX has that route."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import op_problems
from split_problems import draw_divisible, draw_uneven
import opgen_ops.jax as jops
from conftest import HOST_DEVICES, gpu_devices
from opgen_ops import _jax_partitioning, _ops

COLLECTIVES = ("all-gather", "all-reduce", "collective-permute", "all-to-all", "reduce-scatter")
PLATFORMS = [pytest.param("cpu", id="cpu")] + \
    [pytest.param("gpu", id="gpu", marks=pytest.mark.skipif(len(gpu_devices()) < 2, reason="fewer than 2 GPUs"))]
CASES = [pytest.param(op, dtypes, id=f"{op.name}[{op_problems.instantiation_id(dtypes)}]")
         for op in _ops.OPS for dtypes in op_problems.instantiations(op)[:1] if "cpu" in op.platforms]


AXIS_TYPES = [pytest.param("auto", id="auto"),
              pytest.param("explicit", id="explicit", marks=pytest.mark.skipif(
                  not _jax_partitioning.SHARD_MAP, reason="this JAX has no HiJAX or explicit mesh axes"))]


def mesh_of(platform, axis_type="auto"):
    devices = jax.devices(platform)
    assert len(devices) >= 2, f"{len(devices)} {platform} devices"
    kind = {"auto": jax.sharding.AxisType.Auto, "explicit": jax.sharding.AxisType.Explicit}[axis_type]
    return jax.sharding.Mesh(np.array(devices[:HOST_DEVICES] if platform == "cpu" else devices), ("x",),
                             axis_types=(kind,))


def on(mesh):
    """The context a program on `mesh` is traced in: jax.set_mesh for
    explicit axes (as JAX's explicit sharding asks), none for Auto ones."""
    explicit = jax.sharding.AxisType.Explicit in mesh.axis_types
    return jax.set_mesh(mesh) if explicit else contextlib.nullcontext()


def api_versions(op, platform):
    return [v for v in op.api_versions if platform == "gpu" or v in (3, 4)]


def op_of_given(p, api_version=4):
    """(the op as a function of the call's given inputs, those inputs)."""
    where = [i for i, x in enumerate(p.inputs) if x is not None]

    def f(*xs):
        inputs = [None] * len(p.inputs)
        for i, x in zip(where, xs):
            inputs[i] = x
        return getattr(jops, p.op.name)(*inputs, **p.attrs, api_version=api_version)

    return f, [p.inputs[i] for i in where]


def sharded_call(p, mesh, api_version):
    """The op under jax.jit with every batched input sharded on its first
    dimension over the mesh, and the other inputs replicated."""
    shardings = [NamedSharding(mesh, PartitionSpec("x") if t.batch else PartitionSpec()) for t in p.op.inputs
                 if not (t.optional and x is None) for x in [p.inputs[p.op.inputs.index(t)]]]
    f, given = op_of_given(p, api_version)
    jitted = jax.jit(f, in_shardings=shardings)
    args = [jax.device_put(x, s) for x, s in zip(given, shardings)]
    return jitted, args


@pytest.mark.parametrize("axis_type", AXIS_TYPES)
@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("op, dtypes", CASES)
def test_a_sharded_batch_runs_on_each_device_s_shard(rng, platform, op, dtypes, axis_type):
    mesh = mesh_of(platform, axis_type)
    if not any(t.batch for t in op.inputs):
        pytest.skip(f"{op.name} has no batch dimensions")
    shards = mesh.devices.size
    # A scalar input (the spec's []) as [] and as [1] (as vLLM passes its scales).
    for as_one in [False, True] if any(t.scalar for t in op.inputs) else [False]:
        p = op_problems.draw(op, dtypes, rng, batch=(2 * shards, 3), scalars_as_one=as_one)
        with jax.default_device(jax.devices("cpu")[0]):
            want = getattr(jops, op.name)(*p.inputs, **p.attrs, api_version=api_versions(op, "cpu")[0])
        want = list(want) if isinstance(want, tuple) else [want]
        for v in api_versions(op, platform):
            with on(mesh):
                jitted, args = sharded_call(p, mesh, v)
                hlo = jitted.lower(*args).compile().as_text()
                got = jitted(*args)
            got = list(got) if isinstance(got, tuple) else [got]
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


@pytest.mark.parametrize("axis_type", AXIS_TYPES)
def test_grad_and_vmap_of_a_partitioned_op(rng, axis_type):
    """jax.grad through the op's backward, and jax.vmap over a jitted op,
    on a sharded batch and over a sharded mapped axis (on Auto axes vmap
    maps the plain custom call; on explicit ones each device maps its part).
    On explicit axes the gradients have their inputs' shardings."""
    mesh = mesh_of("cpu", axis_type)
    batched, replicated = NamedSharding(mesh, PartitionSpec("x")), NamedSharding(mesh, PartitionSpec())
    x_, w_ = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    stacked = rng.standard_normal((4, 8, 16)).astype(np.float32)

    def loss(x, w):
        return (jops.rms_norm(x, w)[0] ** 2).sum()

    def mapped_loss(s, w):  # the backward op (rms_norm_backward, neither batch nor split) mapped too
        return jax.vmap(loss, in_axes=(0, None))(s, w).sum()

    want = jax.grad(loss, argnums=(0, 1))(x_, w_)
    want_mapped = jax.grad(mapped_loss)(stacked, w_)
    want_glu = [np.asarray(jops.glu(stacked[k], activation="silu")) for k in range(4)]
    want_norm = [np.asarray(jops.rms_norm(stacked[k], w_)[0]) for k in range(4)]
    with on(mesh):
        x, w = jax.device_put(x_, batched), jax.device_put(w_, replicated)
        grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
        mapped = jax.vmap(jax.jit(lambda a: jops.glu(a, activation="silu")))(stacked)
        over_devices = jax.jit(jax.vmap(lambda a, w: jops.rms_norm(a, w)[0], in_axes=(0, None)))(
            jax.device_put(stacked, batched), w)
        grad_mapped = jax.jit(jax.grad(mapped_loss))(jax.device_put(stacked, batched), w)
    np.testing.assert_allclose(np.asarray(grad_mapped), np.asarray(want_mapped), rtol=1e-4, atol=1e-4)
    for g, r, primal in zip(grads, want, (x, w)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-4)
        if axis_type == "explicit":
            assert g.sharding.is_equivalent_to(primal.sharding, g.ndim), (g.sharding, primal.sharding)
    mapped, over_devices = np.asarray(mapped), np.asarray(over_devices)
    for k in range(4):
        np.testing.assert_allclose(mapped[k], want_glu[k], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(over_devices[k], want_norm[k], rtol=1e-6, atol=1e-6)


SPLIT_CASES = [pytest.param(op, name, id=f"{op.name}[{name}]") for op in _ops.OPS for name in op.splits
               if "cpu" in op.platforms]


@pytest.mark.parametrize("axis_type", AXIS_TYPES)
@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("op, split", SPLIT_CASES)
def test_a_split_runs_on_each_device_s_part(rng, platform, op, split, axis_type):
    """The split's dimensions (attention's heads) cut over the devices: the
    same results as the unsharded call, and no collective."""
    mesh = mesh_of(platform, axis_type)
    symbols = op.splits[split]
    p = draw_divisible(op, symbols, mesh.devices.size, rng)
    shardings = [NamedSharding(mesh, PartitionSpec(*("x" if d in symbols else None for d in t.shape)))
                 for t, x in zip(op.inputs, p.inputs) if x is not None]
    for v in api_versions(op, platform):
        f, given = op_of_given(p, v)
        want = op_of_given(p, api_versions(op, "cpu")[0])[0](*[jax.device_put(x, jax.devices("cpu")[0])
                                                                for x in given])
        with on(mesh):
            jitted = jax.jit(f, in_shardings=shardings)
            args = [jax.device_put(x, s) for x, s in zip(given, shardings)]
            hlo = jitted.lower(*args).compile().as_text()
            got = jitted(*args)
        found = [c for c in COLLECTIVES if c in hlo]
        assert not found, f"api_version {v}: the compiled program has {found}"
        got = list(got) if isinstance(got, tuple) else [got]
        want = list(want) if isinstance(want, tuple) else [want]
        for g, w, t in zip(got, want, op.outputs):
            if w is not None:
                # On GPUs the reference is the CPU body, and a CUDA body may sum in another order
                # (attention's flash-decoding partitions follow the heads a device holds): two
                # units in the last place of the output's dtype. Integer outputs (top-k's indices) are exact.
                if not jnp.issubdtype(w.dtype, jnp.floating):
                    tol = 0.0
                else:
                    tol = 1e-5 if platform == "cpu" else max(1e-5, 2 * float(jnp.finfo(w.dtype).eps))
                np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=tol,
                                           atol=tol, err_msg=f"api_version {v}, output '{t.name}'")


@pytest.mark.parametrize("axis_type", AXIS_TYPES)
@pytest.mark.parametrize("op, split", SPLIT_CASES)
def test_a_split_whose_parts_are_no_valid_calls_runs_whole(rng, op, split, axis_type):
    """KVH = 3 heads on 4 devices, or a rotary part without whole heads: the
    split's dimensions stay whole and the results are right."""
    mesh = mesh_of("cpu", axis_type)
    symbols = op.splits[split]
    p = draw_uneven(op, symbols, mesh.devices.size, rng)
    # Sharded where the size allows it (a size below the devices cannot be sharded at all).
    shardings = [NamedSharding(mesh, PartitionSpec(*(
        "x" if d in symbols and x.shape[k] % mesh.devices.size == 0 else None for k, d in enumerate(t.shape))))
        for t, x in zip(op.inputs, p.inputs) if x is not None]
    f, given = op_of_given(p)
    want = f(*[jax.device_put(x, jax.devices("cpu")[0]) for x in given])
    with on(mesh):
        got = jax.jit(f, in_shardings=shardings)(*[jax.device_put(x, s) for x, s in zip(given, shardings)])
    for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
        if w is not None:
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-5, atol=1e-5)


def test_the_partitioner_before_shardy_takes_an_operand_without_a_sharding(rng):
    mesh = mesh_of("cpu")
    x = jax.device_put(rng.standard_normal((8, 16)).astype(np.float32), NamedSharding(mesh, PartitionSpec("x")))
    w = rng.standard_normal(16).astype(np.float32)  # uncommitted: no sharding reaches the callback
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        got = jax.jit(lambda x, w: jops.rms_norm(x, w)[0])(x, w)
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jops.rms_norm(np.asarray(x), w)[0]), rtol=1e-6, atol=1e-6)


def test_jax_export_takes_a_sharded_program_on_auto_axes_made_unpartitioned(rng):
    """On Auto axes jax.export refuses the partitioning callback (the README
    says so); inside unpartitioned() the op is a plain custom call, which
    exports (and XLA replicates). Explicit axes: test_jax_export.py."""
    from jax import export

    mesh = mesh_of("cpu")
    sharding = NamedSharding(mesh, PartitionSpec("x"))
    x = jax.device_put(rng.standard_normal((8, 16)).astype(np.float32), sharding)
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    def program():  # a function of its own each time: jax.jit's cache does not know unpartitioned()
        return jax.jit(lambda x: jops.rms_norm(x)[0], in_shardings=sharding)

    with pytest.raises(NotImplementedError, match="host_callbacks"):
        export.export(program(), platforms=["cpu"], disabled_checks=jops.export_checks())(shape)
    with jops.unpartitioned():
        exported = export.export(program(), platforms=["cpu"], disabled_checks=jops.export_checks())(shape)
    np.testing.assert_allclose(np.asarray(exported.call(x)), np.asarray(jops.rms_norm(np.asarray(x))[0]),
                               rtol=1e-6, atol=1e-6)
