//! `tether jmux [--deny RULE]... [--ca-file PEM]... <PIPE> [<LISTENER>...]
//! [--allow-all | --allow RULE...]`: the JMUX proxy guest with the host
//! policy its `jmux-proxy` arguments need.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use tether_host::ErrorCode;
use tether_host::bindings::describe;
use tether_host::policy::Rule;
use tether_host::runner::{EngineKind, GuestIo, Runner};
use tether_host::tokio::net::TcpListener;
use tether_host::{Config, Limits, TlsOptions};

#[derive(Args)]
#[command(after_help = tether_jmux::proxy::cli::USAGE)]
pub struct JmuxArgs {
    /// Never dial HOST:PORT (repeatable), whatever the arguments allow.
    #[arg(long = "deny", value_name = "RULE")]
    pub deny: Vec<Rule>,
    /// Add the certificates in this PEM file to the trusted roots (wss://).
    #[arg(long = "ca-file", value_name = "PEM")]
    pub ca_file: Vec<PathBuf>,
    #[command(flatten)]
    pub shutdown: crate::ShutdownArgs,
    /// Serve Prometheus metrics at http://ADDR/metrics (ip:port). jmux has
    /// no --listen rules: naming the address allows it, as it does for the
    /// jmux listeners; the guest may not bind it.
    #[command(flatten)]
    pub metrics: crate::MetricsArgs,
    /// Accepted connections the host holds at once over the pipe and every
    /// listener, whatever their source; past it new ones are closed at
    /// once (default: three quarters of the file descriptor limit, at most
    /// 65536; 1 to 16777216).
    #[arg(long = "max-connections", value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 24))]
    pub max_connections: Option<usize>,
    /// The jmux-proxy arguments: <PIPE> [<LISTENER>...] [--allow-all |
    /// --allow RULE...]. The host may dial the pipe's address, bind the
    /// pipe's and listeners' addresses, and dial the targets that
    /// --allow-all / --allow admit; nothing else. --deny and --ca-file may
    /// also stand among them, and so may --shutdown-timeout-ms.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

/// Moves the host's own options (`--deny`, `--ca-file`,
/// `--shutdown-timeout-ms`, `--metrics`, `--max-connections`) out of the
/// jmux-proxy arguments, wherever they stand: the guest's command line has
/// no options of those names, so `tether jmux -- PIPE --deny RULE` means
/// the same as `tether jmux --deny RULE -- PIPE`.
///
/// Errors: an option without its value, a `--deny` rule that does not
/// parse, or a `--max-connections` outside 1 to 16777216.
fn take_host_options(args: &mut JmuxArgs) -> anyhow::Result<()> {
    let mut rest = Vec::with_capacity(args.args.len());
    let mut it = std::mem::take(&mut args.args).into_iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        if ![
            "--deny",
            "--ca-file",
            "--shutdown-timeout-ms",
            "--metrics",
            "--max-connections",
        ]
        .contains(&name.as_str())
        {
            rest.push(arg);
            continue;
        }
        let Some(value) = inline.or_else(|| it.next()) else {
            bail!("{name} needs a value");
        };
        if name == "--deny" {
            args.deny.push(
                value
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--deny {value}: {e}"))?,
            );
        } else if name == "--ca-file" {
            args.ca_file.push(PathBuf::from(value));
        } else if name == "--metrics" {
            args.metrics.metrics = Some(value);
        } else if name == "--max-connections" {
            args.max_connections = Some(
                value
                    .parse()
                    .ok()
                    .filter(|n| (1..=1 << 24).contains(n))
                    .ok_or_else(|| {
                        anyhow::anyhow!("--max-connections {value}: expected 1 to 16777216")
                    })?,
            );
        } else {
            args.shutdown.shutdown_timeout_ms = value
                .parse()
                .map_err(|e| anyhow::anyhow!("--shutdown-timeout-ms {value}: {e}"))?;
        }
    }
    args.args = rest;
    Ok(())
}

