#!/usr/bin/env bash
# Launching with Slurm on a real one-node Slurm of the test's own: munged, slurmctld and slurmd
# run in the foreground, each in its own process group, with keys, configuration, state and
# logs under a temporary folder and their ports free ones (proctrack/linuxproc, task/none, no
# accounting, no systemd). Then srun runs a five-task ps job (task 0 coordinates on the port
# derived from SLURM_JOB_ID, task 1 serves, three work) and a three-task dp job (--port given),
# each from srun's variables alone; both must finish and write their reports. Every daemon is
# stopped, and the folder removed, however the test ends. Exit 77 (skipped) without root or
# without Slurm and munge.
# usage: slurm_test.sh TROUPE_FMNIST
set -euo pipefail
fmnist=$(realpath "$1")
bound=300  # seconds: every wait's bound; none comes near it
skip() { echo "slurm_test: skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "it needs root (slurmd runs the tasks as their user)"
for tool in munged slurmctld slurmd srun sinfo; do
  command -v "$tool" >/dev/null || skip "$tool is missing (Debian: slurm-wlm, munge)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/troupe-slurm.XXXXXX")
chmod 755 "$work"
daemons=()
stop_all() {
  for pid in "${daemons[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in "${daemons[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap stop_all EXIT
trap 'exit 1' INT TERM
show_logs() { tail -n 30 "$work"/*.log >&2 || true; }

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Starts a daemon in a process group of its own (setsid), its output in NAME.log.
start() {
  local name=$1; shift
  setsid "$@" >"$work/$name.log" 2>&1 &
  daemons+=($!)
}
# Waits until COMMAND succeeds, at most $bound seconds.
until_ok() {
  local deadline=$((SECONDS + bound))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "slurm_test: gave up waiting for: $*" >&2; show_logs; exit 1; }
    sleep 0.1
  done
}

# -- munge ---------------------------------------------------------------------------------------
mkdir -m 700 "$work/munge"
head -c 1024 /dev/urandom >"$work/munge/munge.key"
chmod 400 "$work/munge/munge.key"
socket=$work/munge/munge.socket
start munged munged --foreground --force --key-file="$work/munge/munge.key" --socket="$socket" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
  --seed-file="$work/munge/munged.seed"
until_ok test -S "$socket"

# -- slurmctld and slurmd -------------------------------------------------------------------------
mkdir -p "$work/state" "$work/spool"
export SLURM_CONF=$work/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=troupe-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
start slurmctld slurmctld -D -i -f "$SLURM_CONF"
start slurmd slurmd -D -N localhost -f "$SLURM_CONF"
idle() { sinfo -h -o %T | grep -qx idle; }
until_ok idle

# -- the jobs -------------------------------------------------------------------------------------
export TROUPE_SECRET="slurm-test-$RANDOM-$RANDOM-$RANDOM-secret"
common=(--epochs 1 --train-limit 2000 --test-limit 500 --blas-threads 1 --log-level info)
run() {  # NAME WORKERS SRUN_ARGS... -- FLAGS...: WORKERS the report must name
  local name=$1 workers=$2; shift 2
  local srun_args=()
  while [ "$1" != -- ]; do srun_args+=("$1"); shift; done
  shift
  if ! timeout "$bound" srun --overcommit --kill-on-bad-exit=1 --chdir "$work" "${srun_args[@]}" \
    "$fmnist" "${common[@]}" --report "$work/$name.json" "$@" >"$work/$name.log" 2>&1; then
    echo "slurm_test: the $name job failed" >&2
    show_logs
    exit 1
  fi
  /usr/bin/python3 - "$work/$name.json" "$name" "$workers" <<'PY' || { show_logs; exit 1; }
import json, sys
report, name, workers = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
assert report["status"] == "finished", report["status"]
assert report["mode"] == name, report["mode"]
assert len(report["epochs"]) == 1, report["epochs"]
assert len(report["workers"]) == workers, report["workers"]
print(f"slurm_test: the {name} job finished with {workers} workers, test accuracy "
      f"{report['test_accuracy']:.3f}")
PY
}
run ps 3 -n 5 -- --servers 1
run dp 3 -n 3 -- --mode dp --port "$(free_port)"
echo "slurm_test: passed"
