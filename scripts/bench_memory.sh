#!/bin/bash
# Resident memory of an idle `airlock up` after start, after 20 sequential logins
# and after 5 bursts of 4 concurrent logins (BENCHMARKS.md: "Server memory").
# usage: scripts/bench_memory.sh BINARY PORT   (EXTRA="VAR=value" to add to its environment)
set -u
BIN=$1; PORT=$2; D=/tmp/rss-$PORT; rm -rf $D; mkdir -p $D/workers
(env ${EXTRA:-} AIRLOCK_DATA_DIR=$D/data AIRLOCK_WORKERS_DIR=$D/workers $BIN up --listen 127.0.0.1:$PORT > $D/log 2>&1 &)
for i in $(seq 1 100); do curl -s 127.0.0.1:$PORT/readyz >/dev/null && break; sleep 0.1; done
P=$(pgrep -f "listen 127.0.0.1:$PORT" | head -1)
echo "start: $(grep VmRSS /proc/$P/status)"
T=$(cat $D/data/keys/bootstrap.token)
curl -s -XPOST 127.0.0.1:$PORT/v1/bootstrap -H 'content-type: application/json' -d "{\"token\":\"$T\",\"username\":\"owner\",\"password\":\"correct horse battery staple\"}" >/dev/null
for i in $(seq 1 20); do curl -s -XPOST 127.0.0.1:$PORT/v1/session -H 'content-type: application/json' -d '{"username":"owner","password":"correct horse battery staple"}' >/dev/null; done
echo "after 20 logins: $(grep -E 'VmRSS' /proc/$P/status) $(grep VmHWM /proc/$P/status)"
sleep 2
echo "2 s later: $(grep VmRSS /proc/$P/status)"
# 4 concurrent logins x 5
for j in 1 2 3 4 5; do for i in 1 2 3 4; do curl -s -XPOST 127.0.0.1:$PORT/v1/session -H 'content-type: application/json' -d '{"username":"owner","password":"correct horse battery staple"}' >/dev/null & done; wait; done
sleep 2
echo "after 4-way burst, 2 s later: $(grep VmRSS /proc/$P/status)"
kill $P
