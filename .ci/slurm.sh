#!/usr/bin/env bash
# A real single-node SLURM 22.05 cluster with accounting, for CI and for trying the launchers.
#
#   bash .ci/slurm.sh start    install (apt, once) and start munge, MariaDB, slurmdbd, slurmctld, slurmd
#   bash .ci/slurm.sh stop     stop them (by pid, reverse order)
#   bash .ci/slurm.sh status   what runs, and sinfo
#   bash .ci/slurm.sh env      the line to eval so sinfo/sbatch find this cluster: export SLURM_CONF=…
#   bash .ci/slurm.sh wipe     stop, then delete all state (accounting database included)
#
# Idempotent; needs root and no systemd. Every config, socket, database, log and spool lives under
# .ci/.slurm-state/ (ignored by git); only the apt packages live outside the repo. Ports: MariaDB
# 3307 (private), slurmctld 6817, slurmd 6818, slurmdbd 6819.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
STATE="${APM_SLURM_STATE:-$HERE/.slurm-state}"
ETC="$STATE/etc"
RUN="$STATE/run"
LOG="$STATE/log"
DB_PORT="${APM_SLURM_DB_PORT:-3307}"
DB_SOCK="$RUN/mariadb.sock"
MUNGE_SOCK="$RUN/munge.socket"
CLUSTER="apmci"
HOST="$(hostname -s)"
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
export SLURM_CONF="$ETC/slurm.conf"

say() { echo "slurm.sh: $*" >&2; }

# Wait up to $1 seconds for the command after it to succeed (each try limited to 5 s).
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until timeout 5 "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { say "timed out waiting for: $*"; return 1; }
    sleep 0.2
  done
}

alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  ((${#missing[@]} == 0)) && return 0
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

write_configs() {
  mkdir -p "$ETC" "$RUN" "$LOG" "$STATE/ctld" "$STATE/spool" "$STATE/munge"
  chmod 700 "$STATE/munge"
  [[ -f "$STATE/.gitignore" ]] || echo '*' > "$STATE/.gitignore"
  [[ -s "$STATE/munge/munge.key" ]] || { dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none; chmod 400 "$STATE/munge/munge.key"; }
  local cpus mem
  cpus="$(nproc)"
  mem="$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')"
  cat > "$ETC/slurm.conf" <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
AccountingStoragePass=$MUNGE_SOCK
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
KillWait=2
MinJobAge=600
MailProg=/bin/true
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$((mem * 9 / 10)) State=UNKNOWN
PartitionName=ci Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
  cat > "$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm-ci
StorageLoc=slurm_acct_db
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
EOF
  chmod 600 "$ETC/slurmdbd.conf"
}

start_munge() {
  alive "$RUN/munged.pid" && return 0
  munged --force --socket="$MUNGE_SOCK" --key-file="$STATE/munge/munge.key" --seed-file="$STATE/munge/seed" \
    --log-file="$LOG/munged.log" --pid-file="$RUN/munged.pid"
  wait_for 10 munge --socket="$MUNGE_SOCK" -n
}

sql() { mariadb --no-defaults --socket="$DB_SOCK" -u root -e "$1"; }

start_mariadb() {
  if ! alive "$RUN/mariadbd.pid"; then
    [[ -d "$STATE/mysql/mysql" ]] || mariadb-install-db --no-defaults --user=root --datadir="$STATE/mysql" \
      --auth-root-authentication-method=socket --skip-test-db >"$LOG/mariadb-install.log" 2>&1
    setsid mariadbd --no-defaults --user=root --datadir="$STATE/mysql" --socket="$DB_SOCK" \
      --pid-file="$RUN/mariadbd.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
      --log-error="$LOG/mariadbd.log" </dev/null >/dev/null 2>&1 &
  fi
  wait_for 30 mariadb-admin --no-defaults --socket="$DB_SOCK" -u root ping
  sql "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm-ci';
       CREATE DATABASE IF NOT EXISTS slurm_acct_db;
       GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

# Start daemon $1 (pid file name) unless it runs: the rest is its command line.
start_daemon() {
  local name=$1; shift
  alive "$RUN/$name.pid" && return 0
  setsid "$@" -D </dev/null >"$LOG/$name.out" 2>&1 &
}

start() {
  local began=$SECONDS
  install_packages
  write_configs
  start_munge
  start_mariadb
  start_daemon slurmdbd slurmdbd  # reads slurmdbd.conf next to $SLURM_CONF
  wait_for 120 bash -c "exec 3<>/dev/tcp/127.0.0.1/6819"  # first start creates the tables
  start_daemon slurmctld slurmctld -f "$SLURM_CONF"
  wait_for 30 sinfo
  wait_for 30 bash -c "sacctmgr -n list cluster format=cluster | grep -qw $CLUSTER"
  start_daemon slurmd slurmd -f "$SLURM_CONF"
  wait_for 30 bash -c "sinfo -h -o %T | grep -qE '^(idle|mixed|allocated)'"
  say "cluster '$CLUSTER' up in $((SECONDS - began)) s; export SLURM_CONF=$SLURM_CONF"
}

# Stop daemon with pid file $1 and wait for it to go.
stop_daemon() {
  local pidfile="$RUN/$1.pid"
  alive "$pidfile" || return 0
  local pid; pid="$(cat "$pidfile")"
  kill "$pid"
  wait_for 30 bash -c "! kill -0 $pid"
}

stop() {
  for d in slurmd slurmctld slurmdbd mariadbd munged; do stop_daemon "$d"; done
  say "stopped"
}

status() {
  for d in munged mariadbd slurmdbd slurmctld slurmd; do
    if alive "$RUN/$d.pid"; then echo "$d: running (pid $(cat "$RUN/$d.pid"))"; else echo "$d: stopped"; fi
  done
  alive "$RUN/slurmctld.pid" && sinfo
  return 0
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$SLURM_CONF" ;;
  wipe) stop; rm -rf "$STATE" ;;
  *) echo "usage: $0 start|stop|status|env|wipe" >&2; exit 2 ;;
esac
