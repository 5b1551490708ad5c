#!/bin/bash
# Stop a cluster started by scripts/slurm-up.sh BASEDIR, including jobs whose slurmstepd
# outlived the daemons, then delete BASEDIR (KEEP=1 keeps it, e.g. for the logs).
B=${1:?usage: slurm-down.sh BASEDIR}; export SLURM_CONF="$B/etc/slurm.conf"
if [ -f "$B/run/slurmctld.pid" ]; then
  scancel --quiet --partition=debug 2>/dev/null || true
  for i in $(seq 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
fi
pids=""; for d in slurmd slurmctld munged; do f="$B/run/$d.pid"; [ -f "$f" ] && pids="$pids $(cat "$f")"; done
[ -n "$pids" ] && kill $pids 2>/dev/null          # each daemon needs ~2 s after SIGTERM: in parallel
alive=""
for i in $(seq 100); do alive=""; for p in $pids; do kill -0 $p 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && break; sleep 0.1; done
[ -n "$alive" ] && kill -9 $alive 2>/dev/null
# leftover slurmstepd (+ job tree) ignore SIGTERM once slurmd is gone; ours carry SLURM_CONF=$B/...
stepds=$(for p in /proc/[0-9]*; do [ "$(readlink $p/exe 2>/dev/null)" = /usr/sbin/slurmstepd-wlm ] || continue
  tr '\0' '\n' < $p/environ 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" && echo ${p#/proc/}; done)
if [ -n "$stepds" ]; then all=$stepds; frontier=$stepds
  while [ -n "$frontier" ]; do
    frontier=$(ps -eo pid=,ppid= | awk -v f=" $(echo $frontier) " 'index(f, " " $2 " ") {print $1}'); all="$all $frontier"
  done; kill -9 $all 2>/dev/null; fi
[ "${KEEP:-0}" = 1 ] || rm -rf "$B"
exit 0
