//! `tether-conformance`: runs the conformance suite on every target plus
//! the Autobahn|Testsuite, renders `conformance/matrix.md`, checks it
//! against the committed copy and prints `T targets, R results, F failing`.
//!
//! ```text
//! tether-conformance [all] [--json] [--bless] [--skip-autobahn]
//! tether-conformance run --target NAME [--case NAME]...
//! tether-conformance autobahn [--full]
//! tether-conformance aggregate [--json] [--bless]
//! tether-conformance peer
//! ```

mod autobahn;
mod cases;
mod driver;
mod matrix;
mod peer;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use tether_bench::progress::Progress;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::autobahn::AutobahnSummary;
use crate::driver::{TARGETS, Target};
use crate::matrix::{results_dir, results_file};

#[derive(Parser)]
#[command(
    name = "tether-conformance",
    about = "Tether conformance suite: every case on every target, the matrix, and Autobahn|Testsuite"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    all: AllArgs,
}

#[derive(Args, Clone, Default)]
struct AllArgs {
    /// Print {"targets", "cases", "results", "failing"} as JSON at the end.
    #[arg(long)]
    json: bool,
    /// Accept the current case list into cases.lock and write matrix.md
    /// instead of comparing against it.
    #[arg(long)]
    bless: bool,
    /// Do not run Autobahn|Testsuite (use the last results).
    #[arg(long)]
    skip_autobahn: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Every target, Autobahn, aggregate (the default).
    All(AllArgs),
    /// One target (all cases, or the named ones); writes its JSON Lines
    /// unless cases are named.
    Run(RunArgs),
    /// Autobahn|Testsuite only.
    Autobahn {
        /// Include the 9.x performance cases (slow; outside CI).
        #[arg(long)]
        full: bool,
    },
    /// Aggregate the last results into the matrix.
    Aggregate(AllArgs),
    /// Start the peer server and print the suite guest's --peer argument.
    Peer,
}

#[derive(Args)]
struct RunArgs {
    /// wasmtime, wasmtime-winch, wasmtime-pooling or wasmtime-p3.
    #[arg(long)]
    target: String,
    /// Only these cases (repeatable); results go to stdout only.
    #[arg(long = "case")]
    cases: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // One thread for guests and their sockets, as the `tether` CLI runs
    // them; the peer has a runtime of its own.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(async {
        match cli.command {
            None => all(cli.all).await,
            Some(Command::All(a)) => all(a).await,
            Some(Command::Run(r)) => run(r).await,
            Some(Command::Autobahn { full }) => {
                let summary = autobahn::run(full).await;
                print!("{}", summary.render());
                let problems = summary.problems();
                for p in &problems {
                    eprintln!("{p}");
                }
                Ok(problems.is_empty())
            }
            Some(Command::Aggregate(a)) => aggregate(&a),
            Some(Command::Peer) => {
                let peer = peer::Peer::start(&results_dir().join("peer"))?;
                println!("--peer {}", peer.guest_arg());
                println!("CA: {}", peer.ca_file.display());
                tokio::signal::ctrl_c().await.ok();
                Ok(true)
            }
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("tether-conformance: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn selected(names: &[String]) -> anyhow::Result<Vec<&'static cases::Case>> {
    if names.is_empty() {
        return Ok(cases::CASES.iter().collect());
    }
    names
        .iter()
        .map(|n| cases::find(n).with_context(|| format!("unknown case `{n}`")))
        .collect()
}

async fn run_one_target(
    target: Target,
    cases: &[&'static cases::Case],
    peer: &peer::Peer,
    write: bool,
    progress: &Progress,
) -> anyhow::Result<bool> {
    let t0 = Instant::now();
    let records = driver::run_target(target, cases, peer, progress).await;
    let failed: Vec<&str> = records
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.name.as_str())
        .collect();
    progress.println(&format!(
        "{}: {} cases, {} pass, {} fail ({:.1} s){}",
        target.name(),
        records.len(),
        records.len() - failed.len(),
        failed.len(),
        t0.elapsed().as_secs_f64(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(": {}", failed.join(", "))
        }
    ));
    if write {
        std::fs::create_dir_all(results_dir())?;
        let mut out = std::fs::File::create(results_file(target.name()))?;
        for r in &records {
            writeln!(out, "{}", serde_json::to_string(r)?)?;
        }
    } else {
        for r in &records {
            println!("{}", serde_json::to_string(r)?);
        }
    }
    Ok(failed.is_empty())
}

async fn run(args: RunArgs) -> anyhow::Result<bool> {
    let target = Target::parse(&args.target).with_context(|| {
        let names: Vec<&str> = TARGETS.iter().map(|t| t.name()).collect();
        format!("unknown target `{}` (one of {names:?})", args.target)
    })?;
    matrix::check_lock(false)?;
    let cases = selected(&args.cases)?;
    let peer = peer::Peer::start(&results_dir().join("peer"))?;
    let progress = Progress::new("conformance", cases.len() as u64);
    let ok = run_one_target(target, &cases, &peer, args.cases.is_empty(), &progress).await;
    progress.finish();
    ok
}

async fn all(args: AllArgs) -> anyhow::Result<bool> {
    matrix::check_lock(args.bless)?;
    let t0 = Instant::now();
    let cases = selected(&[])?;
    let progress = Progress::new("conformance", (TARGETS.len() * cases.len()) as u64);
    {
        let peer = peer::Peer::start(&results_dir().join("peer"))?;
        for target in TARGETS {
            run_one_target(*target, &cases, &peer, true, &progress).await?;
        }
    }
    if !args.skip_autobahn {
        progress.phase("Autobahn|Testsuite, both ways");
        autobahn::run(false).await;
    }
    progress.finish();
    let ok = aggregate(&args)?;
    eprintln!("conformance run took {:.1} s", t0.elapsed().as_secs_f64());
    Ok(ok)
}

fn aggregate(args: &AllArgs) -> anyhow::Result<bool> {
    let autobahn = AutobahnSummary::load();
    let agg = matrix::aggregate(autobahn.as_ref())?;
    let path = matrix::conformance_dir().join("matrix.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let mut problems = agg.problems.clone();
    if args.bless {
        std::fs::write(&path, &agg.matrix)?;
        eprintln!("wrote {}", path.display());
    } else if committed != agg.matrix {
        let fresh = results_dir().join("matrix.md");
        std::fs::create_dir_all(results_dir())?;
        std::fs::write(&fresh, &agg.matrix)?;
        problems.push(format!(
            "{} differs from this run's matrix ({}): `diff {} {}`; commit the new one if the change is intended (--bless)",
            path.display(),
            fresh.display(),
            path.display(),
            fresh.display()
        ));
    }
    if let Some(a) = &autobahn {
        for (name, run) in [("client", &a.client), ("server", &a.server)] {
            if let Some(r) = run {
                let c = |k: &str| r.counts.get(k).copied().unwrap_or(0);
                eprintln!(
                    "autobahn {name}: {} cases, {} OK, {} NON-STRICT, {} INFORMATIONAL, {} FAILED ({:.0} s)",
                    r.cases,
                    c("OK"),
                    c("NON-STRICT"),
                    c("INFORMATIONAL"),
                    c("FAILED"),
                    r.seconds
                );
            }
        }
    }
    for p in &problems {
        eprintln!("problem: {p}");
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "targets": agg.targets,
                "cases": agg.cases,
                "results": agg.results,
                "failing": agg.failing,
            })
        );
    } else {
        println!(
            "{} targets, {} results, {} failing",
            agg.targets, agg.results, agg.failing
        );
    }
    Ok(problems.is_empty())
}
