#!/bin/sh
# Entry point of a lab node container. Without --privileged (which fails on
# Docker 20.10 when the host lacks CAP_SYS_RESOURCE) /sys and the cgroup v1
# mounts are read-only; the nested dockerd needs them writable.
set -u
mount -o remount,rw /sys 2>/dev/null || true
for d in /sys/fs/cgroup/*/; do
  # a plain "remount,rw" fails with "mount point is busy"; a bind remount works
  mount -o remount,bind,rw "$d" 2>/dev/null || true
done
mkdir -p /run/sshd /etc/docker /var/log
# daemon.json is written by stackctl before start; a default keeps a bare run usable.
[ -s /etc/docker/daemon.json ] || echo '{"storage-driver":"overlay2"}' > /etc/docker/daemon.json
# After a stop/start (a power cycle through the node's BMC) the pid files of the
# previous boot are still there; dockerd refuses to start while its own exists.
rm -f /var/run/docker.pid /run/docker.pid /var/run/docker/containerd/containerd.pid /run/sshd.pid
/usr/sbin/sshd -E /var/log/sshd.log
dockerd >/var/log/dockerd.log 2>&1 &
# PID 1 stays a shell loop so `docker stop` (SIGTERM) ends the node promptly.
trap 'kill -TERM $(cat /run/docker.pid 2>/dev/null) 2>/dev/null; exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
