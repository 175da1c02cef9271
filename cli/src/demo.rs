//! `tether demo [--url ws://...]`: echo round trips through the echo guest
//! next to a native client, on an embedded server, with the ratios.

use std::process::ExitCode;

use clap::Args;
use tether_bench::echo::Workload;
use tether_bench::progress::Progress;

use crate::bench::{compare, server_and_url};

#[derive(Args)]
pub struct DemoArgs {
    /// Use this echo server instead of the embedded one.
    #[arg(long)]
    pub url: Option<String>,
}

/// Runs the demo workload once and prints the table.
///
/// Errors: the echo server could not start, or a side failed.
pub async fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let (server, url) = server_and_url(args.url)?;
    outln!(
        "Tether demo: echo guest (WebAssembly, through the host; p2 and p3 builds) vs native tokio-tungstenite client"
    );
    outln!(
        "server: {url}{}",
        if server.is_some() {
            " (embedded tokio-tungstenite echo server)"
        } else {
            ""
        }
    );
    let progress = Progress::new("demo", tether_bench::echo::STEPS_PER_ROUND);
    let report = compare(&url, &Workload::demo(), 1, &progress).await;
    progress.finish();
    let report = report?;
    outln!("\n{}", report.table());
    outln!(
        "guest/native round-trip ratio p50: {:.2}x (target: at most 1.3x)",
        report.ratio_p50
    );
    drop(server);
    Ok(ExitCode::SUCCESS)
}
