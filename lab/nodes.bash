# shellcheck shell=bash
# Real nodes for `lab/cluster up --kubelet`, sourced by lab/cluster (which defines log, die,
# kubectl, STATE_DIR, PKI, BIN_DIR, NODES, NODE_IPV4, NODE_IPV6, SERVICE_IP, APISERVER_PORT,
# sign and write_kubeconfig).
#
# Per lab node, inside a network namespace of its own:
#   - relay          the API server at 203.0.113.129:443 (on the namespace's lo), relayed in
#                    user space to 127.0.0.1:<API server port> in the root namespace
#   - containerd     (Debian's 1.6, runc 1.1) in a private mount namespace: /run is a tmpfs
#                    there (state, shim sockets, Pod netns files), and the six sysctl files
#                    the kubelet insists on are bind-mounted with the values it wants, so it
#                    never writes the host's (vm.overcommit_memory, kernel.panic, ...)
#   - kubelet        in containerd's mount namespace (the Pods' volumes are its mounts),
#                    registered as node-N with a client certificate (system:node:node-N)
# Every process of a node (containerd, its shims, the containers, the kubelet) lives in the
# cgroup tree /metallb-lab-<id>/node-N of every v1 hierarchy, so `down` finds all of them,
# and the mounts go with the last process of the private mount namespace.
# The API server reaches the nodes (kubelet logs/exec, webhooks at their Pods' addresses)
# through `egress`, an HTTP CONNECT proxy on a Unix socket in the state dir, running in
# node-1's namespace (which reaches every node and Pod address), named by its egress
# selector configuration ("cluster").
# A segment namespace holds a bridge joining the nodes' eth0 (192.0.2.1N/24, 2001:db8:0:1::1N/64)
# and the client's (namespace <prefix>-client, 192.0.2.100/24, 2001:db8:0:1::100/64) and the
# router's (<prefix>-router, 192.0.2.1/24, 2001:db8:0:1::1/64; empty until a test starts FRR).
# Non-hostNetwork Pods get an address from the node's /28 of 203.0.113.64/26 (CNI bridge
# and host-local from Debian's containernetworking-plugins); each node routes the others'
# /28 through their segment address.

NODE_BIN_DIR=${LAB_NODE_BIN_DIR:-}
# A short id of this state dir: namespace names and the cgroup root.
LAB_ID=$(printf '%s' "$STATE_DIR" | sha256sum | cut -c1-6)
NETNS_PREFIX=labk$LAB_ID
SEG_NETNS=$NETNS_PREFIX-seg
CLIENT_NETNS=$NETNS_PREFIX-client
ROUTER_NETNS=$NETNS_PREFIX-router
# FRR of a test in the router namespace keeps its files (and pid files) here: outside the
# state dir, which user frr may not traverse (0700).
ROUTER_DIR=/run/metallb-lab-$LAB_ID-router
CGROUP_ROOT=metallb-lab-$LAB_ID
POD_CIDRS=(203.0.113.64/28 203.0.113.80/28 203.0.113.96/28)
NODE_MARKER=$STATE_DIR/kubelet-nodes
PAUSE_IMAGE=localhost/metallb-rs-lab/pause:1
CNI_BIN_DIR=${LAB_CNI_BIN_DIR:-/usr/lib/cni}
# Images of scripts/images (OCI layouts DIR/controller, DIR/speaker).
IMAGES_DIR=${LAB_IMAGES_DIR:-${CARGO_TARGET_DIR:-$REPO_DIR/target}/images}

EGRESS_SOCKET=$STATE_DIR/egress.sock

kubelet_mode() { [ -f "$NODE_MARKER" ]; }

# The API server's extra flags, one a line (writes the egress selector configuration):
# everything it dials in the cluster goes through egress, to the kubelets by their
# InternalIP (never a name lookup), to webhooks at their endpoints (no kube-proxy here to
# make a Service's cluster IP reachable).
nodes_apiserver_flags() {
  cat >"$STATE_DIR/egress-selector.yaml" <<EOF
apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: $EGRESS_SOCKET
EOF
  # Its client certificate at the kubelets (which authorize it by a SubjectAccessReview:
  # system:masters may do everything).
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  echo "--kubelet-client-certificate=$PKI/apiserver-kubelet-client.crt"
  echo "--kubelet-client-key=$PKI/apiserver-kubelet-client.key"
  echo "--egress-selector-config-file=$STATE_DIR/egress-selector.yaml"
  echo "--kubelet-preferred-address-types=InternalIP"
  echo "--enable-aggregator-routing=true"
}
node_dir() { echo "$STATE_DIR/nodes/$1"; }
node_netns() { echo "$NETNS_PREFIX-$1"; }

