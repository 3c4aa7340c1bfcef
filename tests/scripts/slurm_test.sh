#!/usr/bin/env bash
# deploy/slurm/rekindle.sbatch on a real single-machine Slurm (slurmctld + slurmd + munged, all in a
# temporary folder with their own ports): sbatch --nodes=1 --ntasks-per-node=2 trains a small job
# to the end; the generated configuration has the allocated node with two ranks and the job
# exits 0. Every daemon started here is killed at the end, pass or fail.
#
# usage: slurm_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
. "$(dirname "$0")/lib.sh"
src=$1
bin=$2
require_tool slurmctld slurmctld
require_tool slurmd slurmd
require_tool sbatch slurm-client
require_tool munged munge
require_tool mungekey munge
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: a Slurm daemon of its own needs root (slurmd tracks the job's processes)"
  exit 77
fi

dir=$(mktemp -d /tmp/rekindle-slurm-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null || true; done
  pkill -9 -f -- "--data-dir $dir/data" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.log "$dir"/job.out; do [ -f "$f" ] && { echo "---- $f"; tail -n 40 "$f"; }; done
  exit 1
}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

node=$(hostname -s)
mkdir -p "$dir/state" "$dir/spool" "$dir/data"
mungekey -c -k "$dir/munge.key" >/dev/null 2>&1 || fail "mungekey could not make a key"
chmod 600 "$dir/munge.key"
setsid munged -F --force -S "$dir/munge.sock" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" >"$dir/munged.out" 2>&1 &
pids+=($!)
disown $!  # killed at the end without a note

cat >"$dir/slurm.conf" <<CONF
ClusterName=rekindletest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=rekindle Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf
for i in $(seq 50); do [ -S "$dir/munge.sock" ] && break; sleep 0.1; done
[ -S "$dir/munge.sock" ] || fail "munged did not start"
setsid slurmctld -D -i -f "$SLURM_CONF" >"$dir/slurmctld.out" 2>&1 &
pids+=($!)
disown $!  # killed at the end without a note
setsid slurmd -D -f "$SLURM_CONF" -N "$node" >"$dir/slurmd.out" 2>&1 &
pids+=($!)
disown $!  # killed at the end without a note
ready=
for i in $(seq 120); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qx 'idle'; then ready=1; break; fi
  sleep 0.5
done
[ -n "$ready" ] || fail "the Slurm node did not become idle: $(sinfo 2>&1)"

cat >"$dir/job.toml" <<'JOB'
[job]
name = "slurm"
steps = 30
global_batch = 4
micro_batch = 2
seed = 7

[model]
layers = 2
heads = 2
width = 32
seq_len = 16

[checkpoint]
snapshot_every = 5
persist_every = 0
JOB

code=0
(cd "$dir" && REKINDLE_BIN=$bin REKINDLE_DATA_DIR=$dir/data REKINDLE_CONFIG=$dir/generated.toml REKINDLE_PORT=$(free_port) \
  timeout 240 sbatch --wait --nodes=1 --ntasks-per-node=2 --output="$dir/job.out" \
  "$src/deploy/slurm/rekindle.sbatch" "$dir/job.toml" >"$dir/sbatch.out" 2>&1) || code=$?
[ "$code" -eq 0 ] || fail "sbatch --wait exited $code: $(cat "$dir/sbatch.out")"
grep -q "name = \"$node\"" "$dir/generated.toml" || fail "the allocated node is not in the generated configuration"
grep -q "ranks_per_node = 2" "$dir/generated.toml" || fail "--ntasks-per-node=2 did not become ranks_per_node"
grep -q "rekindle: 1 node(s) ($node), 2 rank(s) per node" "$dir/job.out" || fail "the job's output: $(cat "$dir/job.out")"
report=$dir/data/report.json
[ -f "$report" ] || fail "no report.json"
/usr/bin/python3 - "$report" <<'PY' || fail "the report: $(cat "$report")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["state"] == "completed", r["state"]
assert r["step"] == 30, r["step"]
assert r["world"] == 2, r["world"]
PY
echo "slurm: ok (a job of 2 ranks trained 30 steps under sbatch)"
