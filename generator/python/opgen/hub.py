"""Lays out a built opgen package as a Hugging Face Kernel Hub kernel:

    python -m opgen.hub PACKAGE_DIR -o OUT --license SPDX [--layers FILE] [--name NAME] [--version N]

PACKAGE_DIR is the package as the build staged or installed it (`build/python/<package>`, or
`site-packages/<package>`); OUT receives `build/<variant>/`, the folder that `kernels`
(`get_local_kernel(OUT)`, or `get_kernel` once OUT is a Hub repository) loads:

    <variant>/__init__.py    the kernel: each op of <package>.torch as a function, `layers`
                             (where --layers is given) and the package itself (<package>, whose
                             JAX half is <package>.jax)
    <variant>/layers.py      a copy of --layers: nn.Module classes for kernels' layer mapping
    <variant>/<package>/     the built package, as it is
    <variant>/metadata.json  name, id, version, license, backend, digest (kernels' format)

The variant is the torch stable-ABI one, `torch-stable-abi<XY>-<cpu|cuXY>-<machine>-<os>`:
the package's PyTorch kernels use only LibTorch's stable ABI, compiled against the headers of
torch X.Y (<package>/_build.json, written by the build), so `kernels` takes the variant in
every torch >= X.Y. The CUDA version and architectures come from the same file.

It reads the package's files and imports nothing of it, so any CPython >= 3.10 runs it, with
no torch and no `kernels`. What the layout cannot change where the Hub's rules ask otherwise
(the torch namespace, the CPython that `_C` is built for, numpy): README, "Deploy".
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import platform
import re
import shutil
import sys
from pathlib import Path

# kernels' KernelName: what `metadata.json`'s "name" must match.
_KERNEL_NAME = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")
# A CMAKE_CUDA_ARCHITECTURES entry: a number (the last digit is the minor version), an
# optional a/f suffix, and -real (machine code alone) or -virtual (PTX alone).
_CMAKE_ARCH = re.compile(r"^(\d+)(\d)([af]?)(-real|-virtual)?$")


class HubError(Exception):
    """A package that cannot be laid out, or an argument that cannot be used: the message
    says which and what was expected."""


def hub_arch(cmake_arch: str) -> str:
    """A CMAKE_CUDA_ARCHITECTURES entry as the Hub's metadata spells a CUDA architecture:
    `90-real` -> `9.0` (machine code), `90` and `90-virtual` -> `9.0+PTX` (PTX, which the
    driver compiles for newer chips too), `90a-real` -> `9.0a`."""
    m = _CMAKE_ARCH.match(cmake_arch)
    if m is None:
        raise HubError(f"CUDA architecture '{cmake_arch}' (CMAKE_CUDA_ARCHITECTURES) is not a number such as 90, "
                       "90-real or 90a-real: build the package with explicit architectures to lay it out for the Hub")
    major, minor, suffix, kind = m.groups()
    return f"{major}.{minor}{suffix}" + ("" if kind == "-real" else "+PTX")


def read_build(package_dir: Path) -> dict:
    """The package's `_build.json`: what it was compiled against."""
    path = package_dir / "_build.json"
    if not path.is_file():
        raise HubError(f"{path} is missing: {package_dir} is not a package built by opgen "
                       "(or was built by an opgen older than `python -m opgen.hub`); rebuild it")
    facts = json.loads(path.read_text())
    if facts.get("torch") is None:
        raise HubError(f"{package_dir.name} was built without its PyTorch kernels ({path}: \"torch\": null), "
                       "and a Kernel Hub kernel is loaded through torch: build it where torch >= 2.9 is importable")
    return facts


def variant_name(facts: dict, machine: str | None = None, system: str | None = None) -> str:
    """The build variant's folder name, as kernels' `parse_variant` reads it."""
    major, minor = facts["torch"].split(".")
    backend = "cpu" if facts.get("cuda") is None else "cu" + "".join(facts["cuda"].split(".")[:2])
    machine = machine or platform.machine()
    system = (system or platform.system()).lower()
    return f"torch-stable-abi{major}{minor}-{backend}-{machine}-{system}"


def op_names(package_dir: Path) -> list[str]:
    """The ops of <package>.torch, from its `__all__` (read, not imported: laying out needs no torch)."""
    source = (package_dir / "torch.py").read_text()
    m = re.search(r"^__all__ = \[(.*?)\]", source, re.MULTILINE | re.DOTALL)
    if m is None:
        raise HubError(f"{package_dir / 'torch.py'} has no __all__: not a package built by opgen")
    names = re.findall(r"""['"]([A-Za-z_][A-Za-z0-9_]*)['"]""", m.group(1))
    ops = [n for n in names if (package_dir / "_ops" / f"{n}.py").is_file()]
    if not ops:
        raise HubError(f"{package_dir / 'torch.py'}'s __all__ names no op of {package_dir / '_ops'}: "
                       "not a package built by opgen")
    return ops