# The cgroup v1 hierarchies (directories of /sys/fs/cgroup that are cgroup mounts).
cgroup_hierarchies() {
  awk '$3 == "cgroup" && $2 ~ "^/sys/fs/cgroup/" { print $2 }' /proc/self/mounts
}

nodes_check_host() {
  [ "$(id -u)" = 0 ] || die "--kubelet needs root (network and mount namespaces, cgroups)"
  local t missing=()
  for t in containerd containerd-shim-runc-v2 runc ctr nsenter unshare umoci ip; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  for t in bridge host-local loopback; do
    [ -x "$CNI_BIN_DIR/$t" ] || missing+=("$CNI_BIN_DIR/$t")
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "--kubelet needs ${missing[*]} (scripts/setup --kubelet installs them)"
  [ -n "$(cgroup_hierarchies)" ] || die "--kubelet: no cgroup v1 hierarchy under /sys/fs/cgroup"
}

nodes_build() {
  if [ -z "$NODE_BIN_DIR" ]; then
    "$LAB_DIR/build-node" >&2 || die "lab/build-node failed"
    NODE_BIN_DIR=$("$LAB_DIR/build-node" bindir)
  fi
  local b
  for b in kubelet kube-scheduler relay egress pause; do
    [ -x "$NODE_BIN_DIR/$b" ] || die "$NODE_BIN_DIR/$b is missing"
  done
}

# --- pids ------------------------------------------------------------------------------

# node_proc_pid FILE EXE [MARK]: the pid in FILE when it runs EXE started for this state
# dir (its command line names MARK, default the state dir).
node_proc_pid() {
  local f=$1 want=$2 mark=${3:-$STATE_DIR} pid exe cmdline
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)}
  [ "${exe##*/}" = "$want" ] || return 1
  cmdline=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ $cmdline == *"$mark"* ]] || return 1
  echo "$pid"
}

# node_proc_starting FILE: the pid in FILE is a child of this shell that has not exited
# (not a zombie): still going through setsid, nsenter, unshare and sh to its binary, when
# node_proc_pid cannot tell it from an exit (as lab/cluster's still_starting).
node_proc_starting() {
  local pid stat state ppid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  read -r state ppid _ <<<"${stat##*) }"
  [ "$state" != Z ] && [ "$state" != X ] || return 1
  [ "$ppid" = "$$" ] || [ "$ppid" = "$BASHPID" ]
}

stop_pid_file() {
  local f=$1 exe=$2 pid i
  pid=$(node_proc_pid "$f" "$exe" "${3:-$STATE_DIR}") || {
    rm -f "$f"
    return 0
  }
  log "stopping $exe (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    pid_alive "$pid" || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$f"
}

# Every pid in this lab's cgroup tree (one hierarchy is enough: each process is in all).
cgroup_pids() {
  local h
  h=$(cgroup_hierarchies | head -n 1)
  [ -d "$h/$CGROUP_ROOT" ] || return 0
  find "$h/$CGROUP_ROOT" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un
}

# --- up --------------------------------------------------------------------------------

make_cgroups() {
  local h node sub
  for h in $(cgroup_hierarchies); do
    for node in "${NODES[@]}"; do
      for sub in "$CGROUP_ROOT" "$CGROUP_ROOT/$node" "$CGROUP_ROOT/$node/system"; do
        mkdir -p "$h/$sub"
        # A new cpuset has no CPUs or memory nodes: copy its parent's.
        if [ -f "$h/$sub/cpuset.cpus" ] && [ -z "$(cat "$h/$sub/cpuset.cpus")" ]; then
          cat "$h/$(dirname "$sub")/cpuset.cpus" >"$h/$sub/cpuset.cpus"
          cat "$h/$(dirname "$sub")/cpuset.mems" >"$h/$sub/cpuset.mems"
        fi
      done
    done
  done
}

