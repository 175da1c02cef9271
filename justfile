# Tether tasks. `just` is optional: every recipe is a script or a cargo
# command you can run directly.

# echo round trips through a guest vs native, on an embedded server
demo *ARGS:
    scripts/demo {{ARGS}}

# the whole test suite, as CI runs it
test:
    scripts/test

# conformance suite: every case on every target plus Autobahn|Testsuite;
# checks conformance/matrix.md (--bless rewrites it, --json for counts)
conformance *ARGS:
    cargo run --release -q -p tether-conformance -- {{ARGS}}

# every benchmark in full (guest vs native in the same run), then
# target/bench/report.html with the plots and each bench's JSON
bench:
    cargo run --release -q -p tether --bin tether -- bench all

# run a guest component: just run path/to/guest.wasm --allow 127.0.0.1:* -- args
run *ARGS:
    cargo run --release -q -p tether --bin tether -- run {{ARGS}}
