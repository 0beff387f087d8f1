"""TEST STAND-IN, not a product component: `mpirun` for the stand-in's MPI launcher pods.

On a cluster each rank runs in the pod its hostfile line names, with that pod's environment:
the Trainer's TrainJobStatus plugin gives ``KUBEFLOW_TRAINER_*`` (and the token volume) to the
launcher only (trainer v2.3.0 ``plugins/trainjobstatus/trainjobstatus.go:88-96``), and rank 0
is on the first hostfile host, a ``node`` pod on the default runtimes (``plugins/mpi/mpi.go:
316-345``). Here every rank runs on this machine under the launcher's ``mpirun``, so this
wrapper runs the real ``mpirun`` with each rank started through ``--rank``: it finds the rank's
host in ``hostfile.k8s`` (the real hostfile, beside the local one; ranks fill hosts in order,
``slots`` each) and removes those variables unless the host is the launcher pod.

A rank on a ``node`` pod runs in an SSH session there (OpenMPI's rsh launcher starts ``orted``
over SSH), and sshd gives a session none of the container's environment: the rank sees only what
``mpirun`` forwards, the ``OMPI_*``/``PMIX_*`` variables and the names given with ``-x``. So the
wrapper also removes the pod's own variables (``STANDIN_POD_ENV``, the names of the container's
``env``) from ranks off the launcher, unless ``-x`` forwards them.

The stand-in puts a directory with an ``mpirun`` that runs this file first on a launcher pod's
PATH, with ``STANDIN_REAL_MPIRUN`` naming the real one (see ``install``).
"""

from __future__ import annotations

import os
import sys

#: mpirun options followed by a value (two for --mca), as far as the stand-in's users need.
_ONE = {
    "--hostfile", "-hostfile", "--machinefile", "-machinefile", "-x", "-np", "-n", "-c",
    "--map-by", "--bind-to", "--rank-by", "-H", "--host", "-wdir", "--wdir",
}  # fmt: skip
_TWO = {"--mca", "-mca"}
_LAUNCHER_ONLY = (
    "KUBEFLOW_TRAINER_SERVER_URL",
    "KUBEFLOW_TRAINER_SERVER_CA_CERT",
    "KUBEFLOW_TRAINER_SERVER_TOKEN",
)


def _hosts(path: str) -> list[tuple[str, int]]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            words = line.split()
            if words:
                slots = next((int(w[6:]) for w in words if w.startswith("slots=")), 1)
                out.append((words[0], slots))
    return out


def _rank(argv: list[str]) -> None:
    hostfile, forwarded, program = argv[0], set(argv[1].split(",")), argv[2:]
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    host = ""
    for name, slots in _hosts(hostfile):
        if rank < slots:
            host = name
            break
        rank -= slots
    env = dict(os.environ)
    if "-launcher-" not in host:
        for key in _LAUNCHER_ONLY:
            env.pop(key, None)
        for key in os.environ.get("STANDIN_POD_ENV", "").split(","):
            if key not in forwarded and not key.startswith(("OMPI_", "PMIX_")):
                env.pop(key, None)
    env.pop("STANDIN_POD_ENV", None)
    os.execvpe(program[0], program, env)


def _mpirun(argv: list[str]) -> None:
    real = os.environ.get("STANDIN_REAL_MPIRUN") or ""
    if not real:
        sys.exit("stand-in mpirun: STANDIN_REAL_MPIRUN is not set")
    i, hostfile = 0, os.environ.get("OMPI_MCA_orte_default_hostfile", "")
    forwarded = []
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in ("--hostfile", "-hostfile", "--machinefile", "-machinefile"):
            hostfile = argv[i + 1]
        if argv[i] == "-x":
            forwarded.append(argv[i + 1].split("=")[0])
        i += 3 if argv[i] in _TWO else 2 if argv[i] in _ONE else 1
    k8s = os.path.join(os.path.dirname(hostfile), "hostfile.k8s")
    wrapper = [sys.executable, os.path.abspath(__file__), "--rank", k8s, ",".join(forwarded)]
    # argv[0] is the bare name, as when a pod's command runs `mpirun` from PATH: OpenMPI takes
    # an absolute argv[0] as `--prefix` and puts <prefix>/bin (here /usr/bin, the system
    # python3 without the job's packages) first on every rank's PATH.
    # Every pod's slots share this machine's few cores (the local hostfile), where a cluster
    # gives each pod its own: binding off, or Open MPI 5 (PRRTE) refuses to bind more ranks than
    # cores (Open MPI 4 binds them to sockets instead). The pod's env stays as the Trainer's.
    env = {
        **os.environ,
        "OMPI_MCA_hwloc_base_binding_policy": "none",
        "PRTE_MCA_hwloc_default_binding_policy": "none",
    }
    os.execve(real, ["mpirun", *argv[:i], *wrapper, *argv[i:]], env)


def install(directory: str) -> dict[str, str]:
    """Write the `mpirun` wrapper into `directory`; the environment a launcher pod adds."""
    import shutil

    real = shutil.which("mpirun") or ""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "mpirun")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f'#!/bin/sh\nexec "{sys.executable}" "{os.path.abspath(__file__)}" "$@"\n')
    os.chmod(path, 0o755)
    return {"STANDIN_REAL_MPIRUN": real}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        _rank(sys.argv[2:])
    else:
        _mpirun(sys.argv[1:])
