"""Run a build script on `world` gloo ranks, one process each (the script reads argv: port, spec, rank, world, and
prints its answer as the last line of JSON): the tier-2 budget tests' way of asking Megatron-Core's own code."""

import json
import socket
import subprocess
import sys


def run(script: str, spec: str, world: int) -> list:
    """Each rank's last line of output, as JSON; a rank that prints nothing is left out."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, "-W", "ignore", "-c", script, port, spec, str(r), str(world)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs if out.strip()]
