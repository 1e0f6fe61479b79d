"""Starts a command as the ranks of a torch.distributed group on this machine,
each a process of its own with the environment torchrun gives (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), without torchrun's agent,
and returns what each printed."""

from __future__ import annotations

import os
import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(command: list[str], world: int, env: dict[str, str], timeout: float = 300) -> list[str]:
    """Runs `command` as `world` ranks with `env` added to this process's
    environment (less XLA_FLAGS: the ranks need no host devices); asserts
    that every rank exits with 0. Returns each rank's output."""
    env = {**os.environ, "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), **env}
    env.pop("XLA_FLAGS", None)
    ranks = [subprocess.Popen(command, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outputs = [r.communicate(timeout=timeout)[0] for r in ranks]
    for r, (process, out) in enumerate(zip(ranks, outputs)):
        assert process.returncode == 0, f"rank {r} of {command}:\n{out[-4000:]}"
    return outputs
