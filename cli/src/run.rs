//! `tether run GUEST.wasm [HOST OPTIONS] [-- GUEST ARGS]`: one guest
//! component under the host's policy and limits.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use tether_host::runner::{GuestIo, RunError, Runner};

use crate::HostArgs;

#[derive(Args)]
pub struct RunArgs {
    /// The guest component (.wasm).
    pub guest: PathBuf,
    #[command(flatten)]
    pub host: HostArgs,
    /// Arguments for the guest.
    #[arg(last = true)]
    pub args: Vec<String>,
}

/// Runs the guest; its exit status becomes the process's.
///
/// Errors: the file cannot be read or compiled, or the guest failed
/// (trap, memory limit, runaway: the error names it).
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let wasm =
        std::fs::read(&args.guest).with_context(|| format!("reading {}", args.guest.display()))?;
    let runner = Runner::new(args.host.config(), args.host.engine())?;
    let component = runner
        .compile(&wasm)
        .with_context(|| format!("compiling {}", args.guest.display()))?;
    let name = args
        .guest
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut guest_args = vec![name];
    guest_args.extend(args.args);
    let outcome = runner.run(&component, &guest_args, GuestIo::Inherit).await;
    exit_code(outcome.result)
}

/// A guest's result as the process's exit status: its own exit code
/// (clamped to 0-255), or an error naming the failure.
pub fn exit_code(result: Result<(), RunError>) -> anyhow::Result<ExitCode> {
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(RunError::Exit(code)) => Ok(ExitCode::from(code.clamp(0, 255) as u8)),
        Err(e) => bail!("{e}"),
    }
}
