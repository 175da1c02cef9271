//! Embedding Tether in your own wasmtime setup with nothing but
//! `tether-host` (it re-exports the wasmtime, wasmtime-wasi and tokio it is
//! built against): the three calls of the README's "Embedding" section.
//!
//! ```text
//! cargo run --release -p tether-host --example embed -- GUEST.wasm RULE [GUEST ARGS...]
//! # e.g. the echo guest as a client of a server on 127.0.0.1:9001:
//! cargo run --release -p tether-host --example embed -- \
//!     target/guests/wasm32-wasip2/release/echo.wasm 127.0.0.1:9001 client ws://127.0.0.1:9001/
//! ```
//!
//! `RULE` is the one `--allow` rule (`HOST:PORT`); everything else is denied.

use tether_host::policy::Policy;
use tether_host::wasmtime::component::{Component, Linker, ResourceTable};
use tether_host::wasmtime::{Config as EngineConfig, Engine, Store};
use tether_host::wasmtime_wasi::p2::bindings::Command;
use tether_host::wasmtime_wasi::{self, WasiCtx, WasiCtxView, WasiView};
use tether_host::{Config, HostCtx, TetherCtx, TetherCtxView, TetherView, tokio};

/// Your store data: WASI, the resource table, and Tether's per-guest
/// context (the table is shared by WASI and Tether).
struct MyState {
    wasi: WasiCtx,
    table: ResourceTable,
    tether: TetherCtx,
}

impl WasiView for MyState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl TetherView for MyState {
    fn tether(&mut self) -> TetherCtxView<'_> {
        TetherCtxView {
            ctx: &mut self.tether,
            table: &mut self.table,
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [guest, rule, guest_args @ ..] = &args[..] else {
        return Err("usage: embed GUEST.wasm HOST:PORT [GUEST ARGS...]".into());
    };

    // 1. The shared host context: policy, TLS roots, limits.
    let config = Config {
        policy: Policy {
            allow: vec![rule.parse()?],
            ..Policy::default()
        },
        ..Config::default()
    };
    let host = HostCtx::new(config)?;

    // 2. Your engine and linker, with WASI and tether:streams.
    let engine = Engine::new(&EngineConfig::new())?;
    let mut linker = Linker::<MyState>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    tether_host::add_to_linker(&mut linker)?;
    let component = Component::from_file(&engine, guest)?;

    // 3. A store per guest, on a current-thread tokio runtime: a guest and
    //    its sockets' tasks then wake each other without crossing threads.
    let wasi = WasiCtx::builder()
        .inherit_stdio()
        .arg("guest")
        .args(guest_args)
        .build();
    // The host's limits bind before wasmtime's cap on live handles.
    let handles = host.config.limits.component_handles();
    let state = MyState {
        wasi,
        table: ResourceTable::new(),
        tether: TetherCtx::new(host),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let exit = rt.block_on(async move {
        let mut store = Store::new(&engine, state);
        store.set_max_component_handles(handles);
        let command = Command::instantiate_async(&mut store, &component, &linker).await?;
        command.wasi_cli_run().call_run(&mut store).await
    })?;
    exit.map_err(|()| "the guest exited with an error".into())
}
