# Sourced by scripts/cluster.sh: the node's configuration files, written into the state dir.
# Everything a component would put under /etc, /var/lib or /run lives under $STATE instead (or
# on a tmpfs of the node's private mount namespace), so `down` leaves no file behind outside it.

config_write() {
  mkdir -p "$STATE"/{etc,cni/net.d,cni/ipam,containerd/root,containerd/state,kubelet,logs/pods,etcd}

  # containerd (Debian 1.6): runc (crun refuses hybrid cgroups), cgroupfs, and
  # restrict_oom_score_adj (no CAP_SYS_RESOURCE here: without it every sandbox fails with
  # "can't get final child's PID from pipe: EOF"). Pod netns mounts under the state dir.
  cat > "$STATE/etc/containerd.toml" <<EOF2
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
oom_score = 0
[grpc]
  address = "$RUN/containerd.sock"
[ttrpc]
  address = "$RUN/containerd-ttrpc.sock"
[debug]
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
EOF2

  # ptp: one veth per pod, routed through the node's namespace, so every packet between pods
  # crosses the node's iptables (kube-proxy's rules and kube-router's NetworkPolicy chains)
  # without br_netfilter.
  cat > "$STATE/cni/net.d/10-isthmus-node.conflist" <<EOF2
{
  "cniVersion": "1.0.0",
  "name": "isthmus-node",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$STATE/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF2

  # kubelet: cgroup v1 (hybrid) needs failCgroupV1: false and the cgroupfs driver; every pod
  # cgroup lives under /isthmus-node so `down` finds and removes them.
  cat > "$STATE/etc/kubelet.yaml" <<EOF2
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
cgroupsPerQOS: true
failSwapOn: false
containerRuntimeEndpoint: unix://$RUN/containerd.sock
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
podLogsDir: $STATE/logs/pods
clusterDomain: cluster.local
clusterDNS: [$DNS_SERVICE_IP]
resolvConf: $STATE/etc/resolv.conf
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
serializeImagePulls: false
# syncFrequency stays kubelet's (and a seed's) default, 1 m + jitter: a route the controller
# writes reaches the proxy pods in about a second because the controller nudges them
# (controller/src/kube_adapter/nudge.rs), which tests/cluster.rs times on this node.
# The disk is shared with other work: never evict this node's pods for it.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 50
EOF2

  # kube-proxy, iptables mode (iptables-nft): never touches the conntrack sysctls (they are
  # the host's, not the namespace's).
  cat > "$STATE/etc/kube-proxy.yaml" <<EOF2
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection:
  kubeconfig: $STATE/etc/kube-proxy.kubeconfig
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF2

  # The node's resolver: nothing outside answers (no route leaves the machine); pods use
  # CoreDNS through clusterDNS.
  echo "nameserver $EXT_IP" > "$STATE/etc/resolv.conf"
  printf '127.0.0.1 localhost\n%s %s\n' "$NODE_IP" "$NODE_NAME" > "$STATE/etc/hosts"
}
