#!/usr/bin/env bash
# A multi-node test bed on one machine: N "nodes", each a network namespace with its own sshd, its own Docker
# engine (data root, /run, /root and /var/tmp private to the node through a mount namespace) and one veth on the
# bridge aicbed0, where the controller (this host) has ${PREFIX}.1. tc caps every link: each node's upload and
# download, and the controller's upload (the bridge device's own egress), at RATE (tc units: 25mbps = 25 MB/s).
#
#   scripts/testbed.sh up N [RATE]   (re)create N nodes (RATE default 25mbps; "none" = no cap)
#   scripts/testbed.sh rate RATE     change the cap of every link of the running bed
#   scripts/testbed.sh down          stop every node (Docker engines first) and remove the bed's network
#   scripts/testbed.sh status        one line per node
#   scripts/testbed.sh wipe          remove every container, image and received tarball from every node
#
# The inventory for Ansible is written to $AIC_BED_DIR/inventory.yml (group aic_nodes, hosts node1..nodeN).
# The shared file system of the bed is sshfs: every node mounts the controller's $AIC_BED_DIR/shared over its
# capped link at /srv/aic-shared (ssh to ${PREFIX}.1, port $AIC_BED_CONTROLLER_SSH_PORT (2222), an sshd this script
# runs in the root namespace on that address only).
#
# Opt-in features (environment; empty or unset = off, the default bed above):
#   AIC_BED_NAME (aicbed)   names of the bed's devices: bridge NAME0, namespaces NAME-I, host-side veths NAMEhI, so a
#                           second bed (scripts/rehearsal.sh) runs next to this one; pair it with its own AIC_BED_DIR,
#                           AIC_BED_PREFIX and AIC_BED_CONTROLLER_SSH_PORT
#   AIC_BED_AUTHZ=1         every node's Docker engine runs with a real authorization plugin that refuses --pid=host
#                           (AIC_BED_AUTHZ_PLUGIN, default scripts/bed/pidhost_authz.py), started inside the node's
#                           mount namespace at /run/docker/plugins/aic-pidhost.sock before its dockerd
#   AIC_BED_USER=NAME       an existing non-root user may log in with the bed's key and gets its own ~/.ansible and
#                           ~/.ansible_async per node (like root's); each node resolves its own name (/etc/hosts), so
#                           sudo on a node does not complain
#   AIC_BED_KEEP_IMAGES="REF..."  a warm bed, like a cluster's nodes between two jobs: `down` keeps every node's
#                           Docker image store (after removing its containers, volumes and networks; a node that does
#                           not answer loses all of it), the rest of the node's state goes; `up` then removes every
#                           image of a node that is not one of these references (repository:tag), so the store holds
#                           one set and never grows. Unset: every bed starts with empty engines.
set -euo pipefail
BED=${AIC_BED_DIR:-/var/lib/aic-bed}
PREFIX=${AIC_BED_PREFIX:-10.77.0}
NAME=${AIC_BED_NAME:-aicbed}
BRIDGE=${NAME}0
AUTHZ=${AIC_BED_AUTHZ:-}
AUTHZ_PLUGIN=${AIC_BED_AUTHZ_PLUGIN:-$(cd "$(dirname "$0")" && pwd)/bed/pidhost_authz.py}
BED_USER=${AIC_BED_USER:-}
KEEP_IMAGES=${AIC_BED_KEEP_IMAGES:-}
CTRL_SSH_PORT=${AIC_BED_CONTROLLER_SSH_PORT:-2222}
PY=${AIC_BED_PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
BURST=256k

log() { echo "testbed: $*" >&2; }

node_ip() { echo "${PREFIX}.$((10 + $1))"; }

cap() { # cap DEV RATE [netns]
  local dev=$1 rate=$2 ns=${3:-}
  local run=()
  [[ -n "$ns" ]] && run=(ip netns exec "$ns")
  "${run[@]}" tc qdisc del dev "$dev" root 2>/dev/null || true
  if [[ "$rate" != none && "$rate" != 0 ]]; then
    "${run[@]}" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$BURST" latency 100ms
  fi
}

nodes() { # the node indexes that exist
  ip netns list 2>/dev/null | sed -n "s/^${NAME}-\\([0-9]\\+\\).*/\\1/p" | sort -n
}

write_config() {
  mkdir -p "$BED/ssh" "$BED/shared" "$BED/nodes"
  [[ -f "$BED/ssh/host_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -f "$BED/ssh/host_ed25519"
  [[ -f "$BED/ssh/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -f "$BED/ssh/id_ed25519" -C aic-bed
  cp "$BED/ssh/id_ed25519.pub" "$BED/ssh/authorized_keys"
  chmod 600 "$BED/ssh/authorized_keys"
  # sshd reads AuthorizedKeysFile as the user who logs in: a non-root user needs to read it (public keys only).
  [[ -z "$BED_USER" ]] || chmod 644 "$BED/ssh/authorized_keys"
  cat >"$BED/sshd_config" <<EOF
Port 22
HostKey $BED/ssh/host_ed25519
PidFile none
AuthorizedKeysFile $BED/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
X11Forwarding no
MaxStartups 200
MaxSessions 200
Subsystem sftp /usr/lib/openssh/sftp-server
EOF
  # The controller's sshd (file server of the bed's shared file system), only on the bridge address.
  # Its own port, so that a system sshd on *:22 does not collide with it.
  sed -e "s/^Port 22/Port $CTRL_SSH_PORT\nListenAddress ${PREFIX}.1/" "$BED/sshd_config" >"$BED/sshd_controller_config"
  echo '{}' >"$BED/daemon.json"
  cat >"$BED/node-init.sh" <<'EOF'
#!/usr/bin/env bash
# Runs inside the node's network + mount + UTS namespaces: make the node's private directories, start its
# Docker engine, mount the shared file system, then become its sshd.
set -euo pipefail
i=$1 BED=$2 PREFIX=$3
D=$BED/nodes/node$i
hostname "node$i"
mount --make-rprivate /
# Drop the copies of the host's container mounts this namespace inherited, then give the node its own state.
findmnt -rno TARGET | grep -E '^(/var/lib/docker/|/run/)' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/sshd /srv/aic-shared
for d in ansible ansible_async tmp docker; do mkdir -p "$D/$d"; done
# Ansible's remote and async directories are the node's own (the rest of /root holds the shared tool chain).
mkdir -p /root/.ansible /root/.ansible_async
mount --bind "$D/ansible" /root/.ansible
mount --bind "$D/ansible_async" /root/.ansible_async
mount --bind "$D/tmp" /var/tmp
# Like any /var/tmp: world-writable with the sticky bit (a non-root deploy user keeps its work dir there).
chmod 1777 /var/tmp
mount --bind "$D/docker" /var/lib/docker
# Opt-in (testbed.sh's AIC_BED_USER): a non-root deploy user with its own Ansible directories on this node, and a
# node name that resolves (sudo looks it up).
if [[ -n "${AIC_BED_USER:-}" ]]; then
  home=$(getent passwd "$AIC_BED_USER" | cut -d: -f6)
  for d in ansible ansible_async; do
    mkdir -p "$D/user-$d" "$home/.$d"
    chown "$AIC_BED_USER:" "$D/user-$d" "$home/.$d"
    chmod 700 "$D/user-$d"
    mount --bind "$D/user-$d" "$home/.$d"
  done
  { cat /etc/hosts; echo "127.0.1.1 node$i"; } >"$D/hosts"
  mount --bind "$D/hosts" /etc/hosts
fi
# Opt-in (AIC_BED_AUTHZ_PLUGIN): a real authorization plugin refusing --pid=host, in this node's private /run.
authz=()
if [[ -n "${AIC_BED_AUTHZ_PLUGIN:-}" ]]; then
  python3 "$AIC_BED_AUTHZ_PLUGIN" --socket /run/docker/plugins/aic-pidhost.sock --log "$D/authz-denied.log" \
    >"$D/authz.log" 2>&1 &
  for _ in $(seq 1 100); do
    [[ -S /run/docker/plugins/aic-pidhost.sock ]] && break
    sleep 0.05
  done
  authz=(--authorization-plugin=aic-pidhost)
fi
dockerd --config-file "$BED/daemon.json" --pidfile /run/docker.pid "${authz[@]}" >"$D/dockerd.log" 2>&1 &
exec /usr/sbin/sshd -D -e -f "$BED/sshd_config" >"$D/sshd.log" 2>&1
EOF
  chmod +x "$BED/node-init.sh"
}

write_inventory() {
  local n=$1
  {
    echo "# Generated by scripts/testbed.sh: the bed's $n nodes."
    echo "all:"
    echo "  children:"
    echo "    aic_nodes:"
    echo "      hosts:"
    for i in $(seq 1 "$n"); do
      echo "        node$i: {ansible_host: $(node_ip "$i")}"
    done
    echo "  vars:"
    echo "    ansible_user: root"
    echo "    ansible_ssh_private_key_file: $BED/ssh/id_ed25519"
    echo "    ansible_ssh_common_args: >-"
    echo "      -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no -o LogLevel=ERROR"
    echo "      -o ControlMaster=auto -o ControlPersist=300s -o ControlPath=$BED/cp-%C"
    echo "    ansible_python_interpreter: $PY"
    echo "    aic_bed_controller_address: ${PREFIX}.1"
    echo "    aic_bed_shared_dir: $BED/shared"
  } >"$BED/inventory.yml"
}

ssh_node() { # ssh_node I CMD...
  local i=$1
  shift
  ssh -q -i "$BED/ssh/id_ed25519" -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no -o BatchMode=yes \
    -o ConnectTimeout=3 "root@$(node_ip "$i")" "$@"
}

stop_node() {
  local i=$1 ns=$NAME-$1 pids
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  if [[ -n "$pids" ]]; then
    # Docker engines first (they stop their containers), then everything else in the namespace.
    for p in $pids; do
      if [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == dockerd ]]; then kill -TERM "$p" 2>/dev/null || true; fi
    done
    for _ in $(seq 1 40); do
      pgrep -x dockerd -d ' ' | tr ' ' '\n' | grep -qxF -f <(ip netns pids "$ns" 2>/dev/null || true) || break
      sleep 0.5
    done
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086 # one pid per word
    if [[ -n "$pids" ]]; then kill -TERM $pids 2>/dev/null || true; fi
    sleep 1
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086 # one pid per word
    if [[ -n "$pids" ]]; then kill -KILL $pids 2>/dev/null || true; fi
  fi
  ip netns del "$ns" 2>/dev/null || true
  ip link del "${NAME}h$i" 2>/dev/null || true
}

# Warm bed (AIC_BED_KEEP_IMAGES): every running node empties its engine of containers, volumes and networks in
# parallel; a node that does not answer is marked to lose its whole data root.
empty_engines() {
  local i pids=()
  for i in $(nodes); do
    # shellcheck disable=SC2016 # expanded on the node
    { ssh_node "$i" 'docker rm -f $(docker ps -aq) >/dev/null 2>&1; docker volume prune -f >/dev/null &&
        docker network prune -f >/dev/null' || touch "$BED/nodes/node$i/purge"; } &
    pids+=($!)
  done
  # Only these: a bare `wait` would also wait for the nodes' own processes.
  [[ ${#pids[@]} -eq 0 ]] || wait "${pids[@]}"
}

# What `down` leaves of a node: nothing, or (warm bed) its Docker data root unless the node was marked to purge.
clear_nodes() {
  local d
  [[ -d "$BED/nodes" ]] || return 0
  if [[ -z "$KEEP_IMAGES" ]]; then
    rm -rf "$BED/nodes"
    return 0
  fi
  for d in "$BED"/nodes/*/; do
    [[ -d "$d" ]] || continue # no node left (the glob stays as written)
    if [[ -e "$d/purge" ]]; then
      rm -rf "$d"
    else
      find "$d" -mindepth 1 -maxdepth 1 ! -name docker -exec rm -rf {} +
    fi
  done
}

# Warm bed: every node drops the images that are not in AIC_BED_KEEP_IMAGES (then the dangling layers).
keep_only_listed_images() {
  local i pids=()
  for i in $(nodes); do
    # shellcheck disable=SC2016 # $ref and $keep are expanded on the node
    ssh_node "$i" "keep=' $KEEP_IMAGES ';"'docker images --format "{{.Repository}}:{{.Tag}}" | while read -r ref; do
        case "$keep" in *" $ref "*) ;; *) docker rmi -f "$ref" >/dev/null 2>&1 || true ;; esac; done
      docker image prune -f >/dev/null' &
    pids+=($!)
  done
  # Only these: a bare `wait` would also wait for the nodes' init processes, started by this shell.
  [[ ${#pids[@]} -eq 0 ]] || wait "${pids[@]}"
}

down() {
  [[ -z "$KEEP_IMAGES" ]] || empty_engines
  for i in $(nodes); do stop_node "$i"; done
  if [[ -f "$BED/sshd_controller.pid" ]]; then
    kill "$(cat "$BED/sshd_controller.pid")" 2>/dev/null || true
    rm -f "$BED/sshd_controller.pid"
  fi
  iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -f "$BED"/cp-*
  # The nodes' Docker data is kept out of the next bed (a fresh bed starts without any image) unless it is warm.
  clear_nodes
}

up() {
  local n=${1:?usage: testbed.sh up N [RATE]} rate=${2:-25mbps}
  down
  if [[ -n "$BED_USER" ]]; then
    id -u "$BED_USER" >/dev/null 2>&1 || { log "AIC_BED_USER $BED_USER does not exist"; exit 1; }
  fi
  if [[ -n "$AUTHZ" && "$AUTHZ" != 0 && ! -r "$AUTHZ_PLUGIN" ]]; then
    log "authorization plugin $AUTHZ_PLUGIN not found"
    exit 1
  fi
  write_config
  # A warm bed's nodes beyond N are not part of this one.
  find "$BED/nodes" -mindepth 1 -maxdepth 1 -name 'node*' | while read -r d; do
    [[ "${d##*/node}" -le "$n" ]] || rm -rf "$d"
  done
  ip link add "$BRIDGE" type bridge
  ip addr add "${PREFIX}.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # Docker's FORWARD policy is DROP and bridged frames go through iptables here: let the bed's own traffic pass.
  iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
  cap "$BRIDGE" "$rate"
  mkdir -p /run/sshd
  /usr/sbin/sshd -f "$BED/sshd_controller_config" -o "PidFile=$BED/sshd_controller.pid"
  for i in $(seq 1 "$n"); do
    local ns=$NAME-$i
    mkdir -p "$BED/nodes/node$i"
    ip netns add "$ns"
    ip link add "${NAME}h$i" type veth peer name eth0 netns "$ns"
    ip link set "${NAME}h$i" master "$BRIDGE" up
    ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "${PREFIX}.1"
    cap eth0 "$rate" "$ns"
    cap "${NAME}h$i" "$rate"
    local plugin=
    [[ -z "$AUTHZ" || "$AUTHZ" == 0 ]] || plugin=$AUTHZ_PLUGIN
    setsid nsenter --net="/run/netns/$ns" -- unshare --mount --uts --propagation private -- \
      env AIC_BED_AUTHZ_PLUGIN="$plugin" AIC_BED_USER="$BED_USER" \
      "$BED/node-init.sh" "$i" "$BED" "$PREFIX" </dev/null >"$BED/nodes/node$i/init.log" 2>&1 &
  done
  write_inventory "$n"
  # Ready when every node answers ssh and its Docker engine.
  for i in $(seq 1 "$n"); do
    local ok=
    for _ in $(seq 1 120); do
      if ssh_node "$i" docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then ok=1 && break; fi
      sleep 0.5
    done
    [[ -n "$ok" ]] || { log "node$i did not come up; see $BED/nodes/node$i/*.log"; exit 1; }
  done
  # Shared file system: each node mounts the controller's shared directory over its own (capped) link.
  for i in $(seq 1 "$n"); do
    ssh_node "$i" sshfs -p "$CTRL_SSH_PORT" -o ro,allow_other,IdentityFile="$BED/ssh/id_ed25519",StrictHostKeyChecking=no \
      -o UserKnownHostsFile=/dev/null,reconnect "root@${PREFIX}.1:$BED/shared" /srv/aic-shared
  done
  [[ -z "$KEEP_IMAGES" ]] || keep_only_listed_images
  log "$n node(s) up, links capped at $rate; inventory: $BED/inventory.yml"
}

status() {
  for i in $(nodes); do
    printf 'node%s %s ' "$i" "$(node_ip "$i")"
    # shellcheck disable=SC2016 # expanded on the node
    ssh_node "$i" 'echo "docker $(docker version --format {{.Server.Version}}) images $(docker images -q | wc -l)"' ||
      echo unreachable
  done
}

case "${1:-}" in
up) shift && up "$@" ;;
down) down ;;
status) status ;;
wipe)
  # Every node back to an empty engine: containers, images and received tarballs removed.
  for i in $(nodes); do
    # shellcheck disable=SC2016 # expanded on the node
    ssh_node "$i" 'docker rm -f $(docker ps -aq) >/dev/null 2>&1; docker image prune -af >/dev/null; rm -rf /var/tmp/aic' &
  done
  wait
  ;;
rate)
  r=${2:?usage: testbed.sh rate RATE}
  cap "$BRIDGE" "$r"
  for i in $(nodes); do cap eth0 "$r" "$NAME-$i" && cap "${NAME}h$i" "$r"; done
  ;;
*) sed -n '2,32p' "$0" >&2 && exit 2 ;;
esac