make_network() {
  local i node ns j
  ip netns add "$SEG_NETNS"
  ip -n "$SEG_NETNS" link set lo up
  ip -n "$SEG_NETNS" link add br0 type bridge
  ip -n "$SEG_NETNS" link set br0 up
  for i in "${!NODES[@]}"; do
    node=${NODES[$i]}
    ns=$(node_netns "$node")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # The kubernetes Service's address, where the relay listens (never routed).
    ip -n "$ns" addr add "$SERVICE_IP/32" dev lo
    ip -n "$SEG_NETNS" link add "n$((i + 1))" type veth peer name eth0 netns "$ns"
    ip -n "$SEG_NETNS" link set "n$((i + 1))" master br0 up
    ip -n "$ns" addr add "${NODE_IPV4[$i]}/24" dev eth0
    ip -n "$ns" addr add "${NODE_IPV6[$i]}/64" dev eth0 nodad
    ip -n "$ns" link set eth0 up
  done
  # The client of the address plan on the segment (192.0.2.100): what a user's machine on
  # the nodes' link sees of a LoadBalancer address (ARP, NDP, traffic).
  ns=$CLIENT_NETNS
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$SEG_NETNS" link add c0 type veth peer name eth0 netns "$ns"
  ip -n "$SEG_NETNS" link set c0 master br0 up
  ip -n "$ns" addr add 192.0.2.100/24 dev eth0
  ip -n "$ns" addr add 2001:db8:0:1::100/64 dev eth0 nodad
  ip -n "$ns" link set eth0 up
  # The router of the address plan on the segment (192.0.2.1): a test starts FRR there
  # (lab/helm-check), peering with the nodes' speakers.
  ns=$ROUTER_NETNS
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$SEG_NETNS" link add r0 type veth peer name eth0 netns "$ns"
  ip -n "$SEG_NETNS" link set r0 master br0 up
  ip -n "$ns" addr add 192.0.2.1/24 dev eth0
  ip -n "$ns" addr add 2001:db8:0:1::1/64 dev eth0 nodad
  ip -n "$ns" link set eth0 up
  # Each node reaches the other nodes' Pod /28 through their segment address (forwarding
  # inside the node namespaces only).
  for i in "${!NODES[@]}"; do
    ns=$(node_netns "${NODES[$i]}")
    for j in "${!NODES[@]}"; do
      [ "$i" = "$j" ] && continue
      ip -n "$ns" route add "${POD_CIDRS[$j]}" via "${NODE_IPV4[$j]}"
    done
  done
}

# The sandbox image: the lab's pause binary alone, as an OCI archive.
make_pause_image() {
  local work=$STATE_DIR/images/pause-build layout
  layout=$STATE_DIR/images/pause
  rm -rf "$work" "$layout"
  mkdir -p "$work/rootfs"
  cp "$NODE_BIN_DIR/pause" "$work/rootfs/pause"
  umoci init --layout "$layout" >/dev/null
  umoci new --image "$layout:1" >/dev/null
  umoci insert --image "$layout:1" "$work/rootfs" / >/dev/null
  umoci config --image "$layout:1" --config.entrypoint /pause --config.user 65535:65535 >/dev/null
  umoci gc --layout "$layout" >/dev/null
  rm -rf "$work"
}

