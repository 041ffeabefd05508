"""A one-node SLURM cluster for the test suite: munge, MariaDB, slurmdbd, slurmctld and slurmd from
Debian's packages (``slurm-wlm``, ``slurmdbd``, ``munge``, ``mariadb-server``; ``make test``
installs them as root), configured for this host and started as root in a temporary directory.

slurmdbd (with MariaDB behind it) is there because submitit, which hydra-submitit-launcher drives,
asks ``sacct`` for the state of a job that wrote no result (a job cancelled with ``scancel``, or
one that failed); without accounting storage ``sacct`` answers nothing and the launcher would
wait for ever. munge serves on its default socket (``/run/munge/munge.socket.2``), the one that
the SLURM clients and slurmdbd connections use; an munged already answering there is reused.

Everything listens on 127.0.0.1 or this host's own name, on free ports, and is stopped at the end.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "munge", "mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "slurmctld", "slurmd",
            "sbatch", "sacct", "sacctmgr", "scontrol", "squeue", "scancel")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


def unavailable() -> str | None:
    """Why a cluster cannot be started here (``None`` when it can)."""
    if os.name != "posix" or os.geteuid() != 0:
        return "the one-node SLURM cluster is started as root (slurmd runs jobs as their user)"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return (f"SLURM test cluster: {', '.join(missing)} not installed (`make test` installs Debian's slurm-wlm, "
                "slurmdbd, munge and mariadb-server as root)")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, ok, timeout: float = 60.0, log: Path | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
    raise RuntimeError(f"SLURM test cluster: {what} did not come up in {timeout:.0f} s\n{tail}")


def _ok(cmd: list[str], env: dict | None = None) -> bool:
    return subprocess.run(cmd, env=env, capture_output=True).returncode == 0


class Cluster:
    """Start with :meth:`start`, stop with :meth:`stop`; :attr:`env` is the environment the SLURM
    clients need (``SLURM_CONF``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.partition = "kgtest"
        self.env = dict(os.environ)
        self._pids: list[tuple[str, Path]] = []
        self._own_munge = False

    def _daemon(self, name: str, cmd: list[str], pidfile: Path) -> None:
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"SLURM test cluster: {name} failed to start: {r.stderr[-1500:]}")
        self._pids.append((name, pidfile))

    def start(self) -> "Cluster":
        r = self.root
        for d in ("state", "spool", "log", "db", "munge"):
            (r / d).mkdir(parents=True, exist_ok=True)
        # munge on its default socket (reused when one already answers there)
        if not _ok(["munge", "-n"]):
            key = r / "munge" / "munge.key"
            key.write_bytes(secrets.token_bytes(1024))
            key.chmod(0o400)
            (r / "munge").chmod(0o700)
            MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
            self._daemon("munged", ["munged", f"--key-file={key}", f"--socket={MUNGE_SOCKET}",
                                    f"--pid-file={r / 'munge' / 'munged.pid'}", f"--log-file={r / 'log' / 'munged.log'}",
                                    f"--seed-file={r / 'munge' / 'seed'}", "--force"], r / "munge" / "munged.pid")
            self._own_munge = True
            _wait("munged", lambda: _ok(["munge", "-n"]), log=r / "log" / "munged.log")
        # MariaDB for slurmdbd, on loopback
        db_port, dbd_port, ctld_port, slurmd_port = (_free_port() for _ in range(4))
        subprocess.run(["mariadb-install-db", "--user=root", f"--datadir={r / 'db'}", "--skip-test-db",
                        "--auth-root-authentication-method=normal"], check=True, capture_output=True)
        sock = r / "mysql.sock"
        proc = subprocess.Popen(["mariadbd", "--user=root", f"--datadir={r / 'db'}", f"--socket={sock}",
                                 f"--port={db_port}", "--bind-address=127.0.0.1", f"--pid-file={r / 'mysqld.pid'}",
                                 f"--log-error={r / 'log' / 'mysqld.log'}", "--skip-name-resolve"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._pids.append(("mariadbd", r / "mysqld.pid"))
        self._mariadb = proc
        password = secrets.token_hex(8)
        sql = "; ".join(f"CREATE USER 'slurm'@'{h}' IDENTIFIED BY '{password}'; "
                        f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{h}'" for h in ("127.0.0.1", "localhost"))
        _wait("mariadbd", lambda: _ok(["mariadb", f"--socket={sock}", "-uroot", "-e", "SELECT 1"]),
              log=r / "log" / "mysqld.log")
        subprocess.run(["mariadb", f"--socket={sock}", "-uroot", "-e", sql + "; FLUSH PRIVILEGES"], check=True,
                       capture_output=True)
        common = [f"AuthType=auth/munge", f"AuthInfo=socket={MUNGE_SOCKET}"]
        dbd = r / "slurmdbd.conf"
        dbd.write_text("\n".join(common + [
            "DbdHost=localhost", f"DbdPort={dbd_port}", "SlurmUser=root",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
            "StorageUser=slurm", f"StoragePass={password}", "StorageLoc=slurm_acct_db",
            f"PidFile={r / 'slurmdbd.pid'}", f"LogFile={r / 'log' / 'slurmdbd.log'}"]) + "\n")
        dbd.chmod(0o600)
        conf = r / "slurm.conf"
        cpus = os.cpu_count() or 1
        conf.write_text("\n".join(common + [
            "ClusterName=kgtest", f"SlurmctldHost={self.host}", f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}", "CredType=cred/munge", "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
            f"AccountingStoragePort={dbd_port}", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "MpiDefault=none", "ReturnToService=2", "SchedulerType=sched/backfill", "MinJobAge=600",
            f"NodeName={self.host} CPUs={cpus} RealMemory=4000 State=UNKNOWN",
            f"PartitionName={self.partition} Nodes={self.host} Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE:8"]) + "\n")
        self.env["SLURM_CONF"] = str(conf)  # slurmdbd reads slurmdbd.conf beside it
        self._daemon("slurmdbd", ["slurmdbd"], r / "slurmdbd.pid")
        _wait("slurmdbd", lambda: _ok(["sacctmgr", "-n", "list", "cluster"], self.env), log=r / "log" / "slurmdbd.log")
        subprocess.run(["sacctmgr", "-i", "add", "cluster", "kgtest"], env=self.env, check=True, capture_output=True)
        self._daemon("slurmctld", ["slurmctld", "-f", str(conf)], r / "slurmctld.pid")
        self._daemon("slurmd", ["slurmd", "-f", str(conf)], r / "slurmd.pid")
        _wait("slurmd", lambda: b"idle" in subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env,
                                                          capture_output=True).stdout,
              log=r / "log" / "slurmctld.log")
        return self

    def stop(self) -> None:
        subprocess.run(["scancel", "--partition", self.partition], env=self.env, capture_output=True)
        for name, pidfile in reversed(self._pids):
            if name == "munged" and not self._own_munge:
                continue
            try:
                pid = int(pidfile.read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                continue
            # MariaDB's clean shutdown of the throwaway accounting database took 15 s of every CI
            # run (InnoDB flushing tables nobody reads again): it is killed after 1 s
            end = time.monotonic() + (1 if name == "mariadbd" else 15)
            while time.monotonic() < end:
                try:
                    os.kill(pid, 0)
                except OSError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if getattr(self, "_mariadb", None) is not None and self._mariadb.poll() is None:
            self._mariadb.kill()

    def state(self, job_id: str) -> str:
        """The job's state as accounting records it (``COMPLETED``, ``CANCELLED by 0``, ...), or
        ``""`` while slurmdbd has not recorded it yet (it does so a moment after the job ends)."""
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id], env=self.env,
                             capture_output=True, text=True).stdout.split()
        return out[0] if out else ""

    def wait_state(self, job_id: str, prefix: str, timeout: float = 120.0, poll: float = 0.5) -> str:
        """The job's accounting state once it starts with ``prefix`` (``CANCELLED``), polled until
        ``timeout`` s have passed; then the last state read (``""``: never recorded). Accounting is
        another process's record, written after the job ends: read once, right after ``scancel``,
        it can still be empty on a loaded machine (issue 74)."""
        end = time.monotonic() + timeout
        while True:
            got = self.state(job_id)
            if got.startswith(prefix) or time.monotonic() >= end:
                return got
            time.sleep(poll)
