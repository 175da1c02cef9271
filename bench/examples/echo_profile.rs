//! Profiling aid: one echo phase, guest p2 or native, against the embedded
//! echo server, repeated. `echo_profile guest|native PHASE ROUNDS`, PHASE as
//! the echo guest's (`pipeline:N:SIZE:WINDOW`). Prints one line per round.
use std::time::Instant;

use tether_bench::echo_server::EchoServer;
use tether_host::runner::{EngineKind, GuestIo, Runner};
use tether_host::{Config, policy::Policy};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (side, phase, rounds) = (&args[1], &args[2], args[3].parse::<usize>()?);
    let server = EchoServer::start()?;
    let url = server.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let config = Config {
            policy: Policy {
                allow: vec![format!("{}", server.addr()).parse()?],
                ..Policy::default()
            },
            ..Config::default()
        };
        let runner = Runner::new(config, EngineKind::Cranelift)?;
        let component = runner.compile(tether_guest_artifacts::ECHO)?;
        for _ in 0..rounds {
            let t0 = Instant::now();
            if side == "guest" {
                let args = vec!["echo".into(), "ping".into(), url.clone(), phase.clone()];
                let out = runner
                    .run(&component, &args, GuestIo::Capture(1 << 20))
                    .await;
                print!("{}", out.stdout_text());
                out.result.map_err(|e| anyhow::anyhow!("{e}"))?;
            } else {
                let p: Vec<usize> = phase
                    .split(':')
                    .skip(1)
                    .map(|x| x.parse().unwrap())
                    .collect();
                let w = tether_bench::echo::Workload {
                    warmup: 1,
                    rtt: (1, 32),
                    nagle: (1, 16),
                    pipeline: (p[0], p[1], p[2]),
                    bulk: (1, 64, 1),
                };
                let s = tether_bench::echo::native_ping(&url, &w).await?;
                println!(
                    "pipeline {} {} {}",
                    s.pipeline.0,
                    s.pipeline.1,
                    s.pipeline.2.as_nanos()
                );
            }
            eprintln!("round {:?}", t0.elapsed());
        }
        anyhow::Ok(())
    })
}