def digest(variant_dir: Path) -> dict[str, str]:
    """kernels' digest of a variant: each file but metadata.json, by its path in the variant,
    as the base64 of its SHA-256."""
    files = {}
    for path in sorted(p for p in variant_dir.rglob("*") if p.is_file()):
        relative = path.relative_to(variant_dir).as_posix()
        if relative != "metadata.json":
            files[relative] = base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()
    return files


def kernel_init(package: str, ops: list[str], has_layers: bool) -> str:
    """The variant's `__init__.py`: what `kernels` imports (under the metadata's id, so
    every import of the kernel's own files is relative)."""
    lines = [
        f"# Written by `python -m opgen.hub` from the built package {package}. Do not edit.",
        f'"""{package} as a Kernel Hub kernel: each op of {package}.torch as a function',
        "(torch.ops.<namespace>.<op>), `layers` for kernels' layer mapping, and the package",
        f'itself ({package}; its JAX half is {package}.jax)."""',
        "",
        f"from . import {package}",
        f"from .{package}.torch import (",
        *[f"    {op}," for op in ops],
        ")",
    ]
    names = [package, *ops]
    if has_layers:
        lines.append("from . import layers")
        names.append("layers")
    lines += ["", "__all__ = [", *[f"    {n!r}," for n in names], "]", ""]
    return "\n".join(lines)


def lay_out(package_dir: Path, out: Path, *, license: str, layers: Path | None = None, name: str | None = None,
            version: int = 1) -> Path:
    """Writes OUT/build/<variant>/ from the built package; returns the variant folder."""
    package_dir = package_dir.resolve()
    package = package_dir.name
    if not (package_dir / "__init__.py").is_file():
        raise HubError(f"{package_dir} is not a Python package (no __init__.py): pass the built package's "
                       "folder, such as build/python/<package>")
    facts = read_build(package_dir)
    if not (package_dir / "_torch_ops.so").is_file():
        raise HubError(f"{package_dir / '_torch_ops.so'} is missing, although {package_dir / '_build.json'} "
                       "says the PyTorch kernels were built: rebuild the package")
    name = name or package.replace("_", "-")
    if not _KERNEL_NAME.match(name):
        raise HubError(f"kernel name '{name}' must match {_KERNEL_NAME.pattern} (lower case, digits and dashes; "
                       "kernels imports it with the dashes as underscores)")
    if version < 0:
        raise HubError(f"kernel version {version} must be >= 0")
    if layers is not None and not layers.is_file():
        raise HubError(f"--layers {layers}: no such file")
    backend = {"type": "cpu"}
    if facts.get("cuda") is not None:
        backend = {"type": "cuda", "archs": [hub_arch(a) for a in facts["cuda_architectures"]]}

    variant = out / "build" / variant_name(facts)
    if variant.exists():
        shutil.rmtree(variant)
    variant.mkdir(parents=True)
    shutil.copytree(package_dir, variant / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (variant / "__init__.py").write_text(kernel_init(package, op_names(package_dir), layers is not None))
    if layers is not None:
        shutil.copyfile(layers, variant / "layers.py")
    files = digest(variant)
    # The id names this build (kernels registers the module under it): the package, the
    # backend and the first hex digits of a hash of the digest.
    content = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:8]
    metadata = {
        "name": name,
        "id": f"_{package}_{backend['type']}_{content}",
        "version": version,
        "license": license,
        "backend": backend,
        "python-depends": [],
        "digest": {"algorithm": "sha256", "files": files},
    }
    (variant / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return variant


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opgen.hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("package", type=Path, help="the built package's folder (build/python/<package>)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the kernel repository (build/ goes in it)")
    parser.add_argument("--license", required=True, help="the kernel's license, as the Hub names it (Apache-2.0)")
    parser.add_argument("--layers", type=Path, help="a Python file of nn.Module layers, copied as layers.py")
    parser.add_argument("--name", help="the kernel's name (default: the package's, with dashes)")
    parser.add_argument("--version", type=int, default=1, help="the kernel's version (default 1)")
    args = parser.parse_args(argv)
    try:
        variant = lay_out(args.package, args.output, license=args.license, layers=args.layers, name=args.name,
                          version=args.version)
    except HubError as e:
        print(f"opgen.hub: error: {e}", file=sys.stderr)
        return 1
    print(variant)
    return 0


if __name__ == "__main__":
    sys.exit(main())
