#!/bin/sh
# A5c: a list longer than the host will ever read still costs hostcall fuel for every element (wasmtime's
# WasmList::new charges len x size_of::<host element>), so a list the guest legitimately holds traps it
# instead of `ok took 1024` / `invalid-argument`. send-many via hguest (SDK), connect via hguest2 (raw ABI).
cd /work/rt2
for n in 2000000 3000000; do
  echo "send-many with $n empty messages:"; timeout 60 nice -n 19 python3 guest_host_memory.py sendmany $n 2>&1 | tail -1 | sed 's/.*Caused by: |//' | cut -c1-200
done
for n in 65 1000000 3000000; do
  echo "connect with $n headers:"; timeout 30 nice -n 19 bin/tether run bin/hguest2.wasm --allow '127.0.0.1:*' -- cn-many ws://127.0.0.1:9/ $n 2>&1 | grep -E "^ok|^error|too much" | head -1
done
