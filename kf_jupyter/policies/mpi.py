"""The mpi policy (OpenMPI): `mpirun` on the launcher over a hostfile; every rank runs the function."""

from __future__ import annotations

import os
from typing import Any

from .. import program
from .base import JobShape, Payload, Policy, ProcessSpec


class MPIPolicy(Policy):
    """Launcher env as the Trainer's MPI plugin sets it; each rank writes its own copy of the
    payload (ranks on other nodes do not share the launcher's disk)."""

    name = "mpi"
    reserved_env = frozenset(
        {
            "OMPI_MCA_orte_default_hostfile",
            "OMPI_MCA_orte_keep_fqdn_hostnames",
            "OMPI_MCA_orte_set_default_slots",
            "OMPI_MCA_plm_rsh_args",
        }
    )
    HOSTFILE = "/etc/mpi/hostfile"

    def script(self, trainer: Any, payload: Payload) -> str:
        inner = (
            "set -e\n"
            + program.pip_prelude(payload.packages, payload.index_urls)
            + program.materialise(
                payload.source,
                payload.args_json,
                payload.runner,
                subdir="/rank-${OMPI_COMM_WORLD_RANK:-0}",
            )
            + " ".join(["exec", "python3", *self.invocation(trainer, payload)])
            + "\n"
        )
        # Index URLs reach ranks on other nodes through the environment (-x NAME forwards it
        # by name): their credentials must never be in mpirun's argv.
        urls = payload.index_urls if payload.packages else ()
        forward = "".join(f"-x {n} " for n in program.index_env(urls))
        return program.check_size(f"set -e\nexec mpirun {forward}bash -c {program.quote(inner)}\n")

    def launcher_env(self, slots: int, hostfile: str) -> dict[str, str]:
        """The launcher's environment (the Trainer's MPI plugin)."""
        return {
            "OMPI_MCA_orte_default_hostfile": hostfile,
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_set_default_slots": str(slots),
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        }

    def cluster_hostfile(self, shape: JobShape) -> str:
        """`/etc/mpi/hostfile` on the cluster: one line per node."""
        return "".join(
            f"{shape.name}-node-0-{i}.{shape.name} slots={shape.procs}\n"
            for i in range(shape.num_nodes)
        )

    def cluster_env(self, shape: JobShape, index: int) -> dict[str, str]:
        return self.launcher_env(shape.procs, self.HOSTFILE)

    def local_processes(self, shape: JobShape, port: int, job_dir: str) -> list[ProcessSpec]:
        """One launcher; a hostfile with one line for all local slots (OpenMPI refuses the same
        host twice), binding off (more ranks than cores is normal on a laptop), and the
        run-as-root switches when running as root."""
        total = shape.num_nodes * shape.procs
        hostfile = os.path.join(job_dir, "hostfile")
        env = self.launcher_env(total, hostfile)
        env.update(
            {
                "OMPI_MCA_hwloc_base_binding_policy": "none",
                "OMPI_MCA_rmaps_base_oversubscribe": "1",
                "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
            }
        )
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        return [ProcessSpec("launcher", 0, env, files={hostfile: f"127.0.0.1 slots={total}\n"})]
