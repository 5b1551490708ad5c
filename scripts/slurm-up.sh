#!/bin/bash
# Start a throwaway one-node SLURM (munged + slurmctld + slurmd) on this machine, for tests and
# for trying `thub train --launcher slurm --cluster local`. No systemd, no cgroups.
# Recipe and measurements: docs/slurm.md ("A local SLURM").
#
# usage: eval "$(scripts/slurm-up.sh BASEDIR)"      (prints `export SLURM_CONF=...`)
# env:   SLURMCTLD_PORT (6817) SLURMD_PORT (6818) SLURM_NODE_NAME (hostname -s)
# BASEDIR is a scratch folder for config, state, logs and sockets: it is wiped and recreated.
# Stop it with scripts/slurm-down.sh BASEDIR.
set -euo pipefail
B=${1:?usage: slurm-up.sh BASEDIR}
CTLD_PORT=${SLURMCTLD_PORT:-6817}; SLURMD_PORT=${SLURMD_PORT:-6818}
NODE=${SLURM_NODE_NAME:-$(hostname -s)}
need() { command -v "$1" >/dev/null 2>&1; }
if ! need slurmctld || ! need slurmd || ! need munged || ! need sbatch; then
  bash "$(dirname "$0")/system-packages.sh"  # apt-get as root or with sudo; else it says how
  if ! need slurmctld || ! need slurmd || ! need munged || ! need sbatch; then
    echo "slurm-up.sh: SLURM is not installed: sudo bash scripts/system-packages.sh" >&2; exit 1
  fi
fi
rm -rf "$B"; mkdir -p "$B"/{etc,state/ctld,state/d,log,run}
chmod 700 "$B/etc"; chmod 755 "$B/run"        # munged: the socket dir must be a+x
# our own key: munged run as root rejects /etc/munge/munge.key (owned by the munge user)
mungekey --create --keyfile="$B/etc/munge.key"
chmod 600 "$B/etc/munge.key"
# the node line from slurmd -C avoids "Node reconfigured socket/core boundaries"
HW=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //')
MEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$HW")
HW=$(sed "s/RealMemory=[0-9]*/RealMemory=$((MEM * 95 / 100))/" <<<"$HW")
cat > "$B/etc/slurm.conf" <<CONF
ClusterName=localci
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$B/run/munge.socket
StateSaveLocation=$B/state/ctld
SlurmdSpoolDir=$B/state/d
SlurmctldPidFile=$B/run/slurmctld.pid
SlurmdPidFile=$B/run/slurmd.pid
SlurmctldLogFile=$B/log/slurmctld.log
SlurmdLogFile=$B/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
EnforcePartLimits=ALL
KillWait=5
MinJobAge=300
SchedulerParameters=batch_sched_delay=0
NodeName=$NODE NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 $HW State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$B/etc/slurm.conf"
wait_for() { local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $end ] && return 1; sleep 0.2; done; }
munged --socket="$B/run/munge.socket" --key-file="$B/etc/munge.key" --log-file="$B/log/munged.log" \
       --pid-file="$B/run/munged.pid" --seed-file="$B/run/munged.seed"
# the waits only guard against a daemon that never comes up (generous: a busy machine is slow)
wait_for 60 test -S "$B/run/munge.socket" || { cat "$B/log/munged.log" >&2; exit 1; }
slurmctld -f "$SLURM_CONF"
wait_for 120 bash -c "scontrol ping | grep -q UP" || { tail -20 "$B/log/slurmctld.log" >&2; exit 1; }
slurmd -f "$SLURM_CONF" -N "$NODE"
wait_for 180 bash -c "sinfo -h -n $NODE -o %t | grep -qx idle" || { tail -20 "$B/log/slurmd.log" >&2; exit 1; }
echo "export SLURM_CONF=$SLURM_CONF"
