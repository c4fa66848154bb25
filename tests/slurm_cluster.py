"""A private, throw-away single-node Slurm, so the jobs in jobs/ are tested under a real sbatch/srun.

CI installs Slurm (Debian bookworm, 22.05) with:

    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        slurmctld slurmd slurm-client libpmix2

Everything lives in one scratch directory: the config (reached through SLURM_CONF), state, spool,
logs and pid files; /etc/slurm is never read or written. Authentication is `auth/none` so no munge
daemon is needed. The one node declares 4 CPUs whatever the machine has (`config_overrides`), so
4-rank jobs fit on a 2-core runner. Ports are picked free at start so concurrent runs do not clash.
The daemons run as the current user; only root has been tried.
"""
import contextlib
import random
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("sbatch", "sinfo", "squeue", "scancel", "srun")
# Daemons live in sbin, which a non-root PATH often lacks.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
# Inherited Slurm/PMI variables (e.g. when pytest itself runs inside a job) would steer our
# sbatch/srun/mpiexec to the wrong cluster or process group.
FOREIGN_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "PMI_", "PMIX_")


def clean_env(**extra):
    """os.environ without foreign Slurm/PMI variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_PREFIXES)}
    env.update(extra)
    return env


def missing_binaries():
    """Names of the Slurm programs the cluster needs that are not installed."""
    return [name for name in DAEMONS + CLIENTS if shutil.which(name, path=SEARCH_PATH) is None]


def _free_ports(n):
    """n distinct free TCP ports (all held open together, so none is handed out twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _tail(path, lines=20):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class SlurmCluster:
    """slurmctld + slurmd on 127.0.0.1 with one partition `debug` holding one 4-CPU node."""

    def __init__(self, root, cpus=4):
        self.root = Path(root)
        self.cpus = cpus
        self.conf = self.root / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]  # slurmd finds its node by short hostname

    def env(self, **extra):
        """clean_env() pointed at this cluster, plus `extra`."""
        return clean_env(PATH=SEARCH_PATH, SLURM_CONF=str(self.conf), **extra)

    def _write_config(self):
        user = getpass.getuser()
        ctld_port, slurmd_port = _free_ports(2)
        # MPICH names its shared-memory segments after the job and step ids: a fresh cluster
        # that counted from 1 again could meet the segments of an earlier run's killed job 1.
        first_job_id = random.randrange(10_000, 60_000_000)
        for sub in ("state", "spool"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(f"""\
ClusterName=mpicoll-test
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/none
CredType=cred/none
SlurmUser={user}
SlurmdUser={user}
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd.pid
SlurmctldLogFile={self.root}/slurmctld.log
SlurmdLogFile={self.root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
ReturnToService=2
MinJobAge=5
FirstJobId={first_job_id}
SlurmdParameters=config_overrides
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def start(self, timeout=30):
        """Start both daemons and wait until the node is idle; raise with the logs' tails if not."""
        self._write_config()
        for daemon in DAEMONS:  # each forks into the background and writes its pid file
            subprocess.run([shutil.which(daemon, path=SEARCH_PATH)], env=self.env(),
                           check=True, timeout=30)
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env(), timeout=10,
                                   capture_output=True, text=True).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"Slurm node not idle after {timeout} s (state {state!r})\n"
            f"--- slurmctld.log\n{_tail(self.root / 'slurmctld.log')}\n"
            f"--- slurmd.log\n{_tail(self.root / 'slurmd.log')}")

    def stop(self, timeout=15):
        """Cancel leftover jobs (so no slurmstepd outlives us), then stop the daemons by pid file.

        Safe to call after a failed or partial start; the daemons are stopped even if cancelling fails.
        """
        pids = self._pids()
        try:
            if _alive(pids.get("slurmctld")):  # without it, clients retry for ~10 s each
                self._cancel_jobs(timeout)
        finally:
            self._stop_daemons(pids.values(), timeout)

    def _cancel_jobs(self, timeout):
        subprocess.run(["scancel", "--user", getpass.getuser()], env=self.env(),
                       timeout=10, capture_output=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and subprocess.run(
                ["squeue", "-h"], env=self.env(), timeout=10,
                capture_output=True, text=True).stdout.strip():
            time.sleep(0.5)

    def _pids(self):
        """{daemon: pid} for the daemons that wrote a pid file."""
        pids = {}
        for daemon in DAEMONS:
            with contextlib.suppress(OSError, ValueError):
                pids[daemon] = int((self.root / f"{daemon}.pid").read_text())
        return pids

    @staticmethod
    def _stop_daemons(pids, timeout):
        """SIGTERM all, then SIGKILL whatever outlived `timeout`."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in filter(_alive, pids):
                with contextlib.suppress(ProcessLookupError):  # it may exit meanwhile
                    os.kill(pid, sig)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and any(map(_alive, pids)):
                time.sleep(0.1)


def _alive(pid):
    """True while `pid` runs; a zombie counts as gone (this container's PID 1 reaps it late)."""
    if pid is None:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
