"""The package as a Hugging Face Kernel Hub kernel (`python -m opgen.hub`, README "Deploy"):
laid out from the built package, read by `kernels` (its metadata parser, its digest, its
variant resolution), loaded with `kernels.get_local_kernel` and run, in a process of its own
(kernel_hub_checks.py: the ops against references, a transformers Llama whose RMSNorms
kernels' layer mapping replaces, against the unreplaced model, in float32 and bfloat16); the
JAX half imported from the laid-out folder; and the tool's refusals. A CPU build's variant runs
on the CPU; a CUDA build's on the GPU, where torch's CUDA is one kernels takes it with and a GPU
is visible (scripts/kernel_hub_gpu.sh), else those tests are skipped, saying why. Skipped where
`kernels` or transformers is missing (requirements-dev.txt pins the versions tested)."""

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator" / "python"))
from opgen import hub  # noqa: E402  (the tool, from the source tree)

LAYERS = REPO / "examples" / "kernel_hub" / "layers.py"


def package_dir() -> Path:
    """The built package that PYTHONPATH names (found, not imported)."""
    spec = importlib.util.find_spec("opgen_ops")
    if spec is None or spec.origin is None:
        pytest.skip("opgen_ops is not importable (set PYTHONPATH to the build's python folder)")
    return Path(spec.origin).parent


