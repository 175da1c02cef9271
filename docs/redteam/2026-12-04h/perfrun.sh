#!/bin/bash
# starts a 1000-channel slow read, perf-records tether for 4 s in the middle
N=${1:-1000}
(RECV=16384 timeout 60 python3 jmpeer.py 47001 $N 1 8 > perf_peer_$N.txt 2>&1 &)
sleep 4
PID=$(pgrep -n -f "/tmp/rt13/tether jmux")
timeout 10 perf record -F 2000 -g -p $PID -o perf_$N.data -- sleep 4 >/dev/null 2>&1
perf report -i perf_$N.data --no-children --sort dso,sym 2>/dev/null | grep -v '^#' | grep '%' | head -40
