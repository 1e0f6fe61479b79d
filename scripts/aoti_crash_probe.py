"""Where does torch 2.11's AOTInductor loader crash (README, "Deploy")?

On the GPU machine (torch 2.11, an H200) a fresh process that imports
opgen_ops.torch and then loads a `.pt2` package that calls an opgen op dies
with SIGSEGV in torch's `_load_aoti`; on a CPU-only machine with the same torch
it loads and runs. Without the import the loader stops earlier, at the op's
schema, so that run is no control: torch's AOTIModelContainerRunner builds its
proxy executor (which looks the schema up) before it creates the model
container (AOTInductorModelContainerCreateWithDevice), where a crash unrelated
to opgen could lie. This probe runs the controls, each in a fresh process that
prints C++ stacks on a fatal signal (no gdb needed):

  package  "opgen": x -> rms_norm(x @ p, w), through torch.ops.opgen_ops
           "torch": the same block written with torch's own ops
  before loading: "nothing", "library" (torch.ops.load_library of the
           package's _torch_ops.so alone: the C++ schemas and kernels, none of
           the Python registrations), "import" (import opgen_ops.torch)

for the CPU and, where torch sees one, CUDA. Reading the table: a "torch"
package that crashes after "nothing" is torch's (or the machine's) bug alone; one
that crashes only after "library" or "import" is the state opgen's libraries
or registrations leave; an "opgen" package that crashes after "import" but not
after "library" points at the Python registrations. The C++ stack printed for
each crash says where.

Its answer on that machine (2026-11-28, `--packages torch,opgen --devices
cpu`): the "torch" package crashes after "nothing", in the package's own
wrapper (std::regex in torch::aot_inductor::parse_device_str): torch's and the
machine's, not opgen's (README, "Deploy"). With the compiler's own C++ library
preloaded (`LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6)`, `--packages
torch,opgen --devices cuda`), the "torch" package runs after "nothing" and
after "library" (the run stopped there, at its time limit).

    PYTHONPATH=<the built package's folder> python scripts/aoti_crash_probe.py [DIR] [--packages torch,opgen] [--devices cpu,cuda]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap

import opgen_ops.torch as tops
import torch

D = 64


class Block(torch.nn.Module):
    def __init__(self, ops: str):
        super().__init__()
        self.ops = ops
        self.proj = torch.nn.Parameter(torch.randn(D, D) / D**0.5)
        self.w = torch.nn.Parameter(torch.rand(D) + 0.5)

    def forward(self, x):
        h = x @ self.proj
        if self.ops == "opgen":
            return tops.rms_norm(h, self.w)[0]
        return h * torch.rsqrt(h.square().mean(-1, keepdim=True) + 1e-6) * self.w


LOAD = textwrap.dedent("""
    import faulthandler, importlib.util, os, sys, torch
    faulthandler.enable()
    torch._C._set_print_stack_traces_on_fatal_signal(True)
    package, device, before = sys.argv[1:]
    if before == "library":
        folder = os.path.dirname(importlib.util.find_spec("opgen_ops").origin)
        torch.ops.load_library(os.path.join(folder, "_torch_ops.so"))
    elif before == "import":
        import opgen_ops.torch
    runner = torch._inductor.aoti_load_package(package)
    print("loaded", flush=True)
    out = runner(torch.randn(9, 64, device=device))
    print("ran", tuple(out.shape), flush=True)
""")


def main() -> None:
    parser = argparse.ArgumentParser(description="the controls of torch 2.11's AOTInductor crash")
    parser.add_argument("folder", nargs="?", help="where the packages go (default: a new temporary folder)")
    parser.add_argument("--packages", default="torch,opgen", help="which packages, in order (torch: the control)")
    parser.add_argument("--devices", default="cpu,cuda", help="which devices (cuda where torch sees one)")
    args = parser.parse_args()
    folder = args.folder or tempfile.mkdtemp(prefix="aoti_probe_")
    os.makedirs(folder, exist_ok=True)
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, CUDA visible: {torch.cuda.is_available()}, "
          f"packages in {folder}", flush=True)
    devices = [d for d in args.devices.split(",") if d == "cpu" or torch.cuda.is_available()]
    rows = []
    for device in devices:
        for ops in args.packages.split(","):
            path = os.path.join(folder, f"{ops}_{device}.pt2")
            if not os.path.exists(path):
                block = Block(ops).to(device)
                batch = torch.export.Dim("batch", min=1, max=4096)
                with torch.no_grad():
                    program = torch.export.export(block, (torch.randn(4, D, device=device),),
                                                  dynamic_shapes={"x": {0: batch}})
                torch._inductor.aoti_compile_and_package(program, package_path=path)
            for before in ("nothing", "library", "import"):
                done = subprocess.run([sys.executable, "-c", LOAD, path, device, before], capture_output=True,
                                      text=True, timeout=600, check=False)
                missing = "Could not find schema for opgen_ops::" in done.stderr
                verdict = ("ran" if "ran (" in done.stdout else "loaded, run failed" if "loaded" in done.stdout
                           else "no schema for the op (as it should)" if missing
                           else f"rc {done.returncode}" + (" (SIGSEGV)" if done.returncode == -11 else ""))
                rows.append((device, ops, before, verdict))
                print(f"--- {device} {ops} package, {before} before loading: {verdict}", flush=True)
                if "ran (" not in done.stdout and not missing:
                    print(done.stderr, flush=True)  # every thread's C++ stack, the crashing one first
    print("\ndevice  package  before    result")
    for row in rows:
        print(f"{row[0]:<7} {row[1]:<8} {row[2]:<9} {row[3]}")


if __name__ == "__main__":
    main()
