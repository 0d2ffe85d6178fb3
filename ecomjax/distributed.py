"""One run over several processes on JAX's multi-controller runtime (``jax.distributed``).

Every process runs the same program over one global ``Mesh`` of all processes' devices:
device j plays part j of every plan slice (``sharding.shard_plan``), and once per round the
episodes' outcome columns are all-gathered so that every process updates the curriculum
with the whole global batch in plan order. The curriculum is therefore the same on every
process after every round, and equal to a single process running the global batch (the
stream update is sequential, so a sum of per-process counters would not be). CPU
processes talk over gloo (TCP); GPUs and TPUs over their own collectives.

Failure: a collective whose peer died raises at once (gloo: "connection closed by peer");
``PeerLost`` names it and ``ecomjax run`` exits with status 3 without waiting for JAX's
shutdown barrier. A peer that hangs instead is declared dead by the coordination service
after ``heartbeat_timeout_s``, which then terminates every process (JAX's own abort).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import jax

__all__ = [
    "Cluster",
    "PeerLost",
    "add_arguments",
    "cluster_from_args",
    "free_port",
    "initialize",
    "launch_local",
    "peer_failures",
]

ENV_COORDINATOR = "ECOMJAX_COORDINATOR"
ENV_NUM_PROCESSES = "ECOMJAX_NUM_PROCESSES"
ENV_PROCESS_ID = "ECOMJAX_PROCESS_ID"
EXIT_PEER_LOST = 3


class PeerLost(RuntimeError):
    """A collective failed because another process of the run died or became unreachable."""


@dataclass(frozen=True)
class Cluster:
    """Where this process sits in a multi-process run (all None: a single process)."""

    coordinator: str | None = None  # host:port of process 0's coordination service
    num_processes: int | None = None
    process_id: int | None = None
    local_device_ids: tuple[int, ...] | None = None
    auto: bool = False  # let JAX detect SLURM, Open MPI, Kubernetes or a TPU pod
    heartbeat_timeout_s: int = 30
    init_timeout_s: int = 120

    @property
    def enabled(self) -> bool:
        return self.auto or (self.num_processes or 1) > 1

    def validate(self) -> None:
        if self.auto:
            return
        if self.num_processes is not None and self.num_processes < 1:
            raise ValueError(f"num_processes must be >= 1, got {self.num_processes}")
        if not self.enabled:
            return
        if not self.coordinator:
            raise ValueError(
                f"a run of {self.num_processes} processes needs a coordinator address "
                f"(--coordinator HOST:PORT or ${ENV_COORDINATOR})"
            )
        if self.process_id is None or not 0 <= self.process_id < int(self.num_processes):
            raise ValueError(
                f"process_id must lie in 0..{int(self.num_processes) - 1}, got {self.process_id}"
            )


def initialize(cluster: Cluster) -> bool:
    """Joins the run ``cluster`` describes (before any JAX computation); False if there is
    no run to join. CPU collectives go over gloo."""
    cluster.validate()
    if not cluster.enabled:
        return False
    if jax.distributed.is_initialized():
        return True
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    explicit = {} if cluster.auto else {"cluster_detection_method": "deactivate"}
    jax.distributed.initialize(
        coordinator_address=cluster.coordinator,
        num_processes=cluster.num_processes,
        process_id=cluster.process_id,
        local_device_ids=list(cluster.local_device_ids) if cluster.local_device_ids else None,
        initialization_timeout=cluster.init_timeout_s,
        heartbeat_timeout_seconds=cluster.heartbeat_timeout_s,
        **explicit,
    )
    return True


@contextmanager
def peer_failures() -> Iterator[None]:
    """Re-raises a failed collective of a multi-process run as ``PeerLost``."""
    try:
        yield
    except PeerLost:
        raise
    except Exception as exc:
        if jax.process_count() <= 1:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PeerLost(
            f"process {jax.process_index()} of {jax.process_count()}: a collective failed "
            f"({first[:300]}); another process of the run has probably died or lost its "
            "network, so this one stops too"
        ) from exc


def barrier(name: str, timeout_s: int = 3600) -> None:
    """Waits until every process of the run reaches ``name`` (a no-op in one process).

    Why: gloo sets up its context at the first collective and gives a missing peer only
    30 s, while one process may load its program from the compilation cache and another
    compile it for minutes. The coordination service's barrier waits as long as asked
    (the same call JAX's own array serialisation makes)."""
    if jax.process_count() <= 1:
        return
    from jax._src import distributed as jax_distributed

    jax_distributed.global_state.client.wait_at_barrier(name, timeout_in_ms=timeout_s * 1000)


def exit_now(code: int) -> None:
    """Leaves at once: after a peer died, JAX's shutdown barrier would only wait for the
    heartbeat timeout and then abort."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def add_arguments(parser) -> None:
    """The flags of a multi-process run (environment variables as defaults)."""
    group = parser.add_argument_group(
        "multi-process run (jax.distributed)",
        f"every process runs the same command; defaults come from ${ENV_COORDINATOR}, "
        f"${ENV_NUM_PROCESSES} and ${ENV_PROCESS_ID}",
    )
    group.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="process 0's address and a free port",
    )
    group.add_argument("--num-processes", type=int, default=None, metavar="N")
    group.add_argument("--process-id", type=int, default=None, metavar="I")
    group.add_argument(
        "--distributed-auto",
        action="store_true",
        help="let JAX detect the cluster (SLURM, Open MPI, Kubernetes, TPU pod)",
    )
    group.add_argument(
        "--heartbeat-timeout",
        type=int,
        default=30,
        metavar="S",
        help="seconds after which a silent process is declared dead (30)",
    )


def cluster_from_args(args=None) -> Cluster:
    """A ``Cluster`` from ``add_arguments``' flags, falling back on the environment (only
    the environment when ``args`` is None)."""
    coordinator = getattr(args, "coordinator", None)
    n = getattr(args, "num_processes", None)
    i = getattr(args, "process_id", None)
    return Cluster(
        coordinator=coordinator or os.environ.get(ENV_COORDINATOR) or None,
        num_processes=n if n is not None else _env_int(ENV_NUM_PROCESSES),
        process_id=i if i is not None else _env_int(ENV_PROCESS_ID),
        auto=getattr(args, "distributed_auto", False),
        heartbeat_timeout_s=getattr(args, "heartbeat_timeout", 30),
    )


def free_port() -> int:
    """A TCP port nobody listens on right now (for a coordinator on this machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_local(
    argv: Sequence[str],
    n: int,
    timeout: float | None = 900,
    env: dict[str, str] | None = None,
) -> list[subprocess.CompletedProcess]:
    """Runs ``argv`` as processes 0..n-1 of one run on this machine (loopback coordinator,
    one CPU device each); returns every process's completed run, in process order.

    Output goes to temporary files, not pipes, so that a chatty process never blocks on a
    full pipe while the others wait for it in a collective. Processes still running at
    ``timeout`` seconds are killed (their returncode is then negative)."""
    if n < 1:
        raise ValueError(f"need at least one process, got {n}")
    base = {**os.environ, **(env or {}), "JAX_PLATFORMS": "cpu"}
    base[ENV_COORDINATOR] = f"127.0.0.1:{free_port()}"
    base[ENV_NUM_PROCESSES] = str(n)
    with ExitStack() as stack:
        files = [
            (
                stack.enter_context(tempfile.TemporaryFile("w+")),
                stack.enter_context(tempfile.TemporaryFile("w+")),
            )
            for _ in range(n)
        ]
        procs = [
            subprocess.Popen(
                list(argv),
                env={**base, ENV_PROCESS_ID: str(i)},
                stdout=out,
                stderr=err,
                text=True,
            )
            for i, (out, err) in enumerate(files)
        ]
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for p in procs:
                p.wait(None if deadline is None else max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()
        done = []
        for p, (out, err) in zip(procs, files, strict=True):
            out.seek(0)
            err.seek(0)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out.read(), err.read()))
    return done


