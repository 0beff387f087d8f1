"""`LocalJob`: one command run as a background subprocess, its output collected (the SDK's).

kf-jupyter's local backend does not use it (its jobs live in a state folder, see
docs/local-backend.md); it is here so SDK code that builds one keeps working. Unlike the SDK's,
it never changes the kernel's working directory (the child gets `cwd=`), and the child keeps
the kernel's environment with `env` added on top.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from ...constants.constants import (
    TRAINJOB_COMPLETE,
    TRAINJOB_CREATED,
    TRAINJOB_FAILED,
    TRAINJOB_RUNNING,
)


class LocalJob(threading.Thread):
    """A command run in a thread: `start()`, then `stdout`, `status`, `logs()`, `cancel()`.

    `command`: argv (a list or tuple) or a shell-free single program name; `execution_dir`: its
    working directory (default: the current one); `env`: added to the kernel's environment;
    `dependencies`: LocalJobs that must succeed first (otherwise this one is skipped).
    """

    def __init__(
        self,
        name: Any,
        command: list[str] | tuple[str, ...] | str,
        execution_dir: str | None = None,
        env: dict[str, str] | None = None,
        dependencies: list[Any] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.name = str(name)
        self.command = [command] if isinstance(command, str) else list(command)
        self.env = dict(env or {})
        self.dependencies = list(dependencies or [])
        self.execution_dir = execution_dir or os.getcwd()
        self._stdout = ""
        self._returncode: int | None = None
        self._success = False
        self._status = TRAINJOB_CREATED
        self._lock = threading.Lock()
        self._updated = threading.Event()
        self._cancel = threading.Event()
        self._process: subprocess.Popen[str] | None = None
        self._start_time: datetime | None = None
        self._end_time: datetime | None = None

    def _append(self, text: str) -> None:
        with self._lock:
            self._stdout += text
        self._updated.set()

    def run(self) -> None:
        """Run the command (called by `start()`)."""
        for dep in self.dependencies:
            dep.join()
            if not dep.success:
                self._append(f"Dependency {dep.name} failed. Skipping\n")
                self._status = TRAINJOB_FAILED
                return
        self._start_time = datetime.now()
        try:
            self._process = subprocess.Popen(
                self.command,
                cwd=self.execution_dir,
                env={**os.environ, **self.env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
            )
            self._status = TRAINJOB_RUNNING
            assert self._process.stdout is not None
            for line in self._process.stdout:
                self._append(line)
            self._returncode = self._process.wait()
            self._success = self._returncode == 0 and not self._cancel.is_set()
            if self._cancel.is_set():
                self._append("[JobCancelled]\n")
        except OSError as exc:
            self._append(f"Exception: {exc}\n")
            self._success = False
        finally:
            self._end_time = datetime.now()
            self._status = TRAINJOB_COMPLETE if self._success else TRAINJOB_FAILED
            self._updated.set()

    @property
    def stdout(self) -> str:
        """Everything the command printed so far (stdout and stderr)."""
        with self._lock:
            return self._stdout

    @property
    def success(self) -> bool:
        """The command exited 0 (and was not cancelled)."""
        return self._success

    @property
    def status(self) -> str:
        """Created, Running, Complete or Failed."""
        return self._status

    @property
    def returncode(self) -> int | None:
        """The exit code, once it ended."""
        return self._returncode

    def cancel(self) -> None:
        """Stop the command (SIGTERM)."""
        self._cancel.set()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()

    def logs(self, follow: bool = False) -> list[str]:
        """The output lines; with `follow`, after waiting for the command to end."""
        if follow:
            for _ in self.stream_logs():
                pass
        return self.stdout.splitlines()

    def stream_logs(self) -> Iterator[str]:
        """New output as it arrives, until the command ends."""
        seen = 0
        while True:
            alive = self.is_alive()
            self._updated.wait(timeout=0.5)
            self._updated.clear()
            data = self.stdout
            if len(data) > seen:
                yield data[seen:]
                seen = len(data)
            if not alive and not self.is_alive():
                return

    @property
    def creation_time(self) -> datetime | None:
        """When the command started."""
        return self._start_time

    @property
    def completion_time(self) -> datetime | None:
        """When it ended."""
        return self._end_time
