#!/bin/sh
# Starts one pod of the StatefulSet `sentinel` (run by sh from the redis-scripts ConfigMap).
#
# A Sentinel rewrites its configuration as it learns (the current master, the replicas,
# the other Sentinels), and that file is on a memory-backed volume that a restart empties.
# So a starting Sentinel asks the other Sentinels which master they follow, then the Redis
# pods which one is a master, and only when neither answers (the first start) monitors
# redis-0. The rest it learns again from the master within seconds.
set -eu

domain="$POD_NAMESPACE.svc.cluster.local"
self="$POD_NAME.sentinel.$domain"

master=""
for i in 0 1 2; do
  peer="sentinel-$i.sentinel.$domain"
  [ "$peer" != "$self" ] || continue
  answer=$(timeout 3 redis-cli -h "$peer" -p 26379 \
    sentinel get-master-addr-by-name portcullis 2>/dev/null | head -n 1) || answer=""
  case "$answer" in
    redis-[0-9]*.redis."$domain") master="$answer"; break ;;
  esac
done
if [ -z "$master" ]; then
  for i in 0 1 2; do
    node="redis-$i.redis.$domain"
    if timeout 3 redis-cli -h "$node" info replication 2>/dev/null | grep -q '^role:master'; then
      master="$node"
      break
    fi
  done
fi
[ -n "$master" ] || master="redis-0.redis.$domain"

umask 077
{
  echo "bind * -::*"
  echo "port 26379"
  echo "dir /sentinel"
  # Addresses are the pods' stable DNS names, resolved at each use, and announced as
  # names: the daemons are told redis-N.redis.…, which outlives any pod IP.
  echo "sentinel resolve-hostnames yes"
  echo "sentinel announce-hostnames yes"
  echo "sentinel announce-ip $self"
  echo "sentinel announce-port 26379"
  # Clients of this Sentinel (the daemons, the Redis pods' start script, the other
  # Sentinels) give the password; a Sentinel that anyone could reach could be told to
  # follow another master.
  echo "requirepass $REDIS_PASSWORD"
  echo "sentinel sentinel-pass $REDIS_PASSWORD"
  # Quorum 2 of 3: two Sentinels must agree that the master is down, and a majority of
  # the three (two) must elect the one that fails over. One lost pod leaves both.
  echo "sentinel monitor portcullis $master 6379 2"
  echo "sentinel auth-pass portcullis $REDIS_PASSWORD"
  # The master is down after 5 s without an answer; a failover then takes 1-3 s more, and
  # counted attempts are denied (UNAVAILABLE, never allowed) until it ends.
  echo "sentinel down-after-milliseconds portcullis 5000"
  # How long a failover may take before it is abandoned (and the longest the replicas are
  # given to follow the new master); the same master is not failed over again by the same
  # Sentinel within twice this. Far above a real failover's seconds, well below Sentinel's
  # default of 3 minutes, so a failover that stalls is retried within 2 minutes.
  echo "sentinel failover-timeout portcullis 60000"
  # After a failover the other replica follows the new master (a partial resync, PSYNC2);
  # until it has, no replica confirms counts (store.wait_replicas = 1) and counted
  # attempts are denied.
  echo "sentinel parallel-syncs portcullis 1"
} > /sentinel/sentinel.conf

exec redis-server /sentinel/sentinel.conf --sentinel
