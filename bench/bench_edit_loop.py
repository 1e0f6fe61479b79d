"""The kernel author's loop on a package of many ops: edit one spec (or one
body), rebuild, and how long until the package is usable again.

Builds a scratch project with an installed opgen (`cmake --install <build>
--component tool`): N copies of glu (spec and CPU and CUDA bodies, renamed),
find_package(opgen) + opgen_add_package, configured with Ninja. After the
first build it times, each `--runs` times (alternating two values, so that
every run really changes something):

  [spec]  opgen generate alone after one spec's attribute default changed;
  [build] cmake --build after one spec's attribute default changed (opgen,
          then every recompile and link that the change causes);
  [body]  cmake --build after one CPU body changed (a constant in a comment-free
          line, so the object really changes);
  [cuda]  the same for one CUDA body, with --cuda.

and prints each median with the slowest build steps of the last run (from
Ninja's own log, .ninja_log, which records each step's time).

  python bench/bench_edit_loop.py [--build build/tests] [--ops 50] [--runs 3] [--cuda] [--keep]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "loop_ops"


def run(cmd, cwd, env=None):
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return elapsed, p.stdout


def renamed(text, op):
    return (text.replace("opgen_ops::glu", f"{PACKAGE}::{op}").replace("opgen_ops/glu.h", f"{PACKAGE}/{op}.h")
            .replace("OPGEN_GLU_", f"OPGEN_{op.upper()}_").replace("glu_gate.h", f"{op}_gate.h")
            .replace("glu_gate::", f"{op}_gate::"))


def make_project(root, ops, prefix):
    os.makedirs(os.path.join(root, "specs"))
    os.makedirs(os.path.join(root, "kernels"))
    with open(os.path.join(root, "CMakeLists.txt"), "w") as f:
        f.write("cmake_minimum_required(VERSION 3.24)\nproject(loop_ops LANGUAGES CXX)\n"
                "find_package(opgen CONFIG REQUIRED)\nopgen_add_package(SPECS specs KERNELS kernels)\n")
    with open(os.path.join(root, "specs", "package.yaml"), "w") as f:
        f.write(f"opgen: 1\npackage: {{name: {PACKAGE}, torch_namespace: {PACKAGE}}}\n")
    spec = open(os.path.join(REPO, "specs", "glu.yaml")).read().split("\nbackward:")[0] + "\n"  # no backward op
    for i in range(ops):
        op = f"op_{i:03d}"
        with open(os.path.join(root, "specs", f"{op}.yaml"), "w") as f:
            f.write(spec.replace("name: glu", f"name: {op}"))
        for source, target in (("glu.cc", f"{op}.cc"), ("glu.cu", f"{op}.cu"), ("glu_gate.h", f"{op}_gate.h")):
            with open(os.path.join(root, "kernels", target), "w") as f:
                f.write(renamed(open(os.path.join(REPO, "kernels", source)).read(), op))


def ninja_steps(build):
    """(seconds, what) of each step of the last ninja run, slowest first; a
    step with several outputs (opgen's) is named by its first."""
    entries = []
    with open(os.path.join(build, ".ninja_log")) as f:
        for line in f:
            if not line.startswith("#"):
                start, end, _, output, _ = line.rstrip("\n").split("\t")
                entries.append((int(start), int(end), output))
    # Each run appends its entries as they finish, with its own clock, which
    # starts at 0: the last run begins after the last drop of the end times.
    last = max((i for i in range(1, len(entries)) if entries[i][1] < entries[i - 1][1]), default=0)
    steps = {}
    for start, end, output in entries[last:]:
        steps.setdefault((start, end), []).append(output)
    return sorted((((end - start) / 1000.0, outs[0] + (f" (+{len(outs) - 1} more outputs)" if len(outs) > 1 else ""))
                   for (start, end), outs in steps.items()), reverse=True)


def edit(path, pattern, values, run_index):
    text = open(path).read()
    new = re.sub(pattern, values[run_index % 2], text, count=1, flags=re.M)
    assert new != text, (path, pattern)
    with open(path, "w") as f:
        f.write(new)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build", "tests"), help="a build folder holding opgen")
    ap.add_argument("--ops", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cuda", action="store_true", help="build the CUDA bodies too, and time a CUDA edit")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="opgen_loop_")
    try:
        prefix, project, build = (os.path.join(work, d) for d in ("prefix", "project", "build"))
        run(["cmake", "--install", args.build, "--component", "tool", "--prefix", prefix], cwd=REPO)
        make_project(project, args.ops, prefix)
        configure = ["cmake", "-S", project, "-B", build, "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}",
                     f"-DPython_EXECUTABLE={sys.executable}", f"-DOPGEN_CUDA={'ON' if args.cuda else 'OFF'}"]
        t_configure, _ = run(configure, cwd=project)
        t_first, _ = run(["cmake", "--build", build], cwd=project)
        print(f"{args.ops} ops (copies of glu), CUDA {'on' if args.cuda else 'off'}: configure {t_configure:.1f} s, "
              f"first build {t_first:.1f} s")
        opgen = os.path.join(prefix, "bin", "opgen")
        spec = os.path.join(project, "specs", "op_007.yaml")
        default = r"default: \w+"
        cases = {
            "spec": ("opgen generate alone, one spec's default edited",
                     lambda i: (edit(spec, default, ["default: gelu", "default: silu"], i),
                                run([opgen, "generate", os.path.join(project, "specs"), "-o",
                                     os.path.join(build, "opgen_generated"), "--root", project, "--quiet"],
                                    cwd=project))),
            "build": ("cmake --build, one spec's doc edited (it reaches the op's C++ and Python)",
                      lambda i: (edit(spec, r'^doc: "(Edited\. )?', ['doc: "Edited. ', 'doc: "'], i),
                                 run(["cmake", "--build", build], cwd=project))),
            "body": ("cmake --build, one CPU body edited",
                     lambda i: (edit(os.path.join(project, "kernels", "op_007.cc"), r"half = args\.D / 2[^;]*;",
                                     ["half = args.D / 2 + 0 * int64_t{1};", "half = args.D / 2;"], i),
                                run(["cmake", "--build", build], cwd=project))),
        }
        if args.cuda:
            cases["cuda"] = ("cmake --build, one CUDA body edited",
                             lambda i: (edit(os.path.join(project, "kernels", "op_007.cu"), r"kThreads = \d+",
                                             ["kThreads = 128", "kThreads = 256"], i),
                                        run(["cmake", "--build", build], cwd=project)))
        for key, (what, step) in cases.items():
            times = [step(i)[1][0] for i in range(args.runs)]
            print(f"[{key}] {what}: median {statistics.median(times):.2f} s "
                  f"({', '.join(f'{t:.2f}' for t in times)})")
            if key != "spec":
                for seconds, output in ninja_steps(build)[:6]:
                    print(f"         {seconds:6.2f} s  {output}")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
