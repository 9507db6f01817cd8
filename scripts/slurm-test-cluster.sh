#!/usr/bin/env bash
# slurm-test-cluster.sh - a throwaway single-node Slurm cluster for tests.
#
# Usage:
#   scripts/slurm-test-cluster.sh start DIR   # install (if needed), configure, start, wait for idle
#   scripts/slurm-test-cluster.sh stop DIR    # stop the daemons started by `start DIR`
#   scripts/slurm-test-cluster.sh status DIR  # show which of the daemons are alive
#
# `start` prints exactly one line on stdout, `export SLURM_CONF=DIR/slurm.conf`,
# meant for the caller to eval:
#     eval "$(scripts/slurm-test-cluster.sh start /tmp/slurm-test)"
# Everything else (progress, errors) goes to stderr.
#
# Everything the cluster writes lives under DIR: slurm.conf, cgroup.conf, the
# munge key, socket, pid/log/state/spool files. Nothing is written under /etc
# (apt may create its own /etc/munge/munge.key when it installs munge; it is
# not used). DIR should have a short absolute path: munged's Unix socket path
# must fit in 108 bytes.
#
# Finished jobs: `scontrol show job ID` (and `squeue -t all`) show the final
# state for MinJobAge seconds; DIR/log/jobcomp.log and `sacct -c` keep it for
# good. Plain `sacct` fails: there is no slurmdbd (accounting_storage/none).
#
# Needs root (to install Debian packages and to run slurmd, which starts job
# steps as the submitting user). Debian packages used:
#   slurmctld slurmd slurm-client munge   (Slurm 22.05 on Debian 12)
#
# Environment knobs (all optional):
#   SLURM_TEST_CPUS         CPUs advertised for the node (default: nproc; a
#                           larger number overcommits the machine)
#   SLURM_TEST_LICENSES     cluster licenses (default: lanes:8)
#   SLURM_TEST_MIN_JOB_AGE  seconds a finished job stays visible to
#                           `scontrol show job` / `squeue` (default: 300)
#   SLURM_TEST_INACTIVE_LIMIT  seconds before an allocation whose srun is gone
#                           is killed (default: 30; 0 = never)
#   SLURM_TEST_PORT         slurmctld port; slurmd uses PORT+1 (default: 6817);
#                           two clusters on one machine need different ports
#   SLURM_TEST_TIMEOUT      seconds to wait for the node to become idle (default: 60)
#
# Exit codes: 0 ok; 1 failure (message on stderr); 2 usage error;
#             3 the packages are missing and could not be installed
#               (tests should skip, saying so).

set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge)
# Binaries that must exist once the packages are installed.
BINARIES=(munged slurmctld slurmd srun sbatch squeue sinfo scontrol scancel)