write_node_files() {
  local i=$1 node=${NODES[$1]} dir
  dir=$(node_dir "$node")
  mkdir -p "$dir"/{containerd/root,kubelet,pod-logs,cni/net.d,cni/ipam,sysctl}
  # The values the kubelet checks (and would otherwise write to the host's kernel).
  echo 1 >"$dir/sysctl/vm.overcommit_memory"
  echo 0 >"$dir/sysctl/vm.panic_on_oom"
  echo 10 >"$dir/sysctl/kernel.panic"
  echo 1 >"$dir/sysctl/kernel.panic_on_oops"
  echo 1000000 >"$dir/sysctl/kernel.keys.root_maxkeys"
  echo 25000000 >"$dir/sysctl/kernel.keys.root_maxbytes"
  # The resolver configuration Pods get instead of the machine's (no name servers: a Pod's
  # name lookups never leave the lab).
  echo "# metallb-rs lab node: no name servers" >"$dir/resolv.conf"
  cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd/root"
# A tmpfs private to this node's mount namespace.
state = "/run/containerd"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$dir/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  disable_apparmor = true
  # This machine's sessions lack CAP_SYS_RESOURCE (bounding set 0x1fffeffffff): no process
  # may lower its oom_score_adj, so runc fails on the -998 the kubelet asks for every Pod
  # sandbox ("failed to update /proc/self/oom_score_adj: Permission denied" in runc's
  # debug log, reported to containerd as "can't get final child's PID from pipe: EOF").
  # Clamped to containerd's own value instead.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$dir/cni/net.d"
EOF
  cat >"$dir/cni/net.d/10-lab.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "lab",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{ "subnet": "${POD_CIDRS[$i]}" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    }
  ]
}
EOF
  sign "node-$node" "/O=system:nodes/CN=system:node:$node" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  write_kubeconfig "$dir/kubelet.kubeconfig" "system:node:$node" "node-$node"
  # Through the node's relay (the serving certificate names 203.0.113.129).
  sed -i "s|server: .*|server: https://$SERVICE_IP:443|" "$dir/kubelet.kubeconfig"
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1: kubelet 1.37 refuses it unless told (failCgroupV1 defaults to true).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT/$node
containerRuntimeEndpoint: unix://$dir/containerd.sock
podLogsDir: $dir/pod-logs
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
failSwapOn: false
resolvConf: $dir/resolv.conf
# Its own oom_score_adj (default -999): lowering it needs CAP_SYS_RESOURCE, missing here.
oomScoreAdj: 0
# Shared disk: the kubelet must neither evict nor delete the lab's images for the
# machine's usage (image GC at 100 % never runs).
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerNode: true
EOF
}

start_relay() {
  local node=$1 ns dir
  ns=$(node_netns "$node")
  dir=$(node_dir "$node")
  setsid "$NODE_BIN_DIR/relay" -netns "/run/netns/$ns" -listen "$SERVICE_IP:443" \
    -target "127.0.0.1:$APISERVER_PORT" -label "$dir" </dev/null >>"$STATE_DIR/logs/relay-$node.log" 2>&1 &
  echo $! >"$dir/relay.pid"
}

start_egress() {
  local ns
  ns=$(node_netns "${NODES[0]}")
  setsid nsenter --net="/run/netns/$ns" -- "$NODE_BIN_DIR/egress" -socket "$EGRESS_SOCKET" \
    -allow 192.0.2.0/24 -allow 2001:db8:0:1::/64 -allow 203.0.113.64/26 -label "$STATE_DIR" \
    </dev/null >>"$STATE_DIR/logs/egress.log" 2>&1 &
  echo $! >"$STATE_DIR/run/egress.pid"
}

# containerd in the node's network namespace and a new private mount namespace, in the
# node's cgroup (system/); prints nothing, records the pid.
start_containerd() {
  local node=$1 ns dir cg
  ns=$(node_netns "$node")
  dir=$(node_dir "$node")
  cg="$CGROUP_ROOT/$node/system"
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid nsenter --net="/run/netns/$ns" -- unshare --mount --propagation private -- /bin/sh -ec '
    dir=$1 cg=$2 bin=$3
    shift 3
    for h in "$@"; do echo $$ >"$h/$cg/cgroup.procs"; done
    mount -t tmpfs -o mode=0755 lab-node-run /run
    mkdir -p /run/containerd
    for f in "$dir"/sysctl/*; do
      k=${f##*/}
      mount --bind "$f" "/proc/sys/$(echo "$k" | tr . /)"
    done
    exec "$bin" --config "$dir/containerd.toml"
  ' lab-node "$dir" "$cg" "$(command -v containerd)" $(cgroup_hierarchies) \
    </dev/null >>"$STATE_DIR/logs/containerd-$node.log" 2>&1 &
  echo $! >"$dir/containerd.pid"
}

ctr_node() {
  local dir
  dir=$(node_dir "$1")
  shift
  ctr --address "$dir/containerd.sock" --namespace k8s.io "$@"
}