def clean_env(**extra) -> dict:
    """This environment without the built package's folder on PYTHONPATH: the process sees the
    kernel's copy of the package alone. Other entries stay (scripts/kernel_hub_gpu.sh puts the
    wheels of kernels and transformers there); `extra` replaces variables whole."""
    env = dict(os.environ)
    build = package_dir().parent.resolve()
    kept = [p for p in env.pop("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != build]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def hub_repo(tmp_path_factory):
    """The built package laid out by the command itself."""
    out = tmp_path_factory.mktemp("hub")
    done = subprocess.run([sys.executable, "-m", "opgen.hub", str(package_dir()), "-o", str(out), "--license",
                           "Apache-2.0", "--layers", str(LAYERS)], capture_output=True, text=True, timeout=120,
                          env=clean_env(PYTHONPATH=str(REPO / "generator" / "python")))
    assert done.returncode == 0, done.stderr
    variant = Path(done.stdout.strip())
    assert variant.parent == out / "build"
    return out, variant


def test_variant_is_the_stable_abi_one_kernels_picks(hub_repo):
    kernels = pytest.importorskip("kernels", reason="kernels (the Kernel Hub's loader) is not installed")
    from kernels.variants import get_variants_local, resolve_variant

    import torch

    out, variant = hub_repo
    facts = json.loads((package_dir() / "_build.json").read_text())
    built = tuple(int(v) for v in facts["torch"].split("."))
    running = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    assert (2, 9) <= built <= running, (facts, torch.__version__)
    machine, system = platform.machine(), platform.system().lower()
    backend = "cpu" if facts.get("cuda") is None else "cu" + "".join(facts["cuda"].split(".")[:2])
    assert variant.name == f"torch-stable-abi{built[0]}{built[1]}-{backend}-{machine}-{system}"
    device = loadable_device(facts, run=False)
    # The CPU variant by name (a torch with CUDA asks for a CUDA one); the CUDA variant as
    # get_kernel picks it, for the backend of torch's build.
    chosen, trace = resolve_variant(get_variants_local(out / "build"), "cpu" if device == "cpu" else None)
    assert chosen is not None and chosen.variant_str == variant.name, trace
    metadata = kernels.Metadata.read_from_file(variant / "metadata.json")
    assert str(metadata.name) == "opgen-ops" and metadata.version == 1 and metadata.license == "Apache-2.0"
    if device == "cpu":
        assert metadata.backend.backend_type == kernels._rust.Backend.CPU
    else:
        assert metadata.backend.backend_type == kernels._rust.Backend.CUDA
        assert metadata.backend.archs == [hub.hub_arch(a) for a in facts["cuda_architectures"]]
    # The digest, against kernels' own hash of the folder.
    theirs = kernels._rust.Digest.hash_variant(kernels._rust.DigestAlgorithm.SHA256, variant)
    metadata.digest.validate(theirs)
    assert metadata.digest.files == theirs.files and "opgen_ops/_torch_ops.so" in theirs.files


def loadable_device(facts: dict, *, run: bool) -> str:
    """Where the build's variant is loaded (and, for `run`, run) here: `cpu` for a CPU build;
    `cuda` for a CUDA build where kernels takes its variant with this torch (kernels 0.17.2:
    torch's CUDA x.y takes a variant of CUDA x.z, z <= y; CI's first stack has nvcc 13.0
    bodies and PyPI's torch 2.9 for CUDA 12.8, so it lays out a CUDA variant that kernels
    refuses) and, for `run`, a GPU is visible. Else the test is skipped, saying why (CI's
    second stack and a build with OPGEN_CUDA=OFF build a CPU variant, which is loaded)."""
    if facts.get("cuda") is None:
        return "cpu"
    import torch

    built = tuple(int(v) for v in facts["cuda"].split(".")[:2])
    have = None if torch.version.cuda is None else tuple(int(v) for v in torch.version.cuda.split(".")[:2])
    if have is None or have[0] != built[0] or have[1] < built[1]:
        pytest.skip(f"this package has CUDA {facts['cuda']} bodies, and kernels loads its variant only with a torch "
                    f"for CUDA {built[0]}.{built[1]} to {built[0]}.x (this one's is {torch.version.cuda})")
    if run and not torch.cuda.is_available():
        pytest.skip(f"this package has CUDA {facts['cuda']} bodies, and torch {torch.__version__} sees no GPU "
                    "to run its variant on")
    return "cuda"


def test_kernel_runs_the_ops_and_replaces_llama_norms(hub_repo, seed):
    pytest.importorskip("kernels", reason="kernels (the Kernel Hub's loader) is not installed")
    device = loadable_device(json.loads((package_dir() / "_build.json").read_text()), run=True)
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    from transformers.utils import import_utils

    if not import_utils.is_kernels_available():
        import kernels

        pytest.skip(f"transformers {transformers.__version__} takes kernels >= {import_utils.KERNELS_MIN_VERSION}, "
                    f"< {import_utils.KERNELS_MAX_VERSION}, not {kernels.__version__}: its layers are not mapped")
    out, variant = hub_repo
    # Neither the package from PYTHONPATH nor the Hub: the kernel alone, offline.
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "kernel_hub_checks.py"), str(out), str(seed),
                           device], capture_output=True, text=True, timeout=300, env=clean_env(HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    print(seen)
    assert seen["variant"] == variant.name and seen["device"] == device
    assert seen["module"].startswith(f"_opgen_ops_{device}_") and seen["jax"] == seen["module"] + ".opgen_ops.jax"
    for dtype in ("float32", "bfloat16"):
        assert seen[f"replaced_{dtype}"] == seen[f"norms_{dtype}"] == seen[f"rms_norm_calls_{dtype}"] == 5, seen


def test_the_kernels_process_keeps_pythonpath_but_the_build(monkeypatch, tmp_path):
    # Where kernels and transformers come from a folder on PYTHONPATH (scripts/kernel_hub_gpu.sh),
    # the kernel's process needs it; the build's folder alone goes.
    wheels = tmp_path / "site"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(wheels), str(package_dir().parent), ""]))
    assert clean_env()["PYTHONPATH"] == str(wheels)
    monkeypatch.setenv("PYTHONPATH", str(package_dir().parent))
    assert "PYTHONPATH" not in clean_env() and clean_env(PYTHONPATH="x")["PYTHONPATH"] == "x"


