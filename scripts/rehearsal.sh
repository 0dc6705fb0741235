#!/usr/bin/env bash
# The rehearsal cluster: a SPUR-like cluster of real parts on one machine, to rehearse a multi-node rollout.
#
#   scripts/rehearsal.sh up [N]            (re)create N nodes (default 3) and the cluster around them
#   scripts/rehearsal.sh alloc [N] [GPUS]  hold an allocation of N nodes (default all) with GPUS gpu gres per node
#                                          (default AIC_REHEARSAL_GPUS); prints the job id (scancel it when done)
#   scripts/rehearsal.sh status            nodes, Slurm daemons, sinfo
#   scripts/rehearsal.sh env               the exports for the SPUR command on it: eval "$(scripts/rehearsal.sh env)"
#   scripts/rehearsal.sh gpu-ids JOB       each node's GPU ids of job JOB (NODES: IDS lines): the stand-in for SPUR's
#                                          GetJob call, inventories/spur/aic-slurm.yml's gpu_ids_command here
#   scripts/rehearsal.sh down              stop the slurmd's, slurmctld, munged and the bed
#
# What it is made of:
#   - the test bed of scripts/testbed.sh (a second bed next to the default one: bridge aicreh0, namespaces aicreh-I,
#     controller ${PREFIX}.1, node I at ${PREFIX}.(10+I), no bandwidth cap), each node with its own sshd and its own
#     Docker engine;
#   - real Slurm across the bed: munged and slurmctld in the root namespace (SlurmctldHost=<short hostname>(bridge
#     IP)), one slurmd per node (NodeName nodeI, NodeAddr its namespace's address) running in the node's network,
#     mount and UTS namespaces, so a job on nodeI sees nodeI's Docker engine; own ports (17817/17818), own munged
#     socket and state directory, so the single-node Slurm of scripts/slurm-up.sh keeps running next to it;
#   - every node's Docker engine behind a real authorization plugin that refuses --pid=host, as SPUR's does
#     (scripts/bed/pidhost_authz.py);
#   - per node, NAMED FAKE AMD GPU devices: $BED/nodes/nodeI/dev/kfd and dev/dri/renderD128.. are character devices
#     with /dev/null's numbers (1,3), so `docker run --device` accepts them; they are NOT GPUs. Slurm's gpu gres of the
#     node is backed by the same files (gres.conf AutoDetect=off), index K = renderD(128+K);
#   - a non-root deploy user (AIC_REHEARSAL_USER, default aicop: NOPASSWD sudo, member of the group that owns the
#     nodes' Docker sockets) whom Ansible connects as, and per node a root-owned (0755) slab parent
#     $BED/nodes/nodeI/m2m_nobackup it can only write to with sudo, like SPUR's /mnt/m2m_nobackup.
#
# Output: the inventory $STATE/bed.yml (hosts node1..N in group aic_nodes, the same names Slurm uses, with the
# per-node paths as aic_rehearsal_* variables) and, on stdout's last line of `up`, SLURM_CONF=$STATE/slurm/etc/slurm.conf.
# `up` is idempotent: it stops whatever an earlier `up` left and recreates everything (no job survives).
#
# Environment (empty means the default):
#   AIC_REHEARSAL_DIR (/var/lib/aic-rehearsal)   the state directory; the bed lives in its bed/ subdirectory
#   AIC_REHEARSAL_GPUS (2)                       fake GPUs per node
#   AIC_REHEARSAL_USER (aicop)                   the deploy user (created if missing)
#   AIC_REHEARSAL_PREFIX (10.78.0), AIC_REHEARSAL_BED_NAME (aicreh), AIC_REHEARSAL_CONTROLLER_SSH_PORT (2223)
#   AIC_REHEARSAL_CTLD_PORT (17817), AIC_REHEARSAL_SLURMD_PORT (17818), AIC_REHEARSAL_WAIT (60 s for nodes idle)
#   AIC_REHEARSAL_PYTHON (the checkout's .venv/bin/python)  ansible_python_interpreter of the nodes
#   AIC_REHEARSAL_COLD (empty)                   1: every `up` starts the nodes with empty Docker engines. By
#                                                default the bed is warm, like a cluster's nodes between two jobs:
#                                                `down` keeps each node's images and `up` keeps only the current
#                                                stand-in images (testbed.sh's AIC_BED_KEEP_IMAGES), so a rollout
#                                                finds them present (AIC_REHEARSAL_COLD=1 ... down frees the space)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
STATE=${AIC_REHEARSAL_DIR:-/var/lib/aic-rehearsal}
BED=$STATE/bed
GPUS=${AIC_REHEARSAL_GPUS:-2}
DEPLOY_USER=${AIC_REHEARSAL_USER:-aicop}
PREFIX=${AIC_REHEARSAL_PREFIX:-10.78.0}
BED_NAME=${AIC_REHEARSAL_BED_NAME:-aicreh}
CTRL_SSH_PORT=${AIC_REHEARSAL_CONTROLLER_SSH_PORT:-2223}
CTLD_PORT=${AIC_REHEARSAL_CTLD_PORT:-17817}
SLURMD_PORT=${AIC_REHEARSAL_SLURMD_PORT:-17818}
WAIT=${AIC_REHEARSAL_WAIT:-60}
PY=${AIC_REHEARSAL_PYTHON:-$REPO/.venv/bin/python}
SL=$STATE/slurm
ETC=$SL/etc
MUNGE=$SL/munge
RUN=$SL/run
LOGS=$SL/log
SUDOERS=/etc/sudoers.d/aic-rehearsal-$DEPLOY_USER
export SLURM_CONF=$ETC/slurm.conf
export PATH="$PATH:/usr/sbin:/sbin"
# The bed this script asks scripts/testbed.sh for.
export AIC_BED_DIR=$BED AIC_BED_NAME=$BED_NAME AIC_BED_PREFIX=$PREFIX AIC_BED_CONTROLLER_SSH_PORT=$CTRL_SSH_PORT
export AIC_BED_PYTHON=$PY AIC_BED_AUTHZ=1 AIC_BED_USER=$DEPLOY_USER

