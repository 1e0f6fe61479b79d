"""bench/bench_multi_gpu.py's smoke run on 4 host CPU devices (small sizes, few
calls): that the script the multi-GPU measurement depends on runs, compares
every device count with one device and finds no collective (it exits 1 if it
finds one)."""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_multi_gpu.py"


def test_bench_multi_gpu_runs_on_host_devices():
    done = subprocess.run([sys.executable, str(BENCH), "--cpu-smoke"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 3 * 3, done.stdout  # 3 ops on 1, 2 and 4 devices
    assert all(row.rstrip(" |").endswith("| 0") for row in rows), done.stdout
