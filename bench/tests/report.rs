//! The benchmark report renders from fixed JSON: the page and every SVG are
//! well-formed XML and carry the series and figures they should.

use std::path::{Path, PathBuf};

use tether_bench::report;

fn fixture_copy(name: &str, files: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report");
    let dir = std::env::temp_dir().join(format!("tether-report-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in files {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    dir
}

/// Every `<text>` of an SVG, trimmed.
fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect()
}

/// The file names of the rendered plots, in page order.
fn plot_names(rendered: &report::Rendered) -> Vec<String> {
    rendered
        .plots
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Asserts that `dir/file` has a `<text>` for each of `series`.
fn assert_series(dir: &Path, file: &str, series: &[&str]) {
    let texts = svg_texts(&dir.join(file));
    for s in series {
        assert!(
            texts.iter().any(|t| t == s),
            "{file}: no series `{s}` among {texts:?}"
        );
    }
}

#[test]
fn the_report_renders_every_bench_with_its_series() {
    let dir = fixture_copy("all", &["echo.json", "quic.json", "jmux.json", "meta.json"]);
    let rendered = report::render(&dir).unwrap();

    let names = plot_names(&rendered);
    assert_eq!(
        names,
        [
            "echo-rtt.svg",
            "echo-throughput.svg",
            "quic-rtt.svg",
            "quic-throughput.svg",
            "jmux-rtt.svg",
            "jmux-throughput.svg"
        ]
    );
    let expect = |file: &str, series: &[&str]| assert_series(&dir, file, series);
    expect("echo-rtt.svg", &["guest", "native"]);
    expect("echo-throughput.svg", &["guest", "native"]);
    expect(
        "quic-rtt.svg",
        &[
            "native -> native",
            "guest -> native",
            "native -> guest",
            "guest -> guest",
        ],
    );
    expect(
        "jmux-rtt.svg",
        &[
            "Tether tunnel",
            "Tether, 2 processes",
            "jetsocat tunnel",
            "two native relays",
            "direct",
        ],
    );
    expect(
        "jmux-throughput.svg",
        &[
            "Tether",
            "procs",
            "jetsocat",
            "direct",
            // The upload size comes from the JSON (1 MiB in quick runs).
            "HTTP/2 upload 1 MiB (ms)",
        ],
    );

    // The bar labels carry the figures of the JSON.
    let echo: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("echo.json")).unwrap()).unwrap();
    let msgs = echo["msgs_per_s"].as_f64().unwrap();
    let texts = svg_texts(&dir.join("echo-throughput.svg"));
    assert!(
        texts.contains(&format!("{:.0}k", msgs / 1000.0)),
        "no bar labelled with msgs_per_s {msgs} in {texts:?}"
    );

    // The page is well-formed, shows every plot, the machine, the commit
    // and the commands.
    let page = std::fs::read_to_string(&rendered.page).unwrap();
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&page, options)
        .expect("report.html is well-formed XHTML");
    let images: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("img"))
        .filter_map(|n| n.attribute("src"))
        .collect();
    assert_eq!(images, names);
    let meta: report::Meta =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    for needle in [&meta.commit, &meta.machine, &meta.date]
        .into_iter()
        .chain(&meta.commands)
    {
        assert!(!needle.is_empty());
        assert!(page.contains(needle.as_str()), "page lacks `{needle}`");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_benches_are_left_out_and_none_is_an_error() {
    let dir = fixture_copy("echo-only", &["echo.json"]);
    let rendered = report::render(&dir).unwrap();
    assert_eq!(rendered.plots.len(), 2);
    let page = std::fs::read_to_string(&rendered.page).unwrap();
    assert!(page.contains("id=\"echo\""));
    assert!(!page.contains("id=\"jmux\""));

    std::fs::remove_file(dir.join("echo.json")).unwrap();
    let e = report::render(&dir).unwrap_err();
    assert!(e.to_string().contains("no bench results"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The scale benches (fixtures from full runs on a quiet machine): the
/// load CDFs against one open, the JMUX load's old loop beside them, and
/// the isolation ratios per misbehaviour.
#[test]
fn the_report_draws_the_scale_benches() {
    let dir = fixture_copy("scale", &["load.json", "load-jmux.json", "isolation.json"]);
    let rendered = report::render(&dir).unwrap();
    let names = plot_names(&rendered);
    assert_eq!(
        names,
        ["load-rtt.svg", "load-jmux-rtt.svg", "isolation.svg"]
    );
    let has = |file: &str, series: &[&str]| assert_series(&dir, file, series);
    has(
        "load-rtt.svg",
        &[
            "all connections open",
            "one connection open",
            "old loop, all open",
        ],
    );
    has(
        "load-jmux-rtt.svg",
        &[
            "all channels open",
            "one channel open",
            "old loop, all open",
        ],
    );
    has(
        "isolation.svg",
        &["trap", "spin", "native-spin", "memory", "flood"],
    );
    let page = std::fs::read_to_string(&rendered.page).unwrap();
    for needle in [
        "id=\"load\"",
        "id=\"load-jmux\"",
        "id=\"isolation\"",
        "with 10k connections open vs one",
        "the old poll-all loop with 2000 open",
        "with 1000 channels open vs one",
    ] {
        assert!(page.contains(needle), "page lacks `{needle}`");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
