#!/usr/bin/env bash
# A one-node SLURM cluster for one command: munged, slurmctld and slurmd with their
# configuration, state and logs under DIR, then COMMAND (srun ...) with SLURM_CONF set.
#
#   unshare --net --pid --fork --kill-child --mount-proc bash slurm.sh DIR COMMAND...
#
# Run it (as root) in fresh network and pid namespaces, as the test does: the daemons bind
# only that namespace's addresses (127.0.0.1 and 10.254.0.1 on its loopback; SLURM needs one
# address besides loopback to resolve its listening address), and when this script, the
# namespace's pid 1, exits or is killed, the kernel kills every daemon with it.
set -euo pipefail
dir=$1; shift
ip link set lo up
ip addr add 10.254.0.1/32 dev lo
host=$(hostname -s)
mkdir -p "$dir"/{munge,state,spool,log}
chmod 711 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/sock" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
cat > "$dir/slurm.conf" <<CONF
ClusterName=gptest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -i
slurmd
ready=
for _ in $(seq 150); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)'; then ready=1; break; fi
  sleep 0.1
done
if [ -z "$ready" ]; then
  echo "slurm.sh: the node did not become idle in 15 s:" >&2
  sinfo -h -o '%N %T %E' >&2 || true
  tail -n 5 "$dir"/log/*.log >&2 || true
  exit 99
fi
srun --version >&2
"$@"
