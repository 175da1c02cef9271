//! The destination policy decides on the address a socket really reaches:
//! every spelling of the loopback host in `tether_policy::spellings`
//! (0.0.0.0, 0x7f.1, [::ffff:7f00:1], localhost., ...) against listeners on
//! 127.0.0.1:T and [::1]:T, through the probe guest's TCP connect, `ws://`
//! and `wss://` connect, under `--allow '*:*' --deny 127.0.0.0/8:* --deny
//! [::1]/128:*` (each one denied, naming a loopback rule), under the same
//! rules written in other forms and as `internal`, under a bare wildcard
//! (denied: internal), and under `--allow 127.0.0.1:* --allow [::1]:*`
//! (each one admitted). The JMUX paths are in `jmux.rs`.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use tether_host::Config;
use tether_host::policy::spellings::{LOOPBACK, Spelling};
use tether_host::runner::Runner;

use crate::common::{
    TestCa, echo_ws, local_config, peer_runtime, probe, runner, scratch_dir, show,
};

/// Binds 127.0.0.1:T and [::1]:T on one port T.
fn dual_listeners() -> (std::net::TcpListener, std::net::TcpListener) {
    for _ in 0..50 {
        let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        if let Ok(v6) = TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))) {
            return (v4, v6);
        }
    }
    panic!("no port free on both 127.0.0.1 and [::1]");
}

/// Serves 127.0.0.1:T and [::1]:T with `handler` on the peer runtime;
/// returns T.
pub fn loopback_server<F, Fut>(handler: F) -> u16
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (v4, v6) = dual_listeners();
    let port = v4.local_addr().unwrap().port();
    let handler = Arc::new(handler);
    for std in [v4, v6] {
        std.set_nonblocking(true).unwrap();
        let handler = handler.clone();
        peer_runtime().spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(handler(tcp));
            }
        });
    }
    port
}

fn config_with(allow: &[&str], deny: &[&str], ca: Option<&TestCa>) -> Config {
    let rules = |list: &[&str]| list.iter().map(|r| r.parse().unwrap()).collect::<Vec<_>>();
    let mut c = local_config();
    c.policy.allow = rules(allow);
    c.policy.deny = rules(deny);
    // IPv4-compatible and NAT64 spellings are admitted but not routed:
    // fail them fast, but not before getaddrinfo answers for
    // `localhost` on a loaded machine (700 ms timed the three localhost
    // spellings out in a CI run with benches beside it).
    c.limits.connect_timeout = Duration::from_millis(2000);
    if let Some(ca) = ca {
        c.tls.extra_ca_files = vec![ca.ca_file.clone()];
    }
    c
}

/// The policies of the table and what each does to a loopback spelling.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Want {
    /// `denied`, naming this text (a rule, or "internal").
    Denied(&'static str),
    /// Admitted: connected (when the spelling connects on Linux), or a
    /// failure other than `denied` and `invalid-url`.
    Admitted,
}

/// One column of the table: a policy and what it does to a spelling.
struct Column {
    name: &'static str,
    allow: &'static [&'static str],
    deny: &'static [&'static str],
    want: fn(&Spelling) -> Want,
}

const COLUMNS: &[Column] = &[
    Column {
        name: "deny loopback",
        allow: &["*:*"],
        deny: &["127.0.0.0/8:*", "[::1]/128:*"],
        want: |s| {
            Want::Denied(if s.reaches == "::1" {
                "`[::1]/128:*`"
            } else {
                "`127.0.0.0/8:*`"
            })
        },
    },
    Column {
        name: "deny loopback, other spellings",
        allow: &["*:*"],
        deny: &["[::ffff:127.0.0.0]/104:*", "0x7f.0.0.0/8:*", "[0::1]:*"],
        want: |_| Want::Denied("denied by rule"),
    },
    Column {
        name: "deny internal",
        allow: &["*:*"],
        deny: &["internal"],
        want: |_| Want::Denied("`internal`"),
    },
    Column {
        name: "bare wildcard",
        allow: &["*:*"],
        deny: &[],
        want: |_| Want::Denied("internal"),
    },
    Column {
        name: "allow loopback",
        allow: &["127.0.0.1:*", "[::1]:*"],
        deny: &[],
        want: |_| Want::Admitted,
    },
    Column {
        name: "allow internal",
        allow: &["*:*", "internal:*"],
        deny: &[],
        want: |_| Want::Admitted,
    },
];

/// Runs `args` (with `{host}` and `{port}` filled in) through the probe for
/// every spelling `rows` selects under every policy, and checks the table.
async fn run_table(
    path: &str,
    rows: impl Fn(&Spelling) -> bool,
    args: &[&str],
    port: u16,
    ca: Option<&TestCa>,
    connected: &str,
) {
    let mut failures = Vec::new();
    let mut runs = 0;
    for Column {
        name,
        allow,
        deny,
        want,
    } in COLUMNS
    {
        let runner: Runner = runner(config_with(allow, deny, ca));
        for s in LOOPBACK.iter().filter(|s| rows(s)) {
            let args: Vec<String> = args
                .iter()
                .map(|a| {
                    a.replace("{host}", s.text)
                        .replace("{port}", &port.to_string())
                })
                .collect();
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = tokio::time::timeout(Duration::from_secs(20), probe(&runner, &argv))
                .await
                .unwrap_or_else(|_| panic!("{path} {}: the probe did not finish in 20 s", s.text));
            runs += 1;
            let text = out.stdout_text();
            let ok = match want(s) {
                Want::Denied(what) => text.starts_with("error denied") && text.contains(what),
                Want::Admitted if s.connects => text.starts_with(connected),
                Want::Admitted => {
                    !text.starts_with("error denied") && !text.starts_with("error invalid-url")
                }
            };
            if !ok {
                failures.push(format!(
                    "{path} `{}` under {name}: want {:?}, got {}",
                    s.text,
                    want(s),
                    show(&out)
                ));
            }
        }
    }
    assert!(runs >= COLUMNS.len() * 30, "{path}: only {runs} runs");
    assert!(
        failures.is_empty(),
        "{} of {runs} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn every_loopback_spelling_over_tcp_connect() {
    // Accepts and closes.
    let port = loopback_server(|_tcp| async {});
    run_table(
        "tcp",
        |s| s.in_tcp,
        &["tcp-connect", "{host}:{port}"],
        port,
        None,
        "ok connected",
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn every_loopback_spelling_over_ws() {
    let port = loopback_server(|tcp| async move {
        if let Ok(ws) = tokio_tungstenite::accept_async(tcp).await {
            echo_ws(ws).await;
        }
    });
    run_table(
        "ws",
        |s| s.in_url,
        &["connect", "ws://{host}:{port}/"],
        port,
        None,
        "ok connected",
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn every_loopback_spelling_over_wss() {
    // The certificate names every address and name a spelling turns into
    // after the URL parser (the TLS server name).
    let ca = TestCa::new(
        &scratch_dir("policy-wss"),
        &[
            "localhost",
            "localhost.",
            "127.0.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:0.0.0.0",
        ],
    );
    let config = ca.server_config.clone();
    let port = loopback_server(move |tcp| {
        let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
        async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            if let Ok(ws) = tokio_tungstenite::accept_async(tls).await {
                echo_ws(ws).await;
            }
        }
    });
    run_table(
        "wss",
        |s| s.in_url,
        &["connect", "wss://{host}:{port}/"],
        port,
        Some(&ca),
        "ok connected",
    )
    .await;
}
