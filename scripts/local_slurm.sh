#!/usr/bin/env bash
# A one-node Slurm on localhost, to try profiles/slurm on a laptop and to test it:
# munged, MariaDB + slurmdbd (so `sacct` works), slurmctld and slurmd, with two
# partitions (debug, the default, and batch) on the one node.
#
#   scripts/local_slurm.sh start    # fresh state, returns once the node is idle
#   eval "$(scripts/local_slurm.sh env)"   # SLURM_CONF for sinfo, squeue, sacct, snakemake
#   scripts/local_slurm.sh status
#   scripts/local_slurm.sh stop     # stops each daemon by its pid file; logs are kept
#
# Needs root and Debian's slurm-wlm, slurmdbd, munge and mariadb-server (apt-get install
# slurm-wlm slurmdbd munge mariadb-server). Everything lives in the state folder
# (LOCAL_SLURM_DIR, default /tmp/dnnroofline-slurm), except one symlink: the executor's
# job step strips SLURM_CONF before its `srun`, so /etc/slurm/slurm.conf points to our
# config while the cluster runs (refused if a Slurm is already configured there).
# Ports: LOCAL_SLURM_PORT (default 16817) for slurmctld, +1 slurmd, +2 slurmdbd,
# +3 MariaDB (127.0.0.1 only), apart from a real Slurm's 6817-6819.
set -euo pipefail

DIR=${LOCAL_SLURM_DIR:-/tmp/dnnroofline-slurm}
PORT=${LOCAL_SLURM_PORT:-16817}
CLUSTER=dnnroofline
# daemons in start order; stop goes backwards
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
SYSCONF=/etc/slurm/slurm.conf

die() {
    echo "local_slurm: ERROR: $*" >&2
    exit 1
}

pid_of() { # the live pid of a daemon, from its pid file; empty if it is not running
    local f="$DIR/run/$1.pid" pid
    [ -s "$f" ] || return 0
    pid=$(tr -dc 0-9 <"$f")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}

wait_for() { # wait_for SECONDS WHAT COMMAND...: poll until COMMAND succeeds
    local limit=$1 what=$2
    shift 2
    local deadline=$((SECONDS + limit))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if timeout 5 "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    echo "local_slurm: $what did not come up in ${limit}s; logs under $DIR/log:" >&2
    tail -n 20 "$DIR"/log/*.log >&2 || true
    stop_all
    exit 1
}

check_tools() {
    [ "$(id -u)" -eq 0 ] || die "needs root (the daemons run as root on this one node)"
    local t missing=()
    for t in munged mungekey mariadbd mariadb-install-db mariadb slurmdbd slurmctld slurmd \
        sinfo sacct sacctmgr; do
        command -v "$t" >/dev/null 2>&1 || missing+=("$t")
    done
    [ ${#missing[@]} -eq 0 ] ||
        die "missing ${missing[*]}: apt-get install slurm-wlm slurmdbd munge mariadb-server"
}

write_configs() {
    local host cpus mem
    host=$(hostname -s)
    cpus=$(nproc)
    # 90% of RAM in MB: a job's --mem must fit the node, or Slurm refuses it
    mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    cat >"$DIR/slurm.conf" <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/run/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/d
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# no cgroups in a container or CI VM: plain process tracking, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/slurmdbd
# sacct shows the executor's --comment (rule and wildcards of each job)
AccountingStoreFlags=job_comment
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((PORT + 2))
# the munge socket for talking to slurmdbd (AuthInfo covers slurmctld/slurmd only)
AccountingStoragePass=$DIR/run/munge.socket
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# finished jobs stay visible to squeue for 5 min (the executor's status command)
MinJobAge=300
KillWait=5
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=batch Nodes=$host MaxTime=INFINITE State=UP
EOF
    cat >"$DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/run/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 2))
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((PORT + 3))
StorageUser=slurm
StoragePass=local-slurm
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$DIR/slurmdbd.conf" # slurmdbd refuses a readable file holding a password
}

start() {
    check_tools
    if [ -n "$(pid_of slurmctld)" ]; then
        echo "local_slurm: already running (SLURM_CONF=$DIR/slurm.conf)"
        return 0
    fi
    if [ -e "$SYSCONF" ] && [ "$(readlink "$SYSCONF")" != "$DIR/slurm.conf" ]; then
        die "$SYSCONF exists: this machine has a Slurm of its own; use it (or move that file)"
    fi
    stop_all quiet # leftovers of a half-started cluster
    rm -rf "$DIR"
    mkdir -p "$DIR"/{run,log,state/ctld,state/d,mysql}
    chmod 755 "$DIR/run" # the munge socket: users other than root submit too
    write_configs
    export SLURM_CONF="$DIR/slurm.conf"
    mkdir -p "$(dirname "$SYSCONF")"
    ln -sfn "$SLURM_CONF" "$SYSCONF"

    mungekey -c -k "$DIR/munge.key" >/dev/null 2>&1 || die "mungekey failed"
    chmod 400 "$DIR/munge.key"
    munged --force --key-file="$DIR/munge.key" --socket="$DIR/run/munge.socket" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/run/munged.seed" || die "munged did not start: $DIR/log/munged.log"

    mariadb-install-db --user=root --datadir="$DIR/mysql" --skip-test-db \
        >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $DIR/log"
    mariadbd --user=root --datadir="$DIR/mysql" --socket="$DIR/run/mysql.sock" \
        --port=$((PORT + 3)) --bind-address=127.0.0.1 --pid-file="$DIR/run/mariadbd.pid" \
        --log-error="$DIR/log/mariadb.log" --skip-name-resolve >/dev/null 2>&1 &
    wait_for 30 MariaDB mariadb --socket="$DIR/run/mysql.sock" -e "select 1"
    mariadb --socket="$DIR/run/mysql.sock" -e "
        CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'local-slurm';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

    slurmdbd || die "slurmdbd did not start: $DIR/log/slurmdbd.log"
    wait_for 30 slurmdbd sacctmgr -n list cluster
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
    slurmctld || die "slurmctld did not start: $DIR/log/slurmctld.log"
    slurmd || die "slurmd did not start: $DIR/log/slurmd.log"
    wait_for 30 "the node" sh -c "sinfo -h -o %T | grep -qx idle"
    echo "local_slurm: up; partitions $(sinfo -h -o %R | tr '\n' ' ')(SLURM_CONF=$SLURM_CONF)"
}

stop_all() { # stop every daemon whose pid file names a live process
    local name pid i pids=()
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do # all at once: each takes ~2 s
        name=${DAEMONS[$i]}
        pid=$(pid_of "$name")
        [ -n "$pid" ] || continue
        kill "$pid" 2>/dev/null || true
        pids+=("$pid")
        [ "${1:-}" = quiet ] || echo "local_slurm: stopping $name ($pid)"
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    done
    if [ "$(readlink "$SYSCONF" 2>/dev/null)" = "$DIR/slurm.conf" ]; then rm -f "$SYSCONF"; fi
}

status() {
    local name pid up=0
    for name in "${DAEMONS[@]}"; do
        pid=$(pid_of "$name")
        echo "$name: ${pid:+running ($pid)}${pid:-stopped}"
        [ -n "$pid" ] && up=$((up + 1))
    done
    [ "$up" -eq ${#DAEMONS[@]} ]
}

case "${1:-}" in
start) start ;;
stop) stop_all ;;
status) status ;;
env) echo "export SLURM_CONF=$DIR/slurm.conf" ;;
*)
    echo "usage: $0 start|stop|status|env  (state in LOCAL_SLURM_DIR=$DIR)" >&2
    exit 2
    ;;
esac
