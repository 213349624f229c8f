#!/usr/bin/env bash
# A one-machine SLURM cluster for the tests (marked cluster) and CI (.ci/run): munged, slurmctld and
# slurmd started without systemd, everything they write kept in one temporary folder.
#
#   scripts/test-cluster.sh install      # apt-get the packages that are missing (root, Debian)
#   scripts/test-cluster.sh start        # install if needed, start; prints KEY=VALUE lines:
#                                        #   TEST_CLUSTER_DIR=/tmp/... SLURM_CONF=/tmp/.../slurm.conf
#   scripts/test-cluster.sh stop DIR     # cancel the jobs, stop the daemons it started (by pid),
#                                        # remove DIR (DIR defaults to $TEST_CLUSTER_DIR)
#
# `start` exits 3 when the cluster cannot run here (not root, no apt-get, no packages) with the
# reason on stderr, so a test fixture can skip with it; any other failure exits 1 after stopping
# what it started. The node is this machine (`hostname -s`) with CPUs=4 whatever the machine has
# (slurmd is told to trust the configuration), so `srun -n 3` runs on two cores.
set -euo pipefail

PACKAGES=(slurm-wlm munge openmpi-bin)
COMMANDS=(munged mungekey slurmctld slurmd srun sbatch salloc sinfo scontrol scancel squeue mpirun)
CANNOT_RUN=3

say() { echo "test-cluster: $*" >&2; }
cannot_run() {
  say "cannot start a SLURM cluster here: $*"
  exit "$CANNOT_RUN"
}

missing_commands() {
  local name missing=()
  for name in "${COMMANDS[@]}"; do
    command -v "$name" > /dev/null 2>&1 || [ -x "/usr/sbin/$name" ] || missing+=("$name")
  done
  echo "${missing[*]}"
}

install() {
  local missing
  missing=$(missing_commands)
  [ -z "$missing" ] && return 0
  [ "$(id -u)" -eq 0 ] || cannot_run "missing $missing, and installing ${PACKAGES[*]} needs root (uid $(id -u))"
  command -v apt-get > /dev/null || cannot_run "missing $missing, and there is no apt-get to install ${PACKAGES[*]}"
  say "installing ${PACKAGES[*]} (missing: $missing)"
  # Wait for another apt run (a second test session) rather than failing on its lock.
  if ! { apt-get -o DPkg::Lock::Timeout=300 update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
      --no-install-recommends "${PACKAGES[@]}"; } >&2; then
    cannot_run "apt-get install ${PACKAGES[*]} failed (see above)"
  fi
  missing=$(missing_commands)
  [ -z "$missing" ] || cannot_run "still missing after installing ${PACKAGES[*]}: $missing"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The pid in a pid file, if that process still runs.
running_pid() {
  local file=$1 pid
  [ -s "$file" ] || return 1
  pid=$(tr -dc '0-9' < "$file")
  [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null && echo "$pid"
}

# SIGTERM, then SIGKILL after 10 s: a daemon that will not stop must not outlive the tests.
stop_pid() {
  local name=$1 pid=$2 i
  kill -TERM "$pid" 2> /dev/null || return 0
  for i in $(seq 100); do
    kill -0 "$pid" 2> /dev/null || return 0
    sleep 0.1
  done
  say "$name (pid $pid) ignored SIGTERM for 10 s: killing it"
  kill -KILL "$pid" 2> /dev/null || true
}

stop() {
  local dir=${1:-${TEST_CLUSTER_DIR:-}} pid i
  [ -n "$dir" ] || { say "stop: which cluster? give its folder (printed by start as TEST_CLUSTER_DIR)"; exit 2; }
  [ -f "$dir/slurm.conf" ] || { say "stop: $dir holds no test cluster (no slurm.conf)"; exit 2; }
  export SLURM_CONF=$dir/slurm.conf
  if running_pid "$dir/slurmctld.pid" > /dev/null; then
    # Jobs first, so that no slurmstepd (nor a rank it started) is left behind by the daemons.
    local jobs
    jobs=$(timeout 10 squeue -h -o %i 2> /dev/null || true)
    # shellcheck disable=SC2086  # one argument per job id
    [ -z "$jobs" ] || timeout 10 scancel --quiet $jobs 2> /dev/null || true
    for i in $(seq 150); do
      # no job left, and no step socket (NODE_JOBID.STEP) of a slurmstepd still running
      [ -z "$(timeout 5 squeue -h -o %i 2> /dev/null)" ] && ! compgen -G "$dir/spool/*_[0-9]*" > /dev/null && break
      sleep 0.2
    done
  fi
  for name in slurmd slurmctld munged; do
    if pid=$(running_pid "$dir/$name.pid"); then
      stop_pid "$name" "$pid"
    fi
  done
  rm -rf -- "$dir"
}

wait_for() {
  local what=$1 seconds=$2 i
  shift 2
  for i in $(seq $((seconds * 5))); do
    "$@" > /dev/null 2>&1 && return 0
    sleep 0.2
  done
  say "gave up after ${seconds} s waiting for $what"
  return 1
}

node_idle() {
  [ "$(sinfo -h -N -n "$NODE" -o %t 2> /dev/null)" = idle ]
}

start() {
  [ "$(id -u)" -eq 0 ] || cannot_run "slurmd runs jobs as any user only as root (uid $(id -u)); run as root"
  install
  NODE=$(hostname -s)
  # The ranks meet at the job's first node by its name, as on a real cluster: it must resolve.
  getent hosts "$NODE" > /dev/null \
    || cannot_run "this machine's name '$NODE' (hostname -s) does not resolve: add it to /etc/hosts"
  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/test-cluster.XXXXXX")
  # From here on a failure stops what was started and removes the folder.
  trap 'say "start failed; logs:"; tail -n 20 "$dir"/log/*.log >&2 2> /dev/null || true; stop "$dir"; exit 1' ERR
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/munge"
  chmod 700 "$dir/munge"
  # A key of its own: the package's /etc/munge/munge.key may be missing or belong to a running munged.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$dir/munge/munge.key"
  munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" --pid-file="$dir/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" --force
  wait_for "munged's socket" 10 test -S "$dir/munge/munge.socket"

  # Ports picked now so two clusters (two test sessions) do not collide; a job id that starts at
  # a random place so the rendezvous port the runtime derives from it differs between sessions.
  local ctld_port slurmd_port first_job
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  first_job=$((1000 + RANDOM % 8000))
  # cred_expire: a requeued job waits this long before it may start again (SLURM's default, 120 s,
  # would make the pre-emption test wait two minutes); sched_interval: the scheduler then looks at it
  # within 5 s, not the default 60.
  cat > "$dir/slurm.conf" << EOF
ClusterName=resolvertest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=30
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
FirstJobId=$first_job
MinJobAge=600
KillWait=5
MailProg=/bin/true
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -c -f "$SLURM_CONF"
  wait_for "slurmctld to answer" 30 scontrol ping
  slurmd -f "$SLURM_CONF"
  wait_for "node $NODE to be idle in sinfo" 60 node_idle
  trap - ERR
  echo "TEST_CLUSTER_DIR=$dir"
  echo "SLURM_CONF=$SLURM_CONF"
}

case ${1:-} in
  install) install ;;
  start) start ;;
  stop) stop "${2:-}" ;;
  *)
    echo "usage: $0 install|start|stop [DIR]" >&2
    exit 2
    ;;
esac
