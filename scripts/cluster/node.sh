# Sourced by scripts/cluster.sh: the node's namespaces, cgroups and processes; up, down, status.

holder_pid() { cat "$STATE/holder.pid" 2>/dev/null || true; }

node_running() {
  local h
  h="$(holder_pid)"
  [[ -n "$h" ]] && kill -0 "$h" 2>/dev/null
}

# Runs a command in the node's network and mount namespaces.
node_exec() {
  node_running || { echo "cluster: the node is not up (scripts/cluster.sh up)" >&2; return 1; }
  nsenter --target "$(holder_pid)" --mount --net -- "$@"
}

# Every cgroup v1 hierarchy and the v2 one of a hybrid host.
cgroup_roots() {
  local d
  for d in /sys/fs/cgroup/*; do
    [[ -f "$d/cgroup.procs" ]] && echo "$d"
  done
}

# ISTHMUS_NODE_CPU_SHARES: the node's cgroup v1 cpu.shares (default the kernel's 1024). The
# full test tier sets it low: there the node runs beside the lab, whose shoot requests must
# answer within 5 s, while the node's steps wait in minutes; under contention the node yields.
cgroups_make() {
  local r
  for r in $(cgroup_roots); do
    mkdir -p "$r/$CGROUP/system"
    if [[ -n "${ISTHMUS_NODE_CPU_SHARES:-}" && -f "$r/$CGROUP/cpu.shares" ]]; then
      echo "$ISTHMUS_NODE_CPU_SHARES" > "$r/$CGROUP/cpu.shares"
    fi
    if [[ -f "$r/cpuset.cpus" ]]; then
      local c
      for c in "$r/$CGROUP" "$r/$CGROUP/system"; do
        cat "$r/cpuset.cpus" > "$c/cpuset.cpus"
        cat "$r/cpuset.mems" > "$c/cpuset.mems"
      done
    fi
  done
}

# PIDs of every process in the node's cgroups (daemons, shims, containers).
cgroup_pids() {
  local r
  for r in $(cgroup_roots); do
    [[ -d "$r/$CGROUP" ]] && find "$r/$CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -un
}

# start NAME CMD...: a node daemon in the node's namespaces and cgroup; log in $STATE/logs.
start() {
  local name="$1"
  shift
  local roots
  roots="$(cgroup_roots | tr '\n' ' ')"
  # umask 022: containerd creates the snapshot directories a non-root container must enter.
  nsenter --target "$(holder_pid)" --mount --net -- setsid bash -c '
    umask 022
    for r in '"$roots"'; do echo $$ > "$r/'"$CGROUP"'/system/cgroup.procs"; done
    echo $$ > "'"$STATE"'/pids/'"$name"'"
    exec "$@"' "$name" "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null &
}

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds; on timeout print the logs' tails.
wait_for() {
  local what="$1" secs="$2"
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "cluster: $what not ready after ${secs}s; last log lines:" >&2
      tail -n 15 "$STATE"/logs/*.log >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

kubectl_admin() { node_exec "$K8S/kubectl" --kubeconfig "$STATE/etc/admin.kubeconfig" "$@"; }

netns_make() {
  ip netns add "$NODE_NS"
  ip netns add "$EXT_NS"
  ip link add isthmus-n0 netns "$NODE_NS" type veth peer name isthmus-e0 netns "$EXT_NS"
  ip -n "$NODE_NS" link set isthmus-n0 name eth0
  ip -n "$EXT_NS" link set isthmus-e0 name eth0
  ip -n "$NODE_NS" addr add "$NODE_IP/24" dev eth0
  ip -n "$EXT_NS" addr add "$EXT_IP/24" dev eth0
  local ns
  for ns in "$NODE_NS" "$EXT_NS"; do
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
  done
  # kubelet and kube-proxy want a default route; it ends in the outside namespace, which has
  # no route further: nothing leaves the machine.
  ip -n "$NODE_NS" route add default via "$EXT_IP"
  ip -n "$EXT_NS" route add "$LB_RANGE" via "$NODE_IP"
  ip netns exec "$NODE_NS" sysctl -qw net.ipv4.ip_forward=1
}

# A process that holds the node's private mount namespace (inside the node's netns).
holder_start() {
  setsid bash -c 'echo $$ > "$1"; exec unshare --mount --propagation private nsenter --net="/run/netns/$2" sleep infinity' \
    _ "$STATE/holder.pid" "$NODE_NS" </dev/null >/dev/null 2>&1 &
  wait_for "the mount namespace holder" 10 test -s "$STATE/holder.pid"
  # unshare has exec'd sleep once its mount namespace differs from ours.
  wait_for "the mount namespace" 10 bash -c \
    '[[ "$(readlink /proc/$(cat "'"$STATE"'/holder.pid")/ns/mnt)" != "$(readlink /proc/self/ns/mnt)" ]]'
  # The node's own sysfs (its network devices, not the host's), with the host's cgroup
  # hierarchies mounted again beneath it (kubelet and runc need them); tmpfs over the places
  # containerd, kubelet and the CNI plugins write outside their configured directories.
  local cg="" target fstype opts
  while read -r target fstype opts; do
    cg+="mkdir -p $target && mount -t $fstype -o $opts isthmus-node-cgroup $target && "
  done < <(findmnt -rn -t cgroup,cgroup2 -o TARGET,FSTYPE,OPTIONS)
  node_exec sh -c "
    mount -t sysfs isthmus-node-sys /sys &&
    mount -t tmpfs -o mode=0755 isthmus-node-cgroup /sys/fs/cgroup &&
    $cg
    mount -t tmpfs -o mode=0755 isthmus-node-run /run &&
    mount -t tmpfs -o mode=0755 isthmus-node-varlib /var/lib &&
    mount -t tmpfs -o mode=0755 isthmus-node-varlog /var/log &&
    mkdir -p /run/containerd &&
    mount --bind '$STATE/etc/resolv.conf' /etc/resolv.conf &&
    mount --bind '$STATE/etc/hosts' /etc/hosts"
}

# The kernel settings kubelet changes outside any namespace; `down` writes them back.
GLOBAL_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

# Shared by the seeds of the machine: the first one up saves the settings, the last one down
# writes them back (target/cluster-host/: sysctls.saved, and per seed that is up a file with
# the PID of its namespace holder; a seed whose holder is gone, after a crash, counts as down).
sysctls_save() {
  mkdir -p "$HOST_STATE/up"
  [[ -f "$HOST_STATE/sysctls.saved" ]] && return 0
  local s
  for s in "${GLOBAL_SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done > "$HOST_STATE/sysctls.saved"
}

seed_mark_up() { holder_pid > "$HOST_STATE/up/$SEED"; }

sysctls_restore() {
  rm -f "$HOST_STATE/up/$SEED"
  local f
  for f in "$HOST_STATE"/up/*; do
    [[ -f "$f" ]] || continue
    kill -0 "$(cat "$f")" 2>/dev/null && return 0
    rm -f "$f"
  done
  if [[ -f "$HOST_STATE/sysctls.saved" ]]; then
    local line
    while IFS= read -r line; do sysctl -qw "$line" || true; done < "$HOST_STATE/sysctls.saved"
  fi
  rm -rf "$HOST_STATE"
}

control_plane_start() {
  start etcd "$ETCD_BIN" --name node --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster node=http://127.0.0.1:2380 --log-level warn --quota-backend-bytes 2147483648
  start kube-apiserver "$K8S/kube-apiserver" \
    --etcd-servers http://127.0.0.1:2379 \
    --bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$NODE_IP" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" --token-auth-file "$PKI/tokens.csv" \
    --kubelet-client-certificate "$PKI/kubelet-client.crt" --kubelet-client-key "$PKI/kubelet-client.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --profiling=false --v=1
  wait_for kube-apiserver 120 kubectl_admin get --raw /readyz
  start kube-controller-manager "$K8S/kube-controller-manager" \
    --kubeconfig "$STATE/etc/kube-controller-manager.kubeconfig" \
    --authentication-skip-lookup --bind-address 127.0.0.1 --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials --cluster-cidr "$POD_CIDR" --allocate-node-cidrs \
    --node-cidr-mask-size 24 --service-cluster-ip-range "$SERVICE_CIDR" --profiling=false
  start kube-scheduler "$K8S/kube-scheduler" \
    --kubeconfig "$STATE/etc/kube-scheduler.kubeconfig" --authentication-skip-lookup \
    --authorization-always-allow-paths /healthz,/readyz,/livez,/metrics \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false
}

node_start() {
  start containerd containerd --config "$STATE/etc/containerd.toml"
  wait_for containerd 60 test -S "$RUN/containerd.sock"
  images_import_all
  start kubelet "$K8S/kubelet" --config "$STATE/etc/kubelet.yaml" \
    --kubeconfig "$STATE/etc/kubelet.kubeconfig" --root-dir "$STATE/kubelet" \
    --cert-dir "$STATE/kubelet/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v=1
  start kube-proxy "$K8S/kube-proxy" --config "$STATE/etc/kube-proxy.yaml"
  wait_for "node $NODE_NAME Ready" 120 kubectl_admin wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
  kubectl_admin apply -f "$root/scripts/cluster/addons.yaml" >/dev/null
  # --v=1: its NetworkPolicy syncs and how long they took, which tests/cluster/upgrade.rs
  # prints when a new connection fails (a new pod is admitted by a policy only after a sync).
  # kube-router.sh: restarted when it loses its load-balancer lease (why: that script).
  start kube-router env POD_NAMESPACE=kube-system POD_NAME="$NODE_NAME" \
    "$root/scripts/cluster/kube-router.sh" "$STATE/logs/kube-router.log" "$STATE/pids/kube-router.process" \
    "$ISTHMUS_CACHE/kube-router-$KUBE_ROUTER_VERSION/kube-router" \
    --kubeconfig "$STATE/etc/kube-router.kubeconfig" --hostname-override "$NODE_NAME" \
    --run-router=false --run-service-proxy=false --run-firewall=true --run-loadbalancer=true \
    --loadbalancer-ip-range "$LB_RANGE" --enable-cni=false --enable-ipv4=true --enable-ipv6=false \
    --enable-pod-egress=false --service-cluster-ip-range "$SERVICE_CIDR" --health-port 0 \
    --iptables-sync-period 30s --v=1
}

# The host's door to kube-apiserver: 127.0.0.1:$API_PORT -> a unix socket -> the node's 6443.
forwarder_start() {
  start api-forward-node socat "UNIX-LISTEN:$RUN/apiserver.sock,fork,mode=0600" "TCP:127.0.0.1:6443"
  wait_for "the kube-apiserver socket" 10 test -S "$RUN/apiserver.sock"
  local roots
  roots="$(cgroup_roots | tr '\n' ' ')"
  setsid bash -c 'for r in '"$roots"'; do echo $$ > "$r/'"$CGROUP"'/system/cgroup.procs"; done
    echo $$ > "'"$STATE"'/pids/api-forward-host"
    exec socat TCP-LISTEN:'"$API_PORT"',bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:'"$RUN"'/apiserver.sock' \
    >"$STATE/logs/api-forward-host.log" 2>&1 </dev/null &
}

cluster_up() {
  local t0=$SECONDS
  [[ $EUID -eq 0 ]] || { echo "cluster: run as root" >&2; exit 1; }
  if node_running; then
    echo "cluster: already up"
    cluster_print_env
    return 0
  fi
  "$root/scripts/install-deps.sh"
  if ip netns list | grep -qw "$NODE_NS"; then
    echo "cluster: namespace $NODE_NS exists from an earlier run; cleaning up first" >&2
    cluster_down
  fi
  images_build_all
  mkdir -p "$STATE"/{pids,logs} "$RUN"
  pki_make "$PKI"
  config_write
  local c
  for c in admin kube-controller-manager kube-scheduler kube-proxy kube-router kubelet; do
    kubeconfig_make "$STATE/etc/$c.kubeconfig" "$PKI/token-$c" "https://127.0.0.1:6443"
  done
  kubeconfig_make "$KUBECONFIG_HOST" "$PKI/token-admin" "https://127.0.0.1:$API_PORT"
  sysctls_save
  netns_make
  cgroups_make
  holder_start
  seed_mark_up
  control_plane_start
  node_start
  forwarder_start
  wait_for "CoreDNS Ready" 180 kubectl_admin -n kube-system wait --for=condition=Available deploy/coredns --timeout=1s
  storage_install
  druid_install
  echo "cluster: node up in $((SECONDS - t0)) s"
  if [[ "${1:-}" != "--no-isthmus" ]]; then
    isthmus_install
  fi
  cluster_print_env
}

# The line that points a shell at the cluster, with the cluster's own kubectl first in PATH.
cluster_print_env() {
  echo "export KUBECONFIG=$KUBECONFIG_HOST PATH=$K8S:\$PATH"
}

cluster_down() {
  [[ $EUID -eq 0 ]] || { echo "cluster: run as root" >&2; exit 1; }
  # Every process of the node by PID: the holder, the daemons, shims and containers (all in
  # the node's cgroups), until none is left.
  local h pids tries=0
  h="$(holder_pid)"
  [[ -n "$h" ]] && kill -9 "$h" 2>/dev/null || true
  while pids="$(cgroup_pids)"; [[ -n "$pids" ]]; do
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    ((++tries > 100)) && { echo "cluster: processes survive SIGKILL: $pids" >&2; break; }
    sleep 0.1
  done
  # Cgroups, deepest first.
  local r
  for r in $(cgroup_roots); do
    [[ -d "$r/$CGROUP" ]] && find "$r/$CGROUP" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  ip netns del "$NODE_NS" 2>/dev/null || true
  ip netns del "$EXT_NS" 2>/dev/null || true
  sysctls_restore
  # State: containerd's overlay snapshots were mounted only in the node's (now gone) mount
  # namespace, so this removes plain files.
  rm -rf "$STATE"
  echo "cluster: down"
}

cluster_status() {
  if ! node_running; then
    echo "cluster: down"
    return 1
  fi
  local f
  echo "processes:"
  for f in "$STATE"/pids/*; do
    local p
    p="$(cat "$f")"
    if kill -0 "$p" 2>/dev/null; then echo "  $(basename "$f") (pid $p) running"; else echo "  $(basename "$f") (pid $p) DEAD"; fi
  done
  kubectl_admin get nodes -o wide
  kubectl_admin get pods -A -o wide
  kubectl_admin get svc -A
  # The whole node (daemons, shims, pods): memory now, CPU over 5 s.
  local mem cpu0 cpu1
  mem="$(cat /sys/fs/cgroup/memory/$CGROUP/memory.usage_in_bytes 2>/dev/null || echo 0)"
  cpu0="$(cat /sys/fs/cgroup/cpuacct/$CGROUP/cpuacct.usage 2>/dev/null || echo 0)"
  sleep 5
  cpu1="$(cat /sys/fs/cgroup/cpuacct/$CGROUP/cpuacct.usage 2>/dev/null || echo 0)"
  echo "node cgroup /$CGROUP: memory $((mem / 1048576)) MiB (with page cache), CPU $(((cpu1 - cpu0) / 50000000)) % of one core over 5 s"
  cluster_print_env
}