def check(target: str, kwargs: dict | None = None) -> dict:
    """Joins the run the environment describes, then calls ``module:function(**kwargs)``
    (e.g. ``sharding.CHECKS``' targets, which compare against one process bit for bit).
    Joining comes first: importing the library touches a JAX backend."""
    initialize(cluster_from_args())
    import importlib

    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)(**(kwargs or {}))


def _main(argv: list[str]) -> int:
    """``python -m ecomjax.distributed launch N COMMAND...`` runs COMMAND as N local
    processes of one run; ``... check MODULE:FUNCTION [KWARGS_JSON]`` is one process's part
    of a check (under ``launch``), printing its JSON report."""
    if len(argv) >= 2 and argv[0] == "check":
        report = check(argv[1], json.loads(argv[2]) if len(argv) > 2 else None)
        print(json.dumps(report))
        return 0
    if len(argv) < 3 or argv[0] != "launch" or not argv[1].isdigit():
        print(
            "usage: python -m ecomjax.distributed launch N COMMAND [ARGS...]\n"
            "       python -m ecomjax.distributed check MODULE:FUNCTION [KWARGS_JSON]",
            file=sys.stderr,
        )
        return 2
    runs = launch_local(argv[2:], int(argv[1]), timeout=None)
    for i, r in enumerate(runs):
        if i == 0:
            sys.stderr.write(r.stderr)
        sys.stdout.write(r.stdout)
    bad = [i for i, r in enumerate(runs) if r.returncode != 0]
    for i in bad:
        tail = runs[i].stderr[-2000:]
        print(f"process {i} exited with {runs[i].returncode}:\n{tail}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