# import_image NODE LAYOUT NAME: an OCI layout as NAME:<its tag>.
import_image() {
  local node=$1 layout=$2 name=$3 tar
  tar=$(mktemp "$STATE_DIR/images/import.XXXXXX")
  tar -C "$layout" -cf "$tar" .
  ctr_node "$node" images import --base-name "$name" "$tar" >/dev/null
  rm -f "$tar"
}

start_kubelet() {
  local node=$1 i=$2 ns dir cpid
  ns=$(node_netns "$node")
  dir=$(node_dir "$node")
  cpid=$(node_proc_pid "$dir/containerd.pid" containerd) || die "containerd of $node is not running"
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid nsenter --net="/run/netns/$ns" --mount="/proc/$cpid/ns/mnt" -- /bin/sh -ec '
    cg=$1 bin=$2 dir=$3 node=$4 ips=$5
    shift 5
    for h in "$@"; do echo $$ >"$h/$cg/cgroup.procs"; done
    exec "$bin" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
      --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" \
      --hostname-override "$node" --node-ip "$ips" --v=1
  ' lab-node "$CGROUP_ROOT/$node/system" "$NODE_BIN_DIR/kubelet" "$dir" "$node" \
    "${NODE_IPV4[$i]},${NODE_IPV6[$i]}" $(cgroup_hierarchies) \
    </dev/null >>"$STATE_DIR/logs/kubelet-$node.log" 2>&1 &
  echo $! >"$dir/kubelet.pid"
}

start_scheduler() {
  sign kube-scheduler "/CN=system:kube-scheduler" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  write_kubeconfig "$STATE_DIR/kube-scheduler.kubeconfig" system:kube-scheduler kube-scheduler
  log "starting kube-scheduler"
  # --secure-port=0: no serving port (the lab has no port for it); waits go by Pods.
  setsid "$NODE_BIN_DIR/kube-scheduler" --kubeconfig "$STATE_DIR/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE_DIR/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE_DIR/kube-scheduler.kubeconfig" \
    --secure-port=0 --leader-elect=false --profiling=false --v=0 \
    </dev/null >>"$STATE_DIR/logs/kube-scheduler.log" 2>&1 &
  echo $! >"$STATE_DIR/run/kube-scheduler.pid"
}

