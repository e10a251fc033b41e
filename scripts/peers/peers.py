"""What idmint's bench scripts share to run the real peers (scripts/peers/README.md): where
their sources are, building them (scripts/peers/build), running a harness and reading its
`round` / `summary` lines (scripts/peers/harness/PeerRounds.java), the load average, and the
median of the rounds that ran on a quiet machine.
"""

import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(HERE, "build")
PEER_NAMES = {"leaf": "Meituan Leaf", "uid": "Baidu uid-generator", "cosid": "CosId",
              "tinyid": "Didi Tinyid"}
FIELD = re.compile(r"(\w+)=(\S+)")


def add_source_args(parser, *peers):
    """Adds `--PEER-src DIR` per peer, defaulting to IDMINT_PEER_SRC."""
    for peer in peers:
        parser.add_argument(
            f"--{peer}-src", metavar="DIR", default=os.environ.get(f"IDMINT_{peer.upper()}_SRC"),
            help=f"a checkout of {PEER_NAMES[peer]} (env IDMINT_{peer.upper()}_SRC); "
                 "without it the peer is skipped or its model runs")


def default_load_max():
    """A round whose 1-minute load ends above this is noisy: the cores, plus one for the
    peer's own refill thread."""
    return os.cpu_count() + 1.0


def build(peer, src):
    """Builds one peer from its checkout; returns its classes directory."""
    result = subprocess.run([BUILD, f"--{peer}-src", src], capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        sys.exit(f"building {peer} from {src} failed")
    line = result.stdout.strip().splitlines()[-1]
    fields = dict(FIELD.findall(line))
    print(f"{PEER_NAMES[peer]}: built from {fields['src']} (commit {fields['commit']})", flush=True)
    return fields["classes"]


def run_harness(classpath, main, args):
    """Runs a harness; returns (its round lines, its summary lines), each a dict of fields."""
    cmd = ["java", "-cp", os.pathsep.join(classpath), main] + [str(a) for a in args]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        sys.exit(f"{' '.join(cmd)} failed ({result.returncode})")
    rounds, summaries = [], []
    for line in result.stdout.splitlines():
        kind = line.split(" ", 1)[0]
        if kind in ("round", "summary"):
            fields = dict(FIELD.findall(line))
            (rounds if kind == "round" else summaries).append(fields)
    if not rounds:
        sys.exit(f"{main} printed no rounds:\n{result.stdout}{result.stderr}")
    return rounds, summaries


def load1():
    """The 1-minute load average, as `uptime` prints it."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def kept_median(rounds):
    """Median ids/s of the rounds not flagged noisy (of all, when all were): (median, kept,
    total)."""
    quiet = [float(r["ids_per_s"]) for r in rounds if r.get("noisy") == "0"]
    values = quiet or [float(r["ids_per_s"]) for r in rounds]
    return statistics.median(values), len(quiet), len(rounds)


def mega(rate):
    return f"{rate / 1e6:.1f} M"
