#!/bin/sh
# Start dockerd in the background on hosts without systemd and wait for its socket (up to 60 s).
# Exit 0 when it was already answering, 10 when this script started it, 1 on failure.
set -u
SOCK=${1:-/var/run/docker.sock}
LOG=${2:-/var/log/aic-dockerd.log}
if docker -H "unix://$SOCK" version >/dev/null 2>&1; then
  exit 0
fi
setsid nohup dockerd -H "unix://$SOCK" >>"$LOG" 2>&1 </dev/null &
i=0
while [ $i -lt 60 ]; do
  if docker -H "unix://$SOCK" version >/dev/null 2>&1; then
    exit 10
  fi
  sleep 1
  i=$((i + 1))
done
echo "dockerd did not answer on $SOCK within 60 s; see $LOG" >&2
tail -n 20 "$LOG" >&2
exit 1
