#!/usr/bin/env bash
# kube-router under a watch for its load-balancer lease: `kube-router.sh LOG PIDFILE BINARY
# ARGS...`, started by node.sh with its output going to LOG; PIDFILE names the running kube-router.
#
# kube-router runs its LoadBalancer allocator's leader election once: v2.1.0's
# pkg/controllers/lballoc/lballoc.go, runLeaderElection, calls client-go's
# leaderelection.RunOrDie and never again (unchanged on its master of 2026-11). After one renewal
# missed by its 10 s RenewDeadline it is no leader for good: its firewall keeps working, but no
# LoadBalancer Service gets an address until kube-router restarts. Two CI runs (306b2b9 and
# f30ebee, the node at load ~49 under CPU shares 256) left isthmus-proxy `<pending>` for the
# migration's whole 600 s this way. So the first "failed to renew lease" line of a run ends it
# (SIGTERM: it releases the lease) and a new one starts; it takes the lease back at once, as the
# holder it names is its own.
# No pipefail: the watch's tail ends by SIGPIPE once grep has matched.
set -u
log="$1" pidfile="$2"
shift 2
while :; do
  from=$(($(wc -l <"$log") + 1))
  "$@" &
  pid=$!
  echo "$pid" >"$pidfile"
  # tail ends with kube-router (--pid); grep with its first match.
  (tail -n +"$from" -F --pid="$pid" "$log" 2>/dev/null | grep -q -m1 'failed to renew lease' &&
    echo "kube-router.sh: kube-router lost its load-balancer lease; restarting it" &&
    kill "$pid") &
  wait "$pid"
  status=$?
  echo "kube-router.sh: kube-router (pid $pid) exited with status $status; starting it again"
  sleep 1
done