die() {
  echo "rehearsal: ERROR: $*" >&2
  exit 1
}
log() { echo "rehearsal: $*" >&2; }

case "$STATE" in
  /*) ;;
  *) die "AIC_REHEARSAL_DIR must be an absolute path (got '$STATE')" ;;
esac
for v in GPUS CTLD_PORT SLURMD_PORT WAIT CTRL_SSH_PORT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer (got '${!v}')"
done
[[ $DEPLOY_USER =~ ^[a-z_][a-z0-9_-]*$ && $DEPLOY_USER != root ]] || die "AIC_REHEARSAL_USER must be a non-root user name"

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
node_ip() { echo "${PREFIX}.$((10 + $1))"; }
node_dir() { echo "$BED/nodes/node$1"; }
nodes() { ip netns list 2>/dev/null | sed -n "s/^${BED_NAME}-\\([0-9]\\+\\).*/\\1/p" | sort -n; }

# A live process whose pid is in file $1 and whose command line contains $2.
running() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
}

# Stop the daemon of pidfile $1 (command line containing $2): SIGTERM, then SIGKILL after 10 s.
stop_daemon() {
  local pidfile=$1 name=$2 pid
  if running "$pidfile" "$name"; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      running "$pidfile" "$name" || break
      sleep 0.1
    done
    if running "$pidfile" "$name"; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidfile"
}

stop_slurm() {
  local f
  for f in "$RUN"/slurmd-*.pid; do
    [ -e "$f" ] && stop_daemon "$f" slurmd
  done
  stop_daemon "$RUN/slurmctld.pid" slurmctld
  stop_daemon "$MUNGE/munged.pid" munged
}