log() { printf 'slurm-test-cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

have_binaries() {
    local b
    for b in "${BINARIES[@]}"; do
        command -v "$b" >/dev/null 2>&1 || return 1
    done
}

install_packages() {
    if have_binaries; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        log "Slurm is not installed and this is not root: cannot install ${PACKAGES[*]}"
        exit 3
    fi
    log "installing ${PACKAGES[*]} (apt-get)"
    # Keep maintainer scripts from starting munge/slurm services of their own:
    # invoke-rc.d consults /usr/sbin/policy-rc.d, exit 101 means "do not start".
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        created_policy=1
    fi
    local ok=1
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${PACKAGES[@]}" >&2; then
        log "apt-get install failed; running apt-get update and retrying"
        if ! { apt-get update -q >&2 &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                "${PACKAGES[@]}" >&2; }; then
            ok=0
        fi
    fi
    if [ "$created_policy" -eq 1 ]; then
        rm -f "$policy"
    fi
    if [ "$ok" -ne 1 ] || ! have_binaries; then
        log "could not install the Slurm packages (${PACKAGES[*]})"
        exit 3
    fi
}

# port_in_use PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pid_alive PIDFILE NAME: print the pid if the file names a live process whose
# command name is NAME (guards against a recycled pid).
pid_alive() {
    local file=$1 name=$2 pid comm
    [ -s "$file" ] || return 1
    pid=$(tr -dc '0-9' <"$file")
    [ -n "$pid" ] || return 1
    [ -r "/proc/$pid/comm" ] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [ "$comm" = "$name" ] || return 1
    # An exited daemon waiting to be reaped is not alive.
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
    printf '%s\n' "$pid"
}

# wait_gone PID SECONDS: wait until PID has exited; 1 if it is still there.
wait_gone() {
    local pid=$1 deadline=$((SECONDS + $2))
    while [ -e "/proc/$pid" ]; do
        # A zombie is gone for our purposes (its parent will reap it).
        if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; then
            return 0
        fi
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# stop_pidfile PIDFILE NAME: SIGTERM the daemon, then SIGKILL after 10 s.
stop_pidfile() {
    local file=$1 name=$2 pid
    if ! pid=$(pid_alive "$file" "$name"); then
        rm -f "$file"
        return 0
    fi
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" 10; then
        log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid" 5 || die "$name (pid $pid) is still running"
    fi
    rm -f "$file"
}

# Job step daemons (slurmstepd) outlive slurmd. They inherit slurmd's
# environment, so ours are the ones whose SLURM_CONF is this cluster's config.
our_stepds() {
    local conf=$1 p pid
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || continue
        if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf"; then
            printf '%s\n' "$pid"
        fi
    done
}

# descendants PID...: the given pids and all their descendants.
descendants() {
    ps -eo pid=,ppid= | awk -v roots="$*" '
        { parent[$1] = $2 }
        END {
            n = split(roots, queue, " ")
            for (i = 1; i <= n; i++) seen[queue[i]] = 1
            for (i = 1; i <= n; i++)
                for (p in parent)
                    if (parent[p] == queue[i] && !(p in seen)) { seen[p] = 1; queue[++n] = p }
            for (i = 1; i <= n; i++) print queue[i]
        }'
}

cmd_stop() {
    local dir=$1 conf=$1/slurm.conf pid
    [ -d "$dir" ] || { log "$dir does not exist; nothing to stop"; return 0; }
    # Cancel whatever is still queued or running while slurmctld can do it.
    if pid_alive "$dir/run/slurmctld.pid" slurmctld >/dev/null && [ -f "$conf" ]; then
        local jobs
        jobs=$(SLURM_CONF=$conf timeout 10 squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            log "cancelling jobs: $(tr "\n" " " <<<"$jobs")"
            # shellcheck disable=SC2086
            SLURM_CONF=$conf timeout 10 scancel $jobs 2>/dev/null || true
            local deadline=$((SECONDS + 15))
            while [ "$SECONDS" -lt "$deadline" ] &&
                [ -n "$(our_stepds "$conf")" ]; do
                sleep 0.2
            done
        fi
    fi
    stop_pidfile "$dir/run/slurmd.pid" slurmd
    stop_pidfile "$dir/run/slurmctld.pid" slurmctld
    # Any step daemon that survived the cancel (e.g. slurmctld was already
    # dead), with the job processes it started.
    local stepds victims
    stepds=$(our_stepds "$conf")
    if [ -n "$stepds" ]; then
        # shellcheck disable=SC2086
        victims=$(descendants $stepds)
        log "killing leftover slurmstepd and its tasks (pids $(tr "\n" " " <<<"$victims"))"
        # shellcheck disable=SC2086
        kill -KILL $victims 2>/dev/null || true
        for pid in $victims; do
            wait_gone "$pid" 5 || die "pid $pid is still running"
        done
    fi
    stop_pidfile "$dir/run/munged.pid" munged
    log "stopped"
}

cmd_status() {
    local dir=$1 name pid rc=0
    for name in munged slurmctld slurmd; do
        if pid=$(pid_alive "$dir/run/$name.pid" "$name"); then
            log "$name running (pid $pid)"
        else
            log "$name not running"
            rc=1
        fi
    done
    return "$rc"
}

write_config() {
    local dir=$1 host=$2 cpus=$3
    local port=${SLURM_TEST_PORT:-6817}
    local licenses=${SLURM_TEST_LICENSES:-lanes:8}
    local min_job_age=${SLURM_TEST_MIN_JOB_AGE:-300}
    local overrides=""
    # Memory for --mem requests: what the machine has, less 10 %, so slurmd
    # never finds less than configured.
    local mem_mb
    mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
    if [ "$cpus" -ne "$(nproc)" ]; then
        # Trust the configured CPU count instead of what slurmd detects.
        overrides="SlurmdParameters=config_overrides"
    fi
    cat >"$dir/slurm.conf" <<EOF
# Generated by scripts/slurm-test-cluster.sh: single-node test cluster.
ClusterName=lanestest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root

# munge, with its socket under this directory instead of /run/munge.
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket

# Nothing here relies on systemd or cgroups (a container may have neither):
# job processes are tracked through /proc, tasks are not bound to CPUs.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# No slurmdbd (it needs a MySQL/MariaDB server), so sacct reports
# "accounting storage is disabled". A job completion log still records every
# finished job; read it with "sacct -c" or directly.
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.log
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true

SchedulerType=sched/backfill
# Start pending jobs on the next background pass (about 1 s) after a job ends
# instead of waiting for the default 3 s batch_sched_delay.
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
$overrides

StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/plugstack.conf

# Quick turnaround for tests.
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
# An allocation whose srun died without cancelling it (e.g. srun's whole
# process group got SIGKILL) is ended after this many seconds (plus up to
# about as much again for the ping cycle) instead of running forever.
InactiveLimit=${SLURM_TEST_INACTIVE_LIMIT:-30}
KillWait=5
MinJobAge=$min_job_age
MessageTimeout=10

Licenses=$licenses

NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    cat >"$dir/cgroup.conf" <<EOF
# Generated by scripts/slurm-test-cluster.sh: nothing is constrained.
# slurmd loads a cgroup plugin (v1 or v2, autodetected) even when no cgroup
# plugin is configured elsewhere; on a cgroup v2 host without systemd it would
# try to reach systemd over D-Bus, which IgnoreSystemd turns off.
IgnoreSystemd=yes
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainSwapSpace=no
ConstrainDevices=no
EOF
    : >"$dir/plugstack.conf"
}

cmd_start() {
    local dir=$1 t0=$SECONDS
    install_packages
    [ "$(id -u)" -eq 0 ] || die "start must run as root (slurmd needs it)"

    case $dir in
    *[[:space:]]*) die "DIR must not contain whitespace (slurm.conf paths cannot): $dir" ;;
    esac
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd -P)
    local conf=$dir/slurm.conf
    if pid_alive "$dir/run/slurmctld.pid" slurmctld >/dev/null ||
        pid_alive "$dir/run/slurmd.pid" slurmd >/dev/null ||
        pid_alive "$dir/run/munged.pid" munged >/dev/null; then
        die "a cluster is already running from $dir; run: $0 stop $dir"
    fi
    local sock=$dir/munge/munge.socket
    [ "${#sock}" -lt 100 ] || die "path too long for a Unix socket: $sock"
    local port=${SLURM_TEST_PORT:-6817} p
    for p in "$port" $((port + 1)); do
        if port_in_use "$p"; then
            die "port $p is already in use (another Slurm?); set SLURM_TEST_PORT to another base port"
        fi
    done

    local host cpus
    host=$(hostname -s)
    cpus=${SLURM_TEST_CPUS:-$(nproc)}
    case $cpus in
    '' | *[!0-9]* | 0) die "SLURM_TEST_CPUS must be a positive integer, not '$cpus'" ;;
    esac

    # Fresh state each start: no jobs or reservations carried over.
    rm -rf "$dir/state" "$dir/spool" "$dir/run" "$dir/log" "$dir/munge"
    mkdir -p "$dir/state" "$dir/spool/$host" "$dir/run" "$dir/log" "$dir/munge"
    # munged refuses group/world-writable directories on its paths.
    chmod 755 "$dir"
    chmod 755 "$dir/munge"
    write_config "$dir" "$host" "$cpus"
    # From here on, a failure stops whatever was started.
    STARTED_DIR=$dir
    trap 'rc=$?; if [ "$rc" -ne 0 ]; then log "start failed; stopping what was started"; cmd_stop "$STARTED_DIR" || true; fi' EXIT

    # munge: own key, socket, pid, log and seed under DIR.
    if [ ! -s "$dir/munge.key" ]; then
        (umask 077 && dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none)
    fi
    chmod 600 "$dir/munge.key"
    log "starting munged"
    # --force: munged otherwise refuses to start when a directory on the
    # key/log/socket paths is group- or world-writable without the sticky bit
    # (e.g. DIR under a 0777 directory); a cluster for tests does not care.
    munged --force \
        --key-file="$dir/munge.key" \
        --socket="$sock" \
        --pid-file="$dir/run/munged.pid" \
        --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" ||
        die "munged failed to start; see $dir/log/munged.log"
    local deadline=$((SECONDS + 10))
    until [ -S "$sock" ] && pid_alive "$dir/run/munged.pid" munged >/dev/null; do
        [ "$SECONDS" -lt "$deadline" ] || die "munged did not come up; see $dir/log/munged.log"
        sleep 0.1
    done
    munge --socket="$sock" -n | unmunge --socket="$sock" >/dev/null ||
        die "munge round trip failed; see $dir/log/munged.log"

    export SLURM_CONF=$conf
    log "starting slurmctld"
    # -c: start clean, ignoring any saved state; -i: ignore errors in state files.
    slurmctld -c -i || die "slurmctld failed to start; see $dir/log/slurmctld.log"
    local started=$SECONDS
    deadline=$((SECONDS + 20))
    until timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; do
        if [ "$SECONDS" -ge "$deadline" ] ||
            { [ "$SECONDS" -ge $((started + 2)) ] &&
                ! pid_alive "$dir/run/slurmctld.pid" slurmctld >/dev/null; }; then
            tail -n 20 "$dir/log/slurmctld.log" >&2 || true
            die "slurmctld did not come up; see $dir/log/slurmctld.log"
        fi
        sleep 0.2
    done

    log "starting slurmd"
    started=$SECONDS
    slurmd || die "slurmd failed to start; see $dir/log/slurmd.log"

    local timeout=${SLURM_TEST_TIMEOUT:-60} state=""
    deadline=$((SECONDS + timeout))
    while :; do
        state=$(timeout 5 sinfo -h -n "$host" -o %T 2>/dev/null || true)
        case $state in
        idle) break ;;
        esac
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 20 "$dir/log/slurmd.log" >&2 || true
            die "node $host not idle after ${timeout}s (state: ${state:-unknown}); see $dir/log/"
        fi
        if [ "$SECONDS" -ge $((started + 2)) ] &&
            ! pid_alive "$dir/run/slurmd.pid" slurmd >/dev/null; then
            tail -n 20 "$dir/log/slurmd.log" >&2 || true
            die "slurmd exited; see $dir/log/slurmd.log"
        fi
        sleep 0.2
    done
    log "node $host idle with $cpus CPUs, licenses ${SLURM_TEST_LICENSES:-lanes:8} ($((SECONDS - t0)) s)"
    trap - EXIT
    printf 'export SLURM_CONF=%q\n' "$conf"
}

main() {
    [ $# -eq 2 ] || usage
    local cmd=$1 dir=$2
    [ -n "$dir" ] || usage
    case $dir in
    /*) ;;
    *) dir=$PWD/$dir ;;
    esac
    if [ -d "$dir" ]; then
        dir=$(cd "$dir" && pwd -P)
    fi
    case $cmd in
    start) cmd_start "$dir" ;;
    stop) cmd_stop "$dir" ;;
    status) cmd_status "$dir" ;;
    *) usage ;;
    esac
}

main "$@"
