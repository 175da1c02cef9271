#!/bin/bash
# T9: URL/address spellings through the probe under --allow '*:*' --deny 127.0.0.0/8:* --deny '[::1]/128:*'
# (a bypass prints "ok connected"). Needs /tmp/rt17/bin/{tether,probe.wasm,echo.wasm}.
B=/tmp/rt17/bin
$B/tether run $B/echo.wasm --listen '127.0.0.1:*' -- server 127.0.0.1:0 --tcp 127.0.0.1:0 2>/tmp/rt17/logs/url_echo.err >/dev/null &
EP=$!; sleep 0.7
WS=$(grep -o 'listening on 127.0.0.1:[0-9]*' /tmp/rt17/logs/url_echo.err | head -1 | cut -d: -f2)
TP=$(grep -o 'TCP on 127.0.0.1:[0-9]*' /tmp/rt17/logs/url_echo.err | cut -d: -f2)
R=(--allow '*:*' --deny '127.0.0.0/8:*' --deny '[::1]/128:*')
for u in "ws://user@127.0.0.1:$WS/" "ws://a.example:1@127.0.0.1:$WS/" "ws://127.0.0.1:$WS\\@a.example/" "ws://127%2e0%2e0%2e1:$WS/" "ws://127.0.0.1%09:$WS/" \
         "ws://[::ffff:7f00:1]:$WS/" "ws://0x7f.1:$WS/" "ws://localhost.:$WS/" "ws://127.0.0.1:$WS?@a.example/" "ws://%5B::1%5D:$WS/" \
         "ws://127.0.0.1:0$WS/" "ws://127.0.0.1:+$WS/" "wss://127.0.0.1:$WS/" "ws://①②⑦.0.0.1:$WS/" "ws://127。0。0。1:$WS/" "ws://127.0.0.1.:$WS/" "WS://127.1:$WS/"; do
  printf '%-40s ' "$u"; timeout 10 $B/tether run $B/probe.wasm "${R[@]}" -- connect "$u" 2>&1 | head -1 | cut -c1-150
done
for a in "127.0.0.1:$TP" "127.1:$TP" "0:$TP" "[::ffff:127.0.0.1]:$TP" "localhost:$TP" "127.0.0.1:0$TP" "127.0.0.1:+$TP" " 127.0.0.1:$TP" "127.0.0.1 :$TP" "①②⑦.0.0.1:$TP" "[::1%lo]:$TP"; do
  printf 'tcp %-36s ' "$a"; timeout 10 $B/tether run $B/probe.wasm "${R[@]}" -- tcp-connect "$a" 2>&1 | head -1 | cut -c1-150
done
kill $EP
