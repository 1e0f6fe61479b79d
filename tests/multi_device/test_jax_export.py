"""A jax.jit program with the ops, sharded over 4 host CPU devices on a mesh
of explicit axes, exports with jax.export (export_checks() its only extra),
serializes, and runs from the bytes in a fresh process: the results of the
unsharded call, and no collective in the program that process compiles (the
ops still run on each device's part: a jax.shard_map is part of the
program, where a custom_partitioning callback could not be serialized)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import op_problems
import opgen_ops.jax as jops
import pytest
from conftest import HOST_DEVICES
from jax import export
from jax.sharding import NamedSharding, PartitionSpec
from opgen_ops import _ops
from split_problems import draw_divisible
from test_jax_partitioning import COLLECTIVES, op_of_given

# (op, what the devices cut: 'batch' or a split of its spec)
CASES = [("rms_norm", "batch"), ("paged_attention_decode", "heads"), ("topk_softmax", "tokens")]

# The fresh process: the package (which registers the custom-call targets),
# the bytes, the inputs laid out as the exporting process laid them; it
# writes the results and the program it compiled.
RUN = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    from jax import export
    from jax.sharding import NamedSharding, PartitionSpec
    import opgen_ops.jax

    folder = sys.argv[1]
    specs = json.load(open(folder + "/specs.json"))
    exported = export.deserialize(bytearray(open(folder + "/program.bin", "rb").read()))
    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    given = np.load(folder + "/inputs.npz")
    args = [jax.device_put(given[f"x{i}"], NamedSharding(mesh, PartitionSpec(*spec))) for i, spec in enumerate(specs)]
    outs = exported.call(*args)
    outs = outs if isinstance(outs, (tuple, list)) else [outs]
    np.savez(folder + "/outputs.npz", **{f"y{i}": np.asarray(y) for i, y in enumerate(outs)})
    open(folder + "/compiled.txt", "w").write(jax.jit(exported.call).lower(*args).compile().as_text())
""")


def problem(op, cut, rng):
    """A call whose cut dimensions divide by the devices, and each given
    input's PartitionSpec entries: the first batch dimension, or the split's
    symbols, along the mesh axis 'x'."""
    if cut == "batch":
        p = op_problems.draw(op, op_problems.instantiations(op)[0], rng, batch=(2 * HOST_DEVICES, 3))
    else:
        p = draw_divisible(op, op.splits[cut], HOST_DEVICES, rng)

    def spec(t, x):
        lead = x.ndim - len(t.shape)
        if cut == "batch":
            return ["x" if t.batch and k == 0 else None for k in range(x.ndim)]
        return [None] * lead + ["x" if d in op.splits[cut] else None for d in t.shape]

    return p, [spec(t, x) for t, x in zip(op.inputs, p.inputs) if x is not None]


@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("name, cut", CASES, ids=[f"{n}[{c}]" for n, c in CASES])
def test_a_sharded_program_exports_and_runs_partitioned_in_a_fresh_process(rng, tmp_path, name, cut, api_version):
    op = getattr(_ops, name).OP
    assert api_version in op.api_versions, f"{name} has no api_version {api_version}"
    p, specs = problem(op, cut, rng)
    assert any("x" in s for s in specs), f"{name}: nothing is cut"
    f, given = op_of_given(p, api_version)
    # The host's CPU devices, also where GPUs are the default backend (the machine's GPUs may be fewer).
    mesh = jax.make_mesh((HOST_DEVICES,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,),
                         devices=jax.devices("cpu")[:HOST_DEVICES])
    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, PartitionSpec(*s)))
              for x, s in zip(given, specs)]
    with jax.set_mesh(mesh):
        exported = export.export(jax.jit(f), platforms=["cpu"], disabled_checks=jops.export_checks())(*shapes)
    (tmp_path / "program.bin").write_bytes(exported.serialize())
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    np.savez(tmp_path / "inputs.npz", **{f"x{i}": x for i, x in enumerate(given)})
    run = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], check=False, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert run.returncode == 0, run.stderr[-4000:]

    compiled = (tmp_path / "compiled.txt").read_text()
    found = [c for c in COLLECTIVES if c in compiled]
    assert not found, f"the program compiled from the bytes has {found}"
    calls = [line for line in compiled.splitlines() if "custom-call(" in line and f"opgen_ops_{name}" in line]
    assert calls, f"no custom call of {name} in the compiled program"
    with jax.default_device(jax.devices("cpu")[0]):
        want = f(*given)  # the unsharded call, in this process
    want = list(want) if isinstance(want, tuple) else [want]
    got = np.load(tmp_path / "outputs.npz")
    want = [w for w in want if w is not None]
    assert len(got.files) == len(want)
    for i, w in enumerate(want):
        tol = 1e-5 if np.issubdtype(np.asarray(w).dtype, np.floating) else 0
        np.testing.assert_allclose(np.asarray(got[f"y{i}"], np.float64), np.asarray(w, np.float64), rtol=tol,
                                   atol=tol, err_msg=f"output {i}")


def test_export_checks_names_every_custom_call_target_of_the_package():
    from opgen_ops import _C

    names = {name for versions in _C.targets().values() for targets in versions.values() for name in targets}
    assert sorted(c.is_custom_call() for c in jops.export_checks()) == sorted(names)
