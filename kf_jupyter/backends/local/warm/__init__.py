"""Warm starts for the local backend: a pool of interpreters that have already imported a framework.

A *zygote* (`zygote.py`) is one Python process per interpreter, package environment and framework
that imports torch / jax / xgboost once and then forks a fresh process for every node of a job.
Nothing in it ever runs user code: every rank is a new process forked from it, given exactly the
environment, working directory and `sys.argv` the cold path (bash -> torchrun -> python) would
give it. For torch, the forked node process plays torchrun's part (`agent.py`: static
rendezvous through the agent store on node 0, the same worker environment, fail-fast, exit
codes), and forks the ranks itself.

The job's command is unchanged: the job's `PATH` starts with a folder holding `torchrun` and
`python3` shims (`shim.py`) that hand the launch to the zygote over a Unix socket in the owner-only
state folder, or run the real program (a *cold* start) when the pool is not ready or the job needs
something the warm path does not do; the job's events say which, and why. The shims remove
themselves from `PATH` and their own variables before any rank starts.

`pool.py` is the kernel's side: which zygote fits a job, starting one, reporting the pool's
memory, stopping it.
"""
