# Sourced by scripts/cluster.sh: the link between seeds (`scripts/cluster.sh link …`).
#
# The seeds' outside namespaces are joined through one more namespace, `isthmus-link`, by a
# veth each (outside `link0` 10.(200+i).2.1/30, link `seed-<x>` 10.(200+i).2.2/30). Each outside
# routes every other linked seed's 10.(200+j).0.0/16 (its node, LoadBalancer range and outside)
# into the link namespace, which forwards nothing: nftables redirects every TCP connection
# arriving there to `isthmus-lab link`, the lab's link emulator, which carries it to the
# address it was dialled with at the set RTT. So TCP between seeds crosses the emulated link
# and nothing else crosses at all. The outsides forward between their node and the link and
# masquerade what leaves for the link (the pod range is the same in every seed); each routes its
# own seed's pod range to its node, for the answers to a pod's connection to another seed (the
# node forwards pod traffic unmasqueraded: the CNI's ipMasq is off). Nothing of
# this is in the host's namespace: `link down` (and the last seed's `down`) removes it all. A
# seed that goes down leaves the link (its veth goes with its outside); `link down` and `link
# up` join it again once it is back.

LINK_NS=isthmus-link
LINK_STATE="$root/target/cluster-link"
# Inside the link namespace only: nothing else listens there.
LINK_PORT=15001