def test_jax_half_imports_from_the_laid_out_folder(hub_repo, rng):
    _, variant = hub_repo
    x = rng.standard_normal((4, 32)).astype(np.float32)
    w = rng.standard_normal(32).astype(np.float32)
    run = ("import sys, numpy as np, opgen_ops, opgen_ops.jax as ops\n"
           "x, w = np.load(sys.argv[1]), np.load(sys.argv[2])\n"
           "print(opgen_ops.__file__)\n"
           "np.save(sys.argv[3], np.asarray(ops.rms_norm(x, w, eps=1e-5)[0]))\n")
    tmp = variant.parent.parent
    np.save(tmp / "x.npy", x)
    np.save(tmp / "w.npy", w)
    done = subprocess.run([sys.executable, "-c", run, str(tmp / "x.npy"), str(tmp / "w.npy"), str(tmp / "out.npy")],
                          capture_output=True, text=True, timeout=300, env=clean_env(PYTHONPATH=str(variant)))
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == variant / "opgen_ops" / "__init__.py"
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(np.load(tmp / "out.npy"), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cmake, want", [("90", "9.0+PTX"), ("80-real", "8.0"), ("90a-real", "9.0a"),
                                         ("120-virtual", "12.0+PTX"), ("100f-real", "10.0f")])
def test_cuda_architectures_as_the_hub_spells_them(cmake, want):
    assert hub.hub_arch(cmake) == want


def test_a_cuda_build_is_named_by_its_cuda(tmp_path):
    facts = {"torch": "2.10", "cuda": "13.0", "cuda_architectures": ["80-real", "90"]}
    assert hub.variant_name(facts, "x86_64", "Linux") == "torch-stable-abi210-cu130-x86_64-linux"


def fake_package(tmp_path, facts):
    """A copy of the built package with other build facts."""
    copy = tmp_path / "opgen_ops"
    shutil.copytree(package_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "_build.json").write_text(json.dumps(facts))
    return copy


@pytest.mark.parametrize("facts, message", [
    ({"torch": None, "cuda": None, "cuda_architectures": None}, "built without its PyTorch kernels"),
    ({"torch": "2.9", "cuda": "13.0", "cuda_architectures": ["native"]}, "CUDA architecture 'native'"),
])
def test_refusals_name_the_cause(tmp_path, facts, message):
    package = fake_package(tmp_path, facts)
    with pytest.raises(hub.HubError, match=message):
        hub.lay_out(package, tmp_path / "out", license="Apache-2.0")
    assert not (tmp_path / "out" / "build").exists() or not any((tmp_path / "out" / "build").iterdir())


def test_refusals_of_arguments(tmp_path):
    with pytest.raises(hub.HubError, match="kernel name 'Opgen_Ops' must match"):
        hub.lay_out(package_dir(), tmp_path, license="Apache-2.0", name="Opgen_Ops")
    with pytest.raises(hub.HubError, match="--layers .*nothing.py: no such file"):
        hub.lay_out(package_dir(), tmp_path, license="Apache-2.0", layers=tmp_path / "nothing.py")
    (tmp_path / "not_a_package").mkdir()
    with pytest.raises(hub.HubError, match="is not a Python package"):
        hub.lay_out(tmp_path / "not_a_package", tmp_path, license="Apache-2.0")
    with pytest.raises(hub.HubError, match="_build.json is missing"):
        (tmp_path / "old").mkdir()
        (tmp_path / "old" / "__init__.py").write_text("")
        hub.lay_out(tmp_path / "old", tmp_path, license="Apache-2.0")


def test_a_package_whose_torch_module_lists_no_op_is_refused(tmp_path):
    package = fake_package(tmp_path, json.loads((package_dir() / "_build.json").read_text()))
    # As built: every op description the package has (not its _ modules: __init__, the dtype table).
    assert set(hub.op_names(package)) == {p.stem for p in (package / "_ops").glob("*.py") if not p.stem.startswith("_")}
    source = (package / "torch.py").read_text()
    (package / "torch.py").write_text(source.replace("__all__ = [", "__all__ = ['xla_graph_only']\n_unlisted = ["))
    with pytest.raises(hub.HubError, match="__all__ names no op"):
        hub.lay_out(package, tmp_path / "out", license="Apache-2.0")