node_ready() {
  [ "$(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

containerd_ready() { ctr_node "$1" version >/dev/null 2>&1; }

# Starts the scheduler and every node; returns once every Node is Ready.
nodes_up() {
  local t0=$SECONDS i node dir
  : >"$NODE_MARKER"
  make_cgroups
  make_network
  mkdir -p "$STATE_DIR/images"
  make_pause_image
  start_scheduler
  log "starting egress (the API server's proxy to nodes and Pods) in $(node_netns "${NODES[0]}")"
  start_egress
  for i in "${!NODES[@]}"; do
    node=${NODES[$i]}
    write_node_files "$i"
    start_relay "$node"
    log "starting containerd on $node (namespace $(node_netns "$node"))"
    start_containerd "$node"
  done
  for node in "${NODES[@]}"; do
    local deadline=$((SECONDS + 60))
    until containerd_ready "$node"; do
      dir=$(node_dir "$node")
      node_proc_pid "$dir/containerd.pid" containerd >/dev/null ||
        node_proc_starting "$dir/containerd.pid" ||
        die "containerd of $node exited; last lines of its log:
$(tail -n 30 "$STATE_DIR/logs/containerd-$node.log")"
      [ $SECONDS -lt $deadline ] || die "containerd of $node did not answer in 60 s"
      sleep 0.3
    done
    import_image "$node" "$STATE_DIR/images/pause" localhost/metallb-rs-lab/pause
    local c loaded=()
    for c in controller speaker; do
      if [ -f "$IMAGES_DIR/$c/index.json" ]; then
        import_image "$node" "$IMAGES_DIR/$c" "docker.io/metallb-rs/$c"
        loaded+=("$c")
      fi
    done
    if [ ${#loaded[@]} -gt 0 ]; then
      log "$node: loaded ${loaded[*]} from $IMAGES_DIR"
    else
      log "$node: no images in $IMAGES_DIR (scripts/images builds them; LAB_IMAGES_DIR overrides)"
    fi
  done
  log "containerd up on every node after $((SECONDS - t0)) s"
  for i in "${!NODES[@]}"; do
    log "starting kubelet on ${NODES[$i]}"
    start_kubelet "${NODES[$i]}" "$i"
  done
  for node in "${NODES[@]}"; do
    local deadline=$((SECONDS + 120))
    dir=$(node_dir "$node")
    until node_ready "$node"; do
      node_proc_pid "$dir/kubelet.pid" kubelet >/dev/null ||
        node_proc_starting "$dir/kubelet.pid" ||
        die "the kubelet of $node exited; last lines of its log:
$(tail -n 30 "$STATE_DIR/logs/kubelet-$node.log")"
      [ $SECONDS -lt $deadline ] ||
        die "$node is not Ready after 120 s: $(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' 2>&1)"
      sleep 0.5
    done
  done
  log "every node Ready $((SECONDS - t0)) s after the node agents started"
}

# --- down ------------------------------------------------------------------------------

nodes_down() {
  local node dir
  stop_pid_file "$STATE_DIR/run/kube-scheduler.pid" kube-scheduler
  stop_pid_file "$STATE_DIR/run/egress.pid" egress
  # FRR a test started in the router namespace (its pid files name the state dir).
  local d
  for d in bgpd zebra; do
    stop_pid_file "$ROUTER_DIR/$d.pid" "$d" "$ROUTER_DIR"
  done
  rm -rf "$ROUTER_DIR"
  if [ -d "$STATE_DIR/nodes" ]; then
    for node in "${NODES[@]}"; do
      dir=$(node_dir "$node")
      stop_pid_file "$dir/kubelet.pid" kubelet
      stop_pid_file "$dir/containerd.pid" containerd
      stop_pid_file "$dir/relay.pid" relay
    done
  fi
  # What is left in the lab's cgroups: shims and containers (their mount namespace ends
  # with its last process, taking the rootfs and volume mounts with it).
  local pids round
  for round in TERM TERM KILL KILL KILL; do
    mapfile -t pids < <(cgroup_pids)
    [ ${#pids[@]} -gt 0 ] || break
    log "stopping ${#pids[@]} processes left in the cgroups of /$CGROUP_ROOT (SIG$round)"
    kill "-$round" "${pids[@]}" 2>/dev/null || true
    sleep 1
  done
  mapfile -t pids < <(cgroup_pids)
  [ ${#pids[@]} -eq 0 ] || die "processes still in /$CGROUP_ROOT: ${pids[*]}"
  local h
  for h in $(cgroup_hierarchies); do
    [ -d "$h/$CGROUP_ROOT" ] || continue
    find "$h/$CGROUP_ROOT" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ ! -d "$h/$CGROUP_ROOT" ] || die "could not remove the cgroup $h/$CGROUP_ROOT"
  done
  local ns
  for ns in $(ip netns list | awk -v p="$NETNS_PREFIX-" 'index($1, p) == 1 { print $1 }'); do
    ip netns del "$ns"
  done
  # Nothing may stay mounted under the state dir (the mounts lived in the nodes' private
  # mount namespaces; this only reports a leak instead of deleting through it).
  if findmnt -rn -o TARGET | grep -F "$STATE_DIR/" >/dev/null; then
    die "mounts left under $STATE_DIR: $(findmnt -rn -o TARGET | grep -F "$STATE_DIR/" | tr '\n' ' ')"
  fi
  rm -f "$NODE_MARKER"
}

nodes_status() {
  local node dir c pid
  for node in "${NODES[@]}"; do
    dir=$(node_dir "$node")
    for c in relay containerd kubelet; do
      if pid=$(node_proc_pid "$dir/$c.pid" "$c"); then
        echo "$node $c: running (pid $pid)"
      else
        echo "$node $c: not running"
      fi
    done
  done
  if pid=$(node_proc_pid "$STATE_DIR/run/egress.pid" egress); then
    echo "egress: running (pid $pid)"
  else
    echo "egress: not running"
  fi
  if pid=$(node_proc_pid "$STATE_DIR/run/kube-scheduler.pid" kube-scheduler); then
    echo "kube-scheduler: running (pid $pid)"
  else
    echo "kube-scheduler: not running"
  fi
}
