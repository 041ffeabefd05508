#!/bin/sh
# usage: scripts/heartbeat.sh LABEL COMMAND [ARGS...]
# Runs COMMAND and prints "LABEL: still running, N min" once a minute until it ends (long pip
# installs and compiles would otherwise be silent); exits with COMMAND's status.
label=$1
shift
start=$(date +%s)
echo "$label ..."
( while sleep 60; do echo "  $label: still running, $(( ($(date +%s) - start) / 60 )) min"; done ) &
beat=$!
"$@"
rc=$?
kill "$beat" 2>/dev/null
echo "  $label: $([ $rc -eq 0 ] && echo done || echo "FAILED (exit $rc)") after $(( ($(date +%s) - start) / 60 )) min"
exit $rc
