#!/bin/sh
# Starts one pod of the StatefulSet `redis` (run by sh from the redis-scripts ConfigMap).
#
# Its role comes from the Sentinels: a replica of the master they name, or the master when
# they name this pod. When no Sentinel answers (the first start of all, or all three
# lost), redis-0 starts as the master and the others as its replicas. A pod never decides
# on its own to be a master while Sentinels name another one, so a restarted old master
# comes back as a replica of the one that replaced it.
set -eu

domain="$POD_NAMESPACE.svc.cluster.local"
self="$POD_NAME.redis.$domain"

master=""
for i in 0 1 2; do
  answer=$(timeout 3 redis-cli -h "sentinel-$i.sentinel.$domain" -p 26379 \
    sentinel get-master-addr-by-name portcullis 2>/dev/null | head -n 1) || answer=""
  # Only a name of this StatefulSet counts; an error text or an empty answer does not.
  case "$answer" in
    redis-[0-9]*.redis."$domain") master="$answer"; break ;;
  esac
done
[ -n "$master" ] || master="redis-0.redis.$domain"

# The password goes into a file on a memory-backed volume, never onto the command line
# (where `ps` would show it) or the node's disk. No here-document: dash may write one to
# /tmp, which is read-only here.
umask 077
{
  echo "bind * -::*"
  echo "port 6379"
  echo "dir /data"
  # Every write reaches the append-only file, fsynced every second, so a restarted pod
  # keeps its counts.
  echo "appendonly yes"
  echo "appendfsync everysec"
  # Below the container's memory limit (1Gi), with room for the fork of an AOF rewrite and
  # the replication buffers. Full, Redis refuses writes (the daemons then deny) instead of
  # evicting keys: an evicted key can be a lockout. The daemon refuses an evicting Redis.
  echo "maxmemory 768mb"
  echo "maxmemory-policy noeviction"
  echo "requirepass $REDIS_PASSWORD"
  echo "masterauth $REDIS_PASSWORD"
  # Replicas are announced, and so known to the Sentinels and the daemons, by their stable
  # DNS name rather than a pod IP that changes on every restart.
  echo "replica-announce-ip $self"
  echo "replica-announce-port 6379"
  # After a failover the other replica may need a full resync (it was ahead of the one
  # promoted); send it at once, not after Redis's default 5 s wait for more replicas:
  # until it is in sync, no count's WAIT is confirmed and every count is denied.
  echo "repl-diskless-sync-delay 0"
} > /conf/redis.conf
if [ "$master" != "$self" ]; then
  echo "replicaof $master 6379" >> /conf/redis.conf
fi

exec redis-server /conf/redis.conf
