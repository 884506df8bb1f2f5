#!/usr/bin/env bash
# A one-node SLURM cluster on this machine for the tests: slurmctld and slurmd on localhost,
# munge authentication, no cgroups, no accounting daemon, and fake GPUs of a model (GRES gpu:h100,
# backed by links to /dev/null) so that GPU requests, a profile's `gpu_model` among them, are
# scheduled and recorded like on a real cluster. Besides the default partition `main`, the node is in a
# `gpu` and a `cpu` partition, those of profiles/slurm/partitions.example.yaml, so that the partition
# the SLURM plugin picks for each job is recorded. Memory is
# enforced as on a real cluster: without cgroups, slurmd samples each job's processes every second
# (jobacct_gather/linux) and kills a job whose memory outgrows its --mem (OverMemoryKill).
#
#   tests/slurm/cluster.sh start | stop | status      (as root; `start` installs the packages)
#
# `stop` leaves no process of the cluster behind (a job step whose job did not end with its signals
# waits for slurmctld forever, and slurmd for it), or fails naming what is left.
#
# BLINDSPOT_SLURM_DIR (default /tmp/blindspot-slurm) holds config, state, logs and PID files.
# Finished jobs stay visible to `scontrol show job` for MinJobAge, which is how the tests read
# what each job asked for without slurmdbd.
set -euo pipefail
BASE=${BLINDSPOT_SLURM_DIR:-/tmp/blindspot-slurm}
FAKE_GPUS=${BLINDSPOT_SLURM_GPUS:-4}
GPU_TYPE=${BLINDSPOT_SLURM_GPU_TYPE:-h100}
JOB_RECORD_SECONDS=${BLINDSPOT_SLURM_JOB_AGE:-7200}

say() { echo "[cluster] $*"; }
fail() {
  say "error: $*"
  for f in "$BASE"/log/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 15 "$f"; }; done
  exit 1
}
# A process that has not exited (an exited daemon stays a zombie where PID 1 does not reap it).
running() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; }
alive() { [ -s "$1" ] && running "$(cat "$1")"; }

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return
  export DEBIAN_FRONTEND=noninteractive
  apt-cache policy slurmctld | grep -q 'Candidate: [0-9]' || apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
  mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
  if [ ! -s /etc/munge/munge.key ]; then
    head -c 1024 /dev/urandom > /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  fi
  chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null || fail "munged did not start"
  cp /run/munge/munged.pid "$BASE/run/munged.pid"
}

write_config() {
  local hw cpus memory
  hw=$(slurmd -C | head -1)
  cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
  # The node offers more CPUs than the machine has (config_overrides lets slurmd accept that): the
  # tiny jobs spend most of their time in one-threaded start-up, and at the real count one 2-CPU job
  # holds the node while a core idles. What each job asks for is recorded as on a real cluster.
  cpus=${BLINDSPOT_SLURM_CPUS:-$((cpus * 2))}
  memory=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
  memory=$((memory * 9 / 10))  # leave the OS room; a job without --mem gets DefMemPerCPU, not the node
  for i in $(seq 0 $((FAKE_GPUS - 1))); do ln -sfn /dev/null "$BASE/dev/nvidia$i"; done
  cat > "$BASE/etc/slurm.conf" <<CONF
ClusterName=blindspot-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
MinJobAge=$JOB_RECORD_SECONDS
DefMemPerCPU=1000
KillWait=5
MailProg=/bin/true
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.pid
SlurmdSpoolDir=$BASE/spool/slurmd
StateSaveLocation=$BASE/spool/slurmctld
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory Gres=gpu:$GPU_TYPE:$FAKE_GPUS State=UNKNOWN
PartitionName=main Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=localhost MaxTime=INFINITE State=UP
PartitionName=cpu Nodes=localhost MaxTime=INFINITE State=UP
CONF
  printf 'AutoDetect=off\nNodeName=localhost Name=gpu Type=%s File=%s/dev/nvidia[0-%d]\n' "$GPU_TYPE" "$BASE" \
    $((FAKE_GPUS - 1)) \
    > "$BASE/etc/gres.conf"
  # Snakemake's SLURM job step drops SLURM_* variables, SLURM_CONF included: the config must be
  # where SLURM looks by default.
  mkdir -p /etc/slurm
  for f in slurm.conf gres.conf; do
    if [ -e "/etc/slurm/$f" ] && [ ! -L "/etc/slurm/$f" ]; then fail "/etc/slurm/$f exists and is not ours"; fi
    ln -sfn "$BASE/etc/$f" "/etc/slurm/$f"
  done
}

start() {
  [ "$(id -u)" = 0 ] || fail "must run as root"
  stop >/dev/null
  install_packages
  rm -rf "$BASE"
  mkdir -p "$BASE"/{etc,log,run,dev,spool/slurmd,spool/slurmctld}
  start_munge
  write_config
  /usr/sbin/slurmctld -i || fail "slurmctld did not start"
  /usr/sbin/slurmd -N localhost || fail "slurmd did not start"
  for _ in $(seq 300); do
    [ "$(sinfo -h -n localhost -o %T 2>/dev/null)" = idle ] && break
    sleep 0.2
  done
  [ "$(sinfo -h -n localhost -o %T)" = idle ] || fail "the node did not become idle: $(sinfo -N 2>&1)"
  timeout 30 srun -n1 -t 1 true || fail "a first srun failed"
  say "ready: $(sinfo -h -o '%P %D %c CPUs %m MB %G')"
}

stop() {
  if alive "$BASE/run/slurmctld.pid"; then
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    [ -z "${jobs// /}" ] || scancel $jobs 2>/dev/null || true
  fi
  for daemon in slurmd slurmctld munged; do
    local pidfile="$BASE/run/$daemon.pid" pid
    if alive "$pidfile" && [ "$(cat /proc/"$(cat "$pidfile")"/comm)" = "$daemon" ]; then
      pid=$(cat "$pidfile")
      kill -TERM "$pid"
      # The process, not its pidfile: slurmd removes the file at once, then waits for its job steps.
      for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
      ! running "$pid" || kill -KILL "$pid"
    fi
    rm -f "$pidfile"
  done
  # What runs from this cluster's folder without a pidfile: a daemon of an earlier stop, and job steps
  # whose job did not end with its signals (they wait for slurmctld forever).
  local left
  for _ in $(seq 50); do
    left=$(cluster_processes)
    [ -n "$left" ] || break
    kill -KILL $left 2>/dev/null || true
    sleep 0.1
  done
  [ -z "$(cluster_processes)" ] || fail "processes of the cluster did not end: $(ps -o pid=,args= -p "$(echo $left | tr " " ,)")"
  for f in slurm.conf gres.conf; do
    [ "$(readlink "/etc/slurm/$f" 2>/dev/null)" != "$BASE/etc/$f" ] || rm -f "/etc/slurm/$f"
  done
  say "stopped"
}

# The SLURM processes (daemons and job steps) that run in this cluster's folder.
cluster_processes() {
  local pid
  # One name a call: pgrep warns about a pattern longer than a process name (15 characters).
  for pid in $(pgrep -x slurmd; pgrep -x slurmctld; pgrep -x slurmstepd); do
    case "$(readlink "/proc/$pid/cwd" 2>/dev/null)" in "$BASE"/*) echo "$pid" ;; esac
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) alive "$BASE/run/slurmctld.pid" && alive "$BASE/run/slurmd.pid" && sinfo ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