pub async fn jmux(mut args: JmuxArgs) -> anyhow::Result<ExitCode> {
    let parsed = take_host_options(&mut args).and_then(|()| {
        tether_jmux::proxy::cli::parse_args(&args.args).map_err(|e| anyhow::anyhow!("{e}"))
    });
    let parsed = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            // A usage error: exit 2, as clap does for the host's own options.
            errln!("tether jmux: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut config = Config {
        policy: tether_bench::tunnel::policy_for(&parsed, args.deny)?,
        tls: TlsOptions {
            system_roots: true,
            extra_ca_files: args.ca_file,
        },
        limits: Limits {
            shutdown_timeout: args.shutdown.timeout(),
            // The guest bounds its listeners' clients per source itself,
            // with the protocols' own refusals (SOCKS5 reply 1, HTTP 502):
            // the host's bound sits above its channels and handshakes per
            // source (and the WebSocket pipe), and counts loopback when the
            // guest does.
            max_connections_per_source: Limits::default().max_connections_per_source.max(
                parsed.channels_per_source.max as usize + parsed.handshakes.max_per_source + 16,
            ),
            count_loopback_connections: parsed.channels_per_source.loopback_too,
            max_connections: args
                .max_connections
                .unwrap_or(Limits::default().max_connections),
            ..Limits::default()
        },
    };
    args.metrics.apply(&mut config.limits);
    let runner = Runner::new(config, EngineKind::Cranelift)?;
    let component = runner.compile(tether_guest_artifacts::JMUX)?;
    let _metrics = match &args.metrics.metrics {
        Some(addr) => Some(
            crate::run::serve_metrics(runner.host(), bind_metrics(addr).await)
                .map_err(|e| anyhow::anyhow!("--metrics {addr}: {}", describe(&e)))?,
        ),
        None => None,
    };
    let mut guest_args = vec!["jmux".to_string()];
    guest_args.extend(args.args);
    crate::run::run_until_signal(
        runner.host(),
        runner.run(&component, &guest_args, GuestIo::Inherit),
    )
    .await
}

/// Binds the `--metrics` address of `tether jmux` (allowed by being named;
/// the guest's policy does not get it).
///
/// Errors: not `ip:port`, or the bind failed.
async fn bind_metrics(addr: &str) -> Result<TcpListener, ErrorCode> {
    let addr: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| ErrorCode::InvalidUrl(format!("`{addr}` is not an ip:port bind address")))?;
    TcpListener::bind(addr)
        .await
        .map_err(|e| ErrorCode::Other(format!("bind {addr}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jmux_args(args: &[&str]) -> JmuxArgs {
        JmuxArgs {
            deny: Vec::new(),
            ca_file: Vec::new(),
            shutdown: crate::ShutdownArgs {
                shutdown_timeout_ms: 5000,
            },
            metrics: crate::MetricsArgs::default(),
            max_connections: None,
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn host_options_may_follow_the_pipe() {
        let mut args = jmux_args(&[
            "ws-listen://127.0.0.1:0",
            "--deny",
            "10.0.0.0/8:*",
            "--allow-all",
            "--ca-file=ca.pem",
            "--deny=*.internal:22",
            "--metrics",
            "127.0.0.1:0",
        ]);
        take_host_options(&mut args).unwrap();
        assert_eq!(args.args, ["ws-listen://127.0.0.1:0", "--allow-all"]);
        assert_eq!(args.metrics.metrics.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(args.deny.len(), 2);
        assert_eq!(args.ca_file, [PathBuf::from("ca.pem")]);
    }

    #[test]
    fn a_host_option_without_its_value_is_an_error() {
        let mut args = jmux_args(&["ws://x/", "--deny"]);
        let e = take_host_options(&mut args).unwrap_err();
        assert!(e.to_string().contains("--deny needs a value"), "{e}");
        let mut args = jmux_args(&["ws://x/", "--deny", "not a rule"]);
        assert!(take_host_options(&mut args).is_err());
    }
}