# The deploy user may traverse every directory on the way to the interpreter (and its symlink targets): ACL
# entries for the user only (e.g. /root, 0700, on the way to pyenv's python), recorded so `down` removes them.
grant_python() {
  local target d
  for target in "$PY" "$(readlink -f "$PY")"; do
    d=$(dirname "$target")
    while [ "$d" != / ]; do
      if ! runuser -u "$DEPLOY_USER" -- test -x "$d"; then
        setfacl -m "u:$DEPLOY_USER:x" "$d"
        echo "$d" >>"$STATE/acl-granted"
      fi
      d=$(dirname "$d")
    done
  done
  runuser -u "$DEPLOY_USER" -- "$PY" -c 'import requests, docker' 2>/dev/null ||
    die "$DEPLOY_USER cannot run $PY with its packages (import requests, docker)"
}

revoke_python() {
  local d
  if [ -f "$STATE/acl-granted" ]; then
    sort -u "$STATE/acl-granted" | while read -r d; do setfacl -x "u:$DEPLOY_USER" "$d" 2>/dev/null || true; done
    rm -f "$STATE/acl-granted"
  fi
  if [ -f "$STATE/acl-logs" ]; then
    sort -u "$STATE/acl-logs" | while read -r d; do
      setfacl -x "u:$DEPLOY_USER" -x "d:u:$DEPLOY_USER" "$d" 2>/dev/null || true
    done
    rm -f "$STATE/acl-logs"
  fi
}

deploy_user() {
  if ! id -u "$DEPLOY_USER" >/dev/null 2>&1; then
    log "creating the deploy user $DEPLOY_USER"
    # '*' (not '!'): no password, but not locked, so sshd (UsePAM no) lets the key in.
    useradd -m -s /bin/bash -p '*' "$DEPLOY_USER"
  fi
  # The nodes' Docker engines give their socket to group docker (dockerd's default -G).
  getent group docker >/dev/null || groupadd -r docker
  usermod -a -G docker "$DEPLOY_USER"
  printf '# Generated by scripts/rehearsal.sh: the deploy user of the rehearsal cluster.\n%s ALL=(ALL:ALL) NOPASSWD: ALL\n' \
    "$DEPLOY_USER" >"$SUDOERS.tmp"
  chmod 0440 "$SUDOERS.tmp"
  visudo -cqf "$SUDOERS.tmp" || die "visudo rejected $SUDOERS.tmp"
  mv -f "$SUDOERS.tmp" "$SUDOERS"
  revoke_python
  grant_python
  # The checkout's logs/ (the streamed container logs, logs/<job id>/<service>/) is the operator's, as on SPUR's
  # shared file system: the deploy user may write there (an ACL, recorded so `down` removes it).
  mkdir -p "$REPO/logs"
  setfacl -m "u:$DEPLOY_USER:rwx" -m "d:u:$DEPLOY_USER:rwx" "$REPO/logs"
  echo "$REPO/logs" >>"$STATE/acl-logs"
}

# Per node: the fake AMD devices and the root-owned slab parent (the bed's node directories are new after testbed up).
node_files() {
  local i=$1 d g
  d=$(node_dir "$i")
  mkdir -p "$d/dev/dri"
  # FAKES: character devices with /dev/null's numbers standing in for /dev/kfd and /dev/dri/renderD*; not GPUs.
  mknod -m 0666 "$d/dev/kfd" c 1 3
  for g in $(seq 0 $((GPUS - 1))); do
    mknod -m 0666 "$d/dev/dri/renderD$((128 + g))" c 1 3
  done
  install -d -o root -g root -m 0755 "$d/m2m_nobackup"
  # The node's model cache (SPUR: /shared_nfs/huggingface), mounted into the vLLM containers.
  install -d -m 0755 "$d/hf"
}

