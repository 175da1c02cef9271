//! Running guests of the async interface: a `command` world component
//! (`wit-p3`) whose `run` is an `async func`, driven with
//! `Store::run_concurrent` on an engine with component-model-async.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{CallHook, Config as EngineConfig, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::runner::{
    GuestIo, Outcome, RunError, Runaway, classify_trap, end_run, outcome, precompile_cached,
    shutdown_deadline, wasi_ctx,
};
use crate::{Config, HostCtx, TetherCtx, TetherCtxView, TetherView};

/// Store data of an async-interface guest.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    tether: TetherCtx,
    limits: StoreLimits,
    resumed: Instant,
    epoch_yield: bool,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl TetherView for State {
    fn tether(&mut self) -> TetherCtxView<'_> {
        TetherCtxView {
            ctx: &mut self.tether,
            table: &mut self.table,
        }
    }
}

/// Compiles and runs async-interface guests under one [`Config`], with the
/// same limits as [`crate::runner::Runner`] (memory, runaway detection
/// through epochs, stdout capture).
pub struct Runner {
    engine: Engine,
    linker: Linker<State>,
    host: Arc<HostCtx>,
}

impl Runner {
    /// Builds a Cranelift engine with component-model-async and the
    /// linker (`wasi:cli` p2 for arguments and stdout, plus
    /// `tether:streams-async`), and starts the epoch ticker thread.
    ///
    /// Errors: engine configuration rejected, unreadable CA file.
    pub fn new(config: Config) -> anyhow::Result<Runner> {
        let mut c = EngineConfig::new();
        c.epoch_interruption(true).wasm_component_model_async(true);
        let engine = Engine::new(&c)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        super::add_to_linker(&mut linker)?;
        let weak = engine.weak();
        let tick = config.limits.epoch_tick;
        std::thread::Builder::new()
            .name("tether-epoch-p3".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(tick);
                }
            })?;
        Ok(Runner {
            engine,
            linker,
            host: HostCtx::new(config)?,
        })
    }

    /// The shared host context.
    pub fn host(&self) -> &Arc<HostCtx> {
        &self.host
    }

    /// Compiles a component, reusing machine code compiled earlier in this
    /// process for the same bytes.
    pub fn compile_cached(&self, wasm: &[u8]) -> anyhow::Result<Component> {
        precompile_cached(&self.engine, wasm, "p3")
    }

    /// Runs the component's async `run` with `args` (`args[0]` is the
    /// program name) to completion on the current tokio runtime.
    pub async fn run(
        &self,
        component: &Component,
        args: &[impl AsRef<str>],
        io: GuestIo,
    ) -> Outcome {
        let started = Instant::now();
        let limits = &self.host.config.limits;
        let (wasi, pipes) = wasi_ctx(args, io);
        let state = State {
            wasi,
            table: ResourceTable::new(),
            tether: TetherCtx::new(self.host.clone()),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.max_memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            resumed: Instant::now(),
            epoch_yield: false,
        };
        let mut store = Store::new(&self.engine, state);
        store.set_max_component_handles(limits.component_handles());
        let span = store.data().tether.span();
        let running = self.host.metrics.guest_running();
        store.limiter(|s| &mut s.limits);
        store.call_hook(|mut ctx, hook| {
            let data = ctx.data_mut();
            if matches!(hook, CallHook::ReturningFromHost | CallHook::CallingWasm) {
                if data.epoch_yield {
                    data.epoch_yield = false;
                } else {
                    data.resumed = Instant::now();
                }
            }
            Ok(())
        });
        let max_run = limits.max_run_without_yield;
        store.epoch_deadline_callback(move |mut ctx| {
            let data = ctx.data_mut();
            if data.resumed.elapsed() > max_run {
                return Err(Runaway(max_run).into());
            }
            data.epoch_yield = true;
            Ok(crate::runner::yield_to_runtime())
        });
        store.set_epoch_deadline(1);
        let guest = async {
            let command = super::Command::instantiate_async(&mut store, component, &self.linker)
                .await
                .map_err(|e| RunError::Instantiate(format!("{e:#}")))?;
            let ran = store
                .run_concurrent(async move |store| command.call_run(store).await)
                .await;
            match ran {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(()))) => Err(RunError::Exit(1)),
                Ok(Err(e)) | Err(e) => Err(classify_trap(e, limits.max_memory_bytes)),
            }
        };
        let result = tokio::select! {
            result = tracing::Instrument::instrument(guest, span.clone()) => result,
            stopped = shutdown_deadline(&self.host) => Err(stopped),
        };
        end_run(&self.host, &mut store.data_mut().tether, &result, span).await;
        drop(store);
        drop(running);
        outcome(result, pipes, started)
    }
}
