"""The mpi policy (OpenMPI): `mpirun` on the launcher over a hostfile; every rank runs the function."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .. import program
from .base import JobShape, Payload, Policy, ProcessSpec, Procs
from .resources import gpus_per_node


class MPIPolicy(Policy):
    """Launcher env as the Trainer's MPI plugin sets it; each rank writes its own copy of the
    payload (ranks on other nodes do not share the launcher's disk).

    The world (mpi.go:116-139, 316-345): the hostfile lists every `node` pod and, with
    `runLauncherAsNode` (the default deepspeed and mlx runtimes), the launcher too, whose
    `node` pods are then max(numNodes - 1, 1); each host has numProcPerNode slots (the job's,
    else the runtime's, else one per GPU when the runtime says 1 and a node has several GPUs).
    Rank 0 is the first hostfile line: a `node` pod on the default runtimes.
    """

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
    #: Where the local backend's hostfile is (the command names the hostfile explicitly).
    HOSTFILE_ENV = "KF_JUPYTER_MPI_HOSTFILE"

    def procs_per_node(
        self, explicit: int | None, runtime_nproc: int | None, resources: Mapping[str, Any] | None
    ) -> Procs:
        """Slots per host: the job's numProcPerNode, else the runtime's (default 1), which
        becomes the GPU count when it is 1 and a node has more than one GPU (mpi.go:128-139)."""
        if explicit:
            return Procs(explicit, str(explicit), f"{explicit} slots per host (set by the job)")
        nproc = runtime_nproc or 1
        gpus = gpus_per_node(resources)
        if nproc == 1 and gpus > 1:
            return Procs(gpus, str(gpus), f"one slot per GPU ({gpus} GPUs per node)")
        return Procs(nproc, str(nproc), f"{nproc} slots per host (the runtime's numProcPerNode)")

    #: `$0` of the script when mpirun runs it as a rank (`bash -c SCRIPT kf-jupyter-mpi-rank`).
    RANK_ARG0 = "kf-jupyter-mpi-rank"

    def script(self, trainer: Any, payload: Payload, shape: JobShape | None = None) -> str:
        """One script for the launcher and every rank: the launcher (`$0` is `bash`) writes
        the runner and execs mpirun under the runner's relay, which starts the same script
        (bash's `$BASH_EXECUTION_STRING`) on each rank; a rank writes the function, its args
        and the runner into its own folder (ranks on other pods do not share the launcher's
        disk) and runs it. Each payload is in the command once."""
        # A rank on another pod runs in an SSH session, which gets none of the pod's env: the
        # job's env and the index URLs reach it only as mpirun forwards them (-x NAME, by name:
        # the URLs' credentials must never be in mpirun's argv).
        urls = payload.index_urls if payload.packages else ()
        names = dict.fromkeys([*payload.env_names, *program.index_env(urls)])
        forward = "".join(f"-x {program.quote(n)} " for n in names)
        # The hostfile is named on the command line, which OpenMPI 4 and 5 both read (OpenMPI 5,
        # the deepspeed image's, ignores OMPI_MCA_orte_default_hostfile). mpirun runs under the
        # runner's relay, which posts rank 0's reports (entrypoint._kfj_mpi_relay).
        hostfile = f'"${{{self.HOSTFILE_ENV}:-{self.HOSTFILE}}}"'
        rank = f'[ "$0" = {self.RANK_ARG0} ]'
        return program.check_size(
            "set -e\n"
            + f'if {rank}; then kfj_sub="/rank-${{OMPI_COMM_WORLD_RANK:-0}}"; '
            + 'else kfj_sub="/launcher"; fi\n'
            + program.workdir(subdir="$kfj_sub")
            + program.materialise(None, "", payload.runner)
            + f"if ! {rank}; then\n"
            + f'exec python3 "$kfj_dir/kf_entry.py" --mpi-relay mpirun --hostfile {hostfile} '
            + f'{forward}bash -c "$BASH_EXECUTION_STRING" {self.RANK_ARG0}\n'
            + "fi\n"
            + program.materialise(payload.source, payload.args_json, None)
            + program.pip_prelude(payload.packages, payload.index_urls)
            + " ".join(["exec", "python3", *self.invocation(trainer, payload)])
            + "\n"
        )

    def launcher_env(self, slots: int, hostfile: str) -> dict[str, str]:
        """The launcher's environment (the Trainer's MPI plugin)."""
        return {
            "OMPI_MCA_orte_default_hostfile": hostfile,
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_set_default_slots": str(slots),
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        }

    def cluster_hosts(self, shape: JobShape) -> list[str]:
        """The hostfile's hosts in order: the `node` pods and, as a node, the launcher (placed
        where the runtime lists its replicated job)."""
        nodes = [f"{shape.name}-node-0-{i}.{shape.name}" for i in range(shape.node_pods)]
        if not shape.launcher_as_node:
            return nodes
        launcher = [f"{shape.name}-launcher-0-0.{shape.name}"]
        return launcher + nodes if shape.launcher_first else nodes + launcher

    def cluster_hostfile(self, shape: JobShape) -> str:
        """`/etc/mpi/hostfile` on the cluster: one line per host."""
        return "".join(f"{h} slots={shape.procs}\n" for h in self.cluster_hosts(shape))

    def cluster_env(self, shape: JobShape, index: int) -> dict[str, str]:
        return self.launcher_env(shape.procs, self.HOSTFILE)

    def local_processes(self, shape: JobShape, port: int, job_dir: str) -> list[ProcessSpec]:
        """One launcher; a hostfile with one line for all the cluster's slots (OpenMPI refuses
        the same host twice), binding off (more ranks than cores is normal on a laptop), and the
        run-as-root switches when running as root."""
        total = shape.world_size
        hostfile = os.path.join(job_dir, "hostfile")
        env = self.launcher_env(shape.procs, hostfile)
        env.update(
            {
                self.HOSTFILE_ENV: hostfile,
                "OMPI_MCA_hwloc_base_binding_policy": "none",
                "OMPI_MCA_rmaps_base_oversubscribe": "1",
                # the same for OpenMPI 5, whose runtime (PRRTE) reads PRTE_MCA_* names
                "PRTE_MCA_hwloc_default_binding_policy": "none",
                "PRTE_MCA_rmaps_default_mapping_policy": "slot:oversubscribe",
                "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                # the job's own port for DeepSpeed's MPI discovery (the runner makes it the
                # default of deepspeed.init_distributed; on a cluster each pod has its own
                # network and DeepSpeed's 29500 is the job's): two local jobs never share one
                "KF_JUPYTER_MASTER_PORT": str(port),
            }
        )
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        return [ProcessSpec("launcher", 0, env, files={hostfile: f"127.0.0.1 slots={total}\n"})]