# The newest local image of repository $1 on the controller's engine (empty when there is none).
newest_image() {
  docker image ls --format '{{.Repository}}:{{.Tag}}' "$1" 2>/dev/null | grep -v ':<none>$' | head -n1 || true
}

# STAND-IN images for the overlay (inventories/rehearsal): the last local build's cpu stack image for the rocm
# image, the locally built Prometheus and node-exporter for the upstream ones. Empty when not built yet.
standin_images() {
  local pointer=$REPO/.work/artifacts/aic-stack-cpu.current.json
  echo "    aic_rehearsal_artifact_dir: $REPO/.work/artifacts"
  echo "    aic_rehearsal_stack_image: \"$([ -f "$pointer" ] && "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["image"])' "$pointer")\""
  echo "    aic_rehearsal_prometheus_image: \"$(newest_image aic-prometheus)\""
  echo "    aic_rehearsal_node_exporter_image: \"$(newest_image aic-node-exporter)\""
}

# The images a warm bed's nodes keep (the stand-ins of standin_images); empty for a cold bed.
warm_images() {
  local pointer=$REPO/.work/artifacts/aic-stack-cpu.current.json
  [ -z "${AIC_REHEARSAL_COLD:-}" ] || return 0
  [ ! -f "$pointer" ] || "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["image"])' "$pointer"
  newest_image aic-prometheus
  newest_image aic-node-exporter
}

# Per node of job $1: its GPU ids from `scontrol show job -d`, as `NODES: IDS` lines. The STAND-IN for SPUR's GetJob
# call (.slurm/spur-gpu-allocation) that inventories/spur/aic-slurm.yml runs as its gpu_ids_command.
gpu_ids() {
  local job=${1:?usage: rehearsal.sh gpu-ids JOB_ID}
  [[ $job =~ ^[0-9]+$ ]] || die "JOB_ID must be a Slurm job id (got '$job')"
  scontrol show job -d "$job" | sed -n 's/^ *Nodes=\([^ ]*\) .*GRES=[^ ]*(IDX:\([^)]*\)).*/\1: \2/p'
}