# seed_index X: 0 for a … 9 for j.
seed_index() { echo $(($(printf '%d' "'$1") - 97)); }
seed_ext_ns() { if [[ "$1" == a ]]; then echo isthmus-node-ext; else echo "isthmus-$1-ext"; fi; }
link_pid() { cat "$LINK_STATE/pid" 2>/dev/null || true; }
link_running() { local p; p="$(link_pid)"; [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; }

# The emulator: ISTHMUS_LAB_BIN, else the release or debug build, else a debug build now (its
# dependencies are those of the tests).
link_binary() {
  local b
  for b in "${ISTHMUS_LAB_BIN:-}" "$root/target/release/isthmus-lab" "$root/target/debug/isthmus-lab"; do
    [[ -n "$b" && -x "$b" ]] && { echo "$b"; return 0; }
  done
  (cd "$root" && cargo build --locked -p isthmus-lab >&2) && echo "$root/target/debug/isthmus-lab"
}

link_up() {
  local seeds="" rtt=50ms
  while (($#)); do
    case "$1" in
      --seeds) seeds="${2:-}"; shift 2 ;;
      --rtt) rtt="${2:-}"; shift 2 ;;
      *) echo "cluster: link up takes --seeds X,Y[,…] [--rtt DURATION] (got '$1')" >&2; return 2 ;;
    esac
  done
  [[ $EUID -eq 0 ]] || { echo "cluster: run as root" >&2; return 1; }
  local list s
  IFS=, read -r -a list <<< "$seeds"
  ((${#list[@]} >= 2)) || { echo "cluster: link up needs two seeds or more (--seeds a,b)" >&2; return 2; }
  for s in "${list[@]}"; do
    [[ "$s" == [a-j] ]] || { echo "cluster: --seeds takes letters a-j (got '$s')" >&2; return 2; }
    ip netns list | grep -qw "$(seed_ext_ns "$s")" ||
      { echo "cluster: seed $s is not up (scripts/cluster.sh --seed $s up)" >&2; return 1; }
  done
  if ip netns list | grep -qw "$LINK_NS"; then
    echo "cluster: the link is up already (scripts/cluster.sh link down first)" >&2
    return 1
  fi
  local bin
  bin="$(link_binary)"
  mkdir -p "$LINK_STATE"
  echo "${list[*]}" > "$LINK_STATE/seeds"
  echo "$rtt" > "$LINK_STATE/rtt"
  ip netns add "$LINK_NS"
  ip -n "$LINK_NS" link set lo up
  # Nothing is routed through the link's namespace: what crosses, the relay carries.
  ip netns exec "$LINK_NS" sysctl -qw net.ipv4.ip_forward=0
  for s in "${list[@]}"; do link_join "$s" "${list[@]}"; done
  ip netns exec "$LINK_NS" nft -f - <<EOF
table ip isthmus-link {
  chain prerouting {
    type nat hook prerouting priority dstnat;
    meta l4proto tcp fib daddr type != local redirect to :$LINK_PORT
  }
}
EOF
  # Inherited descriptors closed first: a `flock` the caller holds must not outlive it here.
  setsid bash -c 'for fd in $(ls /proc/$$/fd); do ((fd > 2)) && eval "exec $fd>&-"; done
    echo $$ > "$1"; shift; exec ip netns exec "$@"' _ "$LINK_STATE/pid" \
    "$LINK_NS" "$bin" link --rtt "$rtt" --listen "0.0.0.0:$LINK_PORT" \
    >"$LINK_STATE/link.log" 2>&1 </dev/null &
  local deadline=$((SECONDS + 20))
  until [[ -n "$(ip netns exec "$LINK_NS" ss -Hltn "sport = :$LINK_PORT")" ]]; do
    if ! link_running && [[ -s "$LINK_STATE/pid" ]] || ((SECONDS >= deadline)); then
      echo "cluster: isthmus-lab link did not start; its log:" >&2
      cat "$LINK_STATE/link.log" >&2
      link_down >/dev/null
      return 1
    fi
    sleep 0.2
  done
  echo "cluster: link up between seeds ${list[*]}, RTT $rtt"
}

# link_join X SEEDS…: seed X's outside joined to the link namespace, routes to the others.
link_join() {
  local s="$1" i ext peer j
  shift
  i="$(seed_index "$s")"
  ext="$(seed_ext_ns "$s")"
  ip link add "seed-$s" netns "$LINK_NS" type veth peer name link0 netns "$ext"
  ip -n "$LINK_NS" addr add "10.$((200 + i)).2.2/30" dev "seed-$s"
  ip -n "$ext" addr add "10.$((200 + i)).2.1/30" dev link0
  ip -n "$LINK_NS" link set "seed-$s" up
  ip -n "$ext" link set link0 up
  ip -n "$LINK_NS" route add "10.$((200 + i)).0.0/16" via "10.$((200 + i)).2.1"
  ip -n "$ext" route replace "$POD_CIDR" via "10.$((200 + i)).0.2"
  for peer in "$@"; do
    [[ "$peer" == "$s" ]] && continue
    j="$(seed_index "$peer")"
    ip -n "$ext" route add "10.$((200 + j)).0.0/16" via "10.$((200 + i)).2.2"
  done
  ip netns exec "$ext" sysctl -qw net.ipv4.ip_forward=1
  ip netns exec "$ext" nft -f - <<EOF
table ip isthmus-link {
  chain postrouting {
    type nat hook postrouting priority srcnat;
    oifname "link0" masquerade
  }
}
EOF
}

# Stops the emulator (by PID, with what else runs in its namespace) and undoes link_join in
# every outside still up; idempotent.
link_down() {
  [[ $EUID -eq 0 ]] || { echo "cluster: run as root" >&2; return 1; }
  local p s ext
  p="$(link_pid)"
  [[ -n "$p" ]] && kill -9 "$p" 2>/dev/null || true
  if ip netns list | grep -qw "$LINK_NS"; then
    for p in $(ip netns pids "$LINK_NS"); do kill -9 "$p" 2>/dev/null || true; done
  fi
  for s in $(cat "$LINK_STATE/seeds" 2>/dev/null); do
    ext="$(seed_ext_ns "$s")"
    ip netns list | grep -qw "$ext" || continue
    # Deleting the veth deletes the routes through it.
    ip -n "$ext" link del link0 2>/dev/null || true
    ip -n "$ext" route del "$POD_CIDR" 2>/dev/null || true
    ip netns exec "$ext" nft delete table ip isthmus-link 2>/dev/null || true
    ip netns exec "$ext" sysctl -qw net.ipv4.ip_forward=0
  done
  ip netns del "$LINK_NS" 2>/dev/null || true
  rm -rf "$LINK_STATE"
  echo "cluster: link down"
}

# link_signal SIGNAL WHAT: SIGUSR1 cuts, SIGUSR2 restores.
link_signal() {
  link_running || { echo "cluster: the link is not up (scripts/cluster.sh link up)" >&2; return 1; }
  kill "-$1" "$(link_pid)"
  echo "cluster: link $2"
}

link_status() {
  if ! link_running; then
    echo "cluster: link down"
    return 1
  fi
  echo "link: seeds $(cat "$LINK_STATE/seeds"), RTT $(cat "$LINK_STATE/rtt"), isthmus-lab link pid $(link_pid)"
  tail -n 3 "$LINK_STATE/link.log"
}

link_cmd() {
  local sub="${1:-}"
  shift || true
  case "$sub" in
    up) link_up "$@" ;;
    down) link_down ;;
    cut) link_signal USR1 cut ;;
    restore) link_signal USR2 restored ;;
    status) link_status ;;
    *) echo "cluster: link up --seeds X,Y[,…] [--rtt DURATION] | down | cut | restore | status" >&2; return 2 ;;
  esac
}

# After a seed's `down`: the link goes with the last seed, so the host is as it was.
link_down_if_last() {
  local f
  [[ -d "$LINK_STATE" ]] || return 0
  for f in "$HOST_STATE"/up/*; do [[ -f "$f" ]] && return 0; done
  link_down >/dev/null
}