write_slurm_conf() {
  local n=$1 host cpus mem i gres_types="" gres
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
  [ "$GPUS" -gt 0 ] && gres_types="GresTypes=gpu"
  {
    cat <<EOF
# Generated by scripts/rehearsal.sh: Slurm across the rehearsal bed ($n nodes), no systemd, no cgroups.
ClusterName=aic-rehearsal
# Job ids of their own: the single-node Slurm of scripts/slurm-up.sh numbers from 1 too, and both write logs/<job id>/.
FirstJobId=70001
SlurmctldHost=$host(${PREFIX}.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$SL/ctld
SlurmdSpoolDir=$SL/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=600
KillWait=5
Waittime=0
$gres_types
EOF
    for i in $(seq 1 "$n"); do
      gres=""
      [ "$GPUS" -gt 0 ] && gres=" Gres=gpu:$GPUS"
      echo "NodeName=node$i NodeAddr=$(node_ip "$i") CPUs=$cpus RealMemory=$mem$gres State=UNKNOWN"
    done
    echo "PartitionName=rehearsal Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP"
  } >"$ETC/slurm.conf"
  cat >"$ETC/cgroup.conf" <<EOF
# Generated by scripts/rehearsal.sh: no cgroup plugin is configured (proctrack/linuxproc, task/none).
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF
  {
    echo "# Generated by scripts/rehearsal.sh: FAKE AMD GPUs (character devices 1,3 named renderD128..), index K = renderD(128+K)."
    echo "AutoDetect=off"
    if [ "$GPUS" -gt 0 ]; then
      for i in $(seq 1 "$n"); do
        echo "NodeName=node$i Name=gpu File=$(node_dir "$i")/dev/dri/renderD[128-$((127 + GPUS))]"
      done
    fi
  } >"$ETC/gres.conf"
  chmod 0644 "$ETC"/*.conf
}

# A process of node I's mount namespace (its dockerd): slurmd joins that node's network, mount and UTS namespaces.
node_pid() {
  local p
  for p in $(ip netns pids "$BED_NAME-$1" 2>/dev/null); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dockerd ] && echo "$p" && return 0
  done
  return 1
}

start_slurm() {
  local n=$1 i pid
  rm -rf "$SL/ctld" "$SL/spool"
  mkdir -p "$ETC" "$MUNGE" "$RUN" "$LOGS" "$SL/ctld" "$SL/jobs"
  for i in $(seq 1 "$n"); do mkdir -p "$SL/spool/node$i"; done
  # munged refuses group/other-writable directories; clients need o+x on the socket directory.
  chmod 0755 "$STATE" "$SL" "$MUNGE" "$RUN"
  chmod 0700 "$SL/ctld"
  write_slurm_conf "$n"
  if [ ! -s "$MUNGE/munge.key" ]; then
    mungekey --create --keyfile="$MUNGE/munge.key.tmp" --force
    chmod 0400 "$MUNGE/munge.key.tmp"
    mv -f "$MUNGE/munge.key.tmp" "$MUNGE/munge.key"
  fi
  rm -f "$MUNGE/munge.socket" "$MUNGE/munge.socket.lock"
  # Daemons fork and detach; their stdio goes to their log so a caller capturing our output never waits on them.
  munged --force --socket="$MUNGE/munge.socket" --key-file="$MUNGE/munge.key" --pid-file="$MUNGE/munged.pid" \
    --log-file="$MUNGE/munged.log" --seed-file="$MUNGE/munged.seed" </dev/null >>"$MUNGE/munged.log" 2>&1 9>&- ||
    die "munged did not start, see $MUNGE/munged.log"
  for _ in $(seq 1 50); do
    [ -S "$MUNGE/munge.socket" ] && break
    sleep 0.1
  done
  [ -S "$MUNGE/munge.socket" ] || die "munged socket $MUNGE/munge.socket did not appear, see $MUNGE/munged.log"
  slurmctld -f "$SLURM_CONF" </dev/null >>"$LOGS/slurmctld.stdio" 2>&1 9>&- ||
    die "slurmctld did not start, see $LOGS/slurmctld.log"
  for i in $(seq 1 "$n"); do
    pid=$(node_pid "$i") || die "node$i has no Docker engine to join (see $(node_dir "$i")/dockerd.log)"
    # nsenter --net (not `ip netns exec`, which remounts /sys and leaves slurmd without a cgroup file system),
    # plus the node's mount and UTS namespaces: its /run (Docker socket), /var/lib/docker, /var/tmp, host name.
    nsenter --target "$pid" --net --mount --uts -- /usr/sbin/slurmd -f "$SLURM_CONF" -N "node$i" \
      </dev/null >>"$LOGS/slurmd-node$i.stdio" 2>&1 9>&- || die "slurmd of node$i did not start, see $LOGS/slurmd-node$i.log"
  done
  local deadline=$((SECONDS + WAIT)) states resumed=0
  while :; do
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true)
    if [ "$(grep -c ' idle$' <<<"$states" || true)" -eq "$n" ]; then break; fi
    if [ "$resumed" = 0 ] && grep -qE ' (down|drain)' <<<"$states"; then
      scontrol update NodeName="node[1-$n]" State=RESUME >/dev/null 2>&1 || true
      resumed=1
    fi
    [ "$SECONDS" -lt "$deadline" ] ||
      die "nodes not idle after ${WAIT}s: $(tr '\n' ' ' <<<"$states"); see $LOGS/slurmctld.log and $LOGS/slurmd-node*.log"
    sleep 0.5
  done
}

write_inventory() {
  local n=$1 i d g
  {
    echo "# Generated by scripts/rehearsal.sh: the rehearsal cluster's $n nodes (the names Slurm uses)."
    echo "# FAKE AMD GPUs: aic_rehearsal_kfd / aic_rehearsal_render_devices are character devices 1,3, not GPUs."
    echo "all:"
    echo "  children:"
    echo "    aic_nodes:"
    echo "      hosts:"
    for i in $(seq 1 "$n"); do
      d=$(node_dir "$i")
      echo "        node$i:"
      echo "          ansible_host: $(node_ip "$i")"
      echo "          aic_rehearsal_node_dir: $d"
      echo "          aic_rehearsal_kfd: $d/dev/kfd"
      echo "          aic_rehearsal_render_devices:"
      for g in $(seq 0 $((GPUS - 1))); do echo "            - $d/dev/dri/renderD$((128 + g))"; done
      echo "          aic_rehearsal_slab_parent: $d/m2m_nobackup"
      echo "          aic_rehearsal_slurmd_log: $LOGS/slurmd-node$i.log"
      echo "          aic_rehearsal_hf_home: $d/hf"
    done
    echo "  vars:"
    echo "    ansible_user: $DEPLOY_USER"
    echo "    ansible_become_method: sudo"
    echo "    ansible_ssh_private_key_file: $BED/ssh/id_ed25519"
    echo "    ansible_ssh_common_args: >-"
    echo "      -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no -o LogLevel=ERROR"
    echo "      -o ControlMaster=auto -o ControlPersist=300s -o ControlPath=$BED/cp-%C"
    echo "    ansible_python_interpreter: $PY"
    echo "    aic_bed_controller_address: ${PREFIX}.1"
    echo "    aic_bed_shared_dir: $BED/shared"
    echo "    aic_rehearsal_controller_address: ${PREFIX}.1"
    echo "    aic_rehearsal_slurm_conf: $SLURM_CONF"
    echo "    aic_rehearsal_slurmctld_port: $CTLD_PORT"
    echo "    aic_rehearsal_gpus_per_node: $GPUS"
    echo "    aic_rehearsal_deploy_user: $DEPLOY_USER"
    echo "    aic_rehearsal_authz_plugin: aic-pidhost"
    echo "    aic_rehearsal_bed_dir: $BED"
    echo "    aic_rehearsal_gpu_ids_command: $REPO/scripts/rehearsal.sh gpu-ids {job_id}"
    standin_images
  } >"$STATE/bed.yml.tmp"
  mv -f "$STATE/bed.yml.tmp" "$STATE/bed.yml"
}

check_tools() {
  local bin
  for bin in munged mungekey slurmctld slurmd sinfo scontrol salloc srun nsenter setfacl sudo visudo sshfs dockerd; do
    command -v "$bin" >/dev/null || die "$bin not found: install slurm-wlm munge sudo acl sshfs docker.io (scripts/host-deps.sh)"
  done
  [ -x "$PY" ] || die "$PY not found: run make setup"
}

down() {
  local sock
  stop_slurm
  # Ansible's ssh connection masters to the nodes (ControlPersist) end with the bed.
  for sock in "$BED"/cp-*; do
    if [ -S "$sock" ]; then ssh -o ControlPath="$sock" -O exit aic-bed-node >/dev/null 2>&1 || true; fi
  done
  AIC_BED_KEEP_IMAGES=$(warm_images | xargs) "$REPO/scripts/testbed.sh" down 9>&-
  revoke_python
  rm -f "$SUDOERS" "$STATE/bed.yml" "$STATE/job"
}

up() {
  local n=${1:-3} t0=$EPOCHREALTIME t1 i
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer (got '$n')"
  [ "$n" -le 200 ] || die "at most 200 nodes"
  check_tools
  mkdir -p "$STATE"
  down
  deploy_user
  # 9>&-: the bed's daemons must not inherit (and hold) this script's lock.
  AIC_BED_KEEP_IMAGES=$(warm_images | xargs) "$REPO/scripts/testbed.sh" up "$n" none 9>&-
  for i in $(seq 1 "$n"); do node_files "$i"; done
  t1=$EPOCHREALTIME
  log "bed of $n node(s) up in $(elapsed "$t0" "$t1") s"
  start_slurm "$n"
  write_inventory "$n"
  log "Slurm ready in $(elapsed "$t1" "$EPOCHREALTIME") s: node[1-$n] idle, gpu:$GPUS each (fake); inventory $STATE/bed.yml"
  for i in $(seq 1 "$n"); do
    log "node$i $(node_ip "$i"): kfd $(node_dir "$i")/dev/kfd, render $(node_dir "$i")/dev/dri/renderD128.., slab parent $(node_dir "$i")/m2m_nobackup"
  done
  echo "SLURM_CONF=$SLURM_CONF"
}

alloc() {
  local n=${1:-} g=${2:-$GPUS} out job gres=()
  [ -n "$n" ] || n=$(sinfo -h -N -o %N 2>/dev/null | sort -u | wc -l)
  [[ $n =~ ^[1-9][0-9]*$ && $g =~ ^[0-9]+$ ]] || die "usage: rehearsal.sh alloc [N] [GPUS_PER_NODE]"
  [ "$g" -gt 0 ] && gres=(--gres="gpu:$g")
  # A held allocation without a shell or batch step: `srun --jobid` and the aic.stack.slurm inventory plugin
  # (scontrol show job -d) use it until scancel.
  out=$(salloc --no-shell -N "$n" "${gres[@]}" -J aic-rehearsal --immediate=60 2>&1) ||
    die "salloc failed: $out"
  job=$(sed -n 's/.*Granted job allocation \([0-9]\+\).*/\1/p' <<<"$out" | head -n1)
  [ -n "$job" ] || die "no job id in salloc's output: $out"
  echo "$job" >"$STATE/job"
  echo "$job"
}

# What an operator exports to run the SPUR command against the rehearsal cluster (eval "$(rehearsal.sh env)").
env_lines() {
  local job
  job=$(cat "$STATE/job" 2>/dev/null || true)
  [ -n "$job" ] || die "no allocation yet: run scripts/rehearsal.sh alloc"
  echo "export SLURM_CONF=$SLURM_CONF"
  echo "export SLURM_JOB_ID=$job"
  echo "export AIC_SLURM_GPU_IDS_COMMAND='$REPO/scripts/rehearsal.sh gpu-ids {job_id}'"
  echo "export REHEARSAL_INVENTORY='-i inventories/spur -i inventories/rehearsal -i $STATE/bed.yml'"
}

status() {
  local i f line
  while read -r line; do
    [ -n "$line" ] || continue
    i=${line%% *}
    i=${i#node}
    if running "$RUN/slurmd-node$i.pid" slurmd; then echo "$line, slurmd $(cat "$RUN/slurmd-node$i.pid")"; else echo "$line, slurmd down"; fi
  done < <("$REPO/scripts/testbed.sh" status 2>/dev/null)
  for f in "$MUNGE/munged.pid:munged" "$RUN/slurmctld.pid:slurmctld"; do
    if running "${f%%:*}" "${f##*:}"; then echo "${f##*:} $(cat "${f%%:*}")"; else echo "${f##*:} down"; fi
  done
  if running "$RUN/slurmctld.pid" slurmctld; then sinfo -N -o '%N %T %G'; fi
  echo "SLURM_CONF=$SLURM_CONF"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up | down)
    mkdir -p "$STATE"
    exec 9>"$STATE/.lock"
    flock -w 300 9 || die "another rehearsal.sh holds $STATE/.lock"
    "$cmd" "$@"
    ;;
  alloc) alloc "$@" ;;
  gpu-ids) gpu_ids "$@" ;;
  env) env_lines ;;
  status) status ;;
  *) sed -n '2,40p' "$0" >&2 && exit 2 ;;
esac
