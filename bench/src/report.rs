//! `target/bench/report.html`: the benchmark figures as a page with plots.
//!
//! Every bench writes its JSON (`echo.json`, `quic.json`, `jmux.json`,
//! `load.json`) into one folder, next to `meta.json` (machine, date, git
//! commit, the exact commands); [`render`] reads whatever of them is there
//! and writes one SVG per plot and `report.html` beside them. The renderer
//! works from the JSON alone (fields it does not find are left out of the
//! plots), so a report can be drawn again from files kept elsewhere.
//!
//! Plots are drawn with `plotters` to SVG: latency distributions as CDFs
//! (x: microseconds, log scale; y: percentile), throughput as grouped bars,
//! one panel per unit.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The benches a report can hold, in page order: (file stem, title).
pub const BENCHES: &[(&str, &str)] = &[
    ("echo", "Echo: guest vs native client"),
    ("quic", "QUIC over message streams"),
    ("jmux", "JMUX tunnel"),
    ("load", "Load: many open streams"),
    (
        "load-jmux",
        "JMUX at 1,000 channels: readiness set vs old loop",
    ),
    ("isolation", "Isolation: one misbehaving guest among many"),
];

/// Where and how a set of bench results was measured (`meta.json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Meta {
    /// When the run started, RFC 3339, UTC.
    pub date: String,
    /// `git rev-parse HEAD`, with `+dirty` when the tree had changes.
    pub commit: String,
    /// CPU model, CPU count, memory, kernel.
    pub machine: String,
    /// The exact command lines, one per bench, in the order they ran.
    pub commands: Vec<String>,
}

impl Meta {
    /// Reads the date, the git commit (of the current directory's checkout)
    /// and the machine now; `commands` starts empty.
    pub fn now() -> Meta {
        Meta {
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            commit: git_commit(),
            machine: machine(),
            commands: Vec::new(),
        }
    }
}

fn git_commit() -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match run(&["rev-parse", "HEAD"]) {
        Some(head) => match run(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if !changes.is_empty() => format!("{head}+dirty"),
            _ => head,
        },
        None => "unknown (not a git checkout)".into(),
    }
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / (1024.0 * 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{model}, {cpus} CPUs, {mem_gib:.0} GiB, Linux {}",
        kernel.trim()
    )
}

/// Writes `value` as `DIR/NAME.json` (pretty-printed). Errors: I/O.
pub fn write_json(dir: &Path, name: &str, value: &impl Serialize) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(value)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// One line of a plot: its label and its `[x, y]` points.
struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// Colours by role, the same on every plot.
fn color_of(label: &str) -> RGBColor {
    let l = label.to_ascii_lowercase();
    if l.contains("jetsocat") {
        RGBColor(214, 39, 40)
    } else if l.contains("relay") {
        RGBColor(148, 103, 189)
    } else if l.contains("direct") {
        RGBColor(127, 127, 127)
    } else if l.contains("p3") {
        RGBColor(44, 160, 44)
    } else if l.starts_with("native") {
        RGBColor(255, 127, 14)
    } else if l.contains("processes") || l == "procs" {
        RGBColor(23, 190, 207)
    } else {
        RGBColor(31, 119, 180)
    }
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64().filter(|x| x.is_finite())
}

/// `[[percentile, us], ...]` under `key` as (us, percentile) points.
fn cdf(v: &Value, key: &str) -> Option<Vec<(f64, f64)>> {
    let points: Vec<(f64, f64)> = v
        .get(key)?
        .as_array()?
        .iter()
        .filter_map(|p| Some((p.get(1)?.as_f64()?, p.get(0)?.as_f64()?)))
        .filter(|(us, q)| us.is_finite() && *us > 0.0 && q.is_finite())
        .collect();
    (!points.is_empty()).then_some(points)
}

fn series(label: &str, points: Option<Vec<(f64, f64)>>) -> Option<Series> {
    Some(Series {
        label: label.to_string(),
        color: color_of(label),
        points: points?,
    })
}

type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A CDF plot of round trips: x in us (log scale), y percentile.
fn cdf_svg(title: &str, lines: &[Series]) -> anyhow::Result<String> {
    let mut svg = String::new();
    draw_cdf(&mut svg, title, lines).map_err(|e| anyhow::anyhow!("plotting {title}: {e}"))?;
    Ok(svg)
}

fn draw_cdf(svg: &mut String, title: &str, lines: &[Series]) -> DrawResult<()> {
    let root = SVGBackend::with_string(svg, (720, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let xs = lines.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let lo = xs.clone().fold(f64::INFINITY, f64::min).max(0.1);
    let hi = xs.fold(0.0, f64::max).max(lo * 2.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(52)
        .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), 0f64..100f64)?;
    chart
        .configure_mesh()
        .y_max_light_lines(1)
        .x_desc("round trip (us, log scale)")
        .y_desc("percentile")
        .draw()?;
    for s in lines {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// One panel of a bar plot: a metric (with its unit) and a value per
/// series.
struct Panel {
    title: String,
    bars: Vec<(String, f64)>,
}

fn panel(title: &str, bars: Vec<(&str, Option<f64>)>) -> Option<Panel> {
    let bars: Vec<(String, f64)> = bars
        .into_iter()
        .filter_map(|(l, v)| Some((l.to_string(), v?)))
        .collect();
    (!bars.is_empty()).then(|| Panel {
        title: title.to_string(),
        bars,
    })
}

/// Bars side by side, one panel per metric (each with its own axis).
fn bars_svg(title: &str, panels: &[Panel]) -> anyhow::Result<String> {
    let mut svg = String::new();
    draw_bars(&mut svg, title, panels).map_err(|e| anyhow::anyhow!("plotting {title}: {e}"))?;
    Ok(svg)
}

fn draw_bars(svg: &mut String, title: &str, panels: &[Panel]) -> DrawResult<()> {
    let width = 260 * panels.len().max(1) as u32 + 40;
    let root = SVGBackend::with_string(svg, (width, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 18))?;
    let areas: Vec<DrawingArea<_, Shift>> = root.split_evenly((1, panels.len().max(1)));
    for (area, p) in areas.iter().zip(panels) {
        let top = p.bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9) * 1.2;
        let n = p.bars.len();
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, ("sans-serif", 14))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..n as f64, 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_max_light_lines(1)
            .x_labels(0)
            .x_label_formatter(&|_| String::new())
            .draw()?;
        for (i, (label, value)) in p.bars.iter().enumerate() {
            let x = i as f64;
            let color = color_of(label);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x + 0.15, 0.0), (x + 0.85, *value)],
                color.filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format_value(*value),
                (x + 0.5, *value + top * 0.02),
                ("sans-serif", 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Bottom)),
            )))?;
            // Backend pixels, made relative to this panel.
            let (px, py) = chart.backend_coord(&(x + 0.5, 0.0));
            let (bx, by) = area.get_base_pixel();
            area.draw(&Text::new(
                label.clone(),
                (px - bx, py - by + 8),
                ("sans-serif", 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Top)),
            ))?;
        }
    }
    root.present()?;
    Ok(())
}

fn format_value(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A plot of the page: file name, caption, SVG text.
struct Plot {
    file: String,
    caption: String,
    svg: String,
}

fn echo_plots(v: &Value) -> anyhow::Result<Vec<Plot>> {
    let mut plots = Vec::new();
    let lines: Vec<Series> = [
        series("guest", cdf(v, "rtt_us_cdf")),
        series("guest p3", cdf(v, "p3_rtt_us_cdf")),
        series("native", cdf(v, "native_rtt_us_cdf")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !lines.is_empty() {
        plots.push(Plot {
            file: "echo-rtt.svg".into(),
            caption: "Echo round trip (32 B), guest vs native client".into(),
            svg: cdf_svg("echo round trip, 32 B", &lines)?,
        });
    }
    let panels: Vec<Panel> = [
        panel(
            "messages/s (64 B, 64 in flight)",
            vec![
                ("guest", num(v, "msgs_per_s")),
                ("guest p3", num(v, "p3_msgs_per_s")),
                ("native", num(v, "native_msgs_per_s")),
            ],
        ),
        panel(
            "MB/s (1 MiB messages)",
            vec![
                ("guest", num(v, "mb_per_s")),
                ("guest p3", num(v, "p3_mb_per_s")),
                ("native", num(v, "native_mb_per_s")),
            ],
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !panels.is_empty() {
        plots.push(Plot {
            file: "echo-throughput.svg".into(),
            caption: "Echo throughput, guest vs native client".into(),
            svg: bars_svg("echo throughput", &panels)?,
        });
    }
    Ok(plots)
}

fn quic_plots(v: &Value) -> anyhow::Result<Vec<Plot>> {
    let mut plots = Vec::new();
    let pairings = v
        .get("pairings")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let name = |p: &Value| {
        p.get("name")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .replace("->", " -> ")
    };
    let lines: Vec<Series> = pairings
        .iter()
        .filter_map(|p| series(&name(p), cdf(p, "rtt_us_cdf")))
        .collect();
    if !lines.is_empty() {
        plots.push(Plot {
            file: "quic-rtt.svg".into(),
            caption: "QUIC echo round trip per pairing (client -> server)".into(),
            svg: cdf_svg("QUIC round trip, client -> server", &lines)?,
        });
    }
    let names: Vec<String> = pairings.iter().map(name).collect();
    let bulk = panel(
        "bulk echo (MB/s)",
        pairings
            .iter()
            .zip(&names)
            .map(|(p, n)| (n.as_str(), num(p, "bulk_mb_per_s")))
            .collect(),
    );
    let handshake = panel(
        "handshake p50 (ms)",
        pairings
            .iter()
            .zip(&names)
            .map(|(p, n)| (n.as_str(), num(p, "handshake_ms_p50")))
            .collect(),
    );
    let panels: Vec<Panel> = [bulk, handshake].into_iter().flatten().collect();
    if !panels.is_empty() {
        plots.push(Plot {
            file: "quic-throughput.svg".into(),
            caption: "QUIC bulk echo and handshakes per pairing".into(),
            svg: bars_svg("QUIC per pairing", &panels)?,
        });
    }
    Ok(plots)
}

fn isolation_plots(v: &Value) -> anyhow::Result<Vec<Plot>> {
    let phases = v
        .get("phases")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let names: Vec<String> = phases
        .iter()
        .map(|p| {
            p.get("misbehaviour")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned()
        })
        .collect();
    let bars = |key: &str| -> Vec<(&str, Option<f64>)> {
        phases
            .iter()
            .zip(&names)
            .map(|(p, n)| (n.as_str(), num(p, key)))
            .collect()
    };
    let panels: Vec<Panel> = [
        panel("good guests' p99 / baseline p99", bars("p99_ratio")),
        panel("good guests' p99 (us)", bars("rtt_us_p99")),
        panel("baseline p99 (us)", bars("baseline_rtt_us_p99")),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut plots = Vec::new();
    if !panels.is_empty() {
        plots.push(Plot {
            file: "isolation.svg".into(),
            caption: "Round trips on the well-behaved guests while one guest misbehaves, against \
                      the baseline window just before (target: ratio at most 1.5)"
                .into(),
            svg: bars_svg("one misbehaving guest among many", &panels)?,
        });
    }
    Ok(plots)
}

fn jmux_plots(v: &Value) -> anyhow::Result<Vec<Plot>> {
    let mut plots = Vec::new();
    let lines: Vec<Series> = [
        series("Tether tunnel", cdf(v, "rtt_tunnel_us_cdf")),
        series("Tether, 2 processes", cdf(v, "tether_procs_rtt_us_cdf")),
        series("jetsocat tunnel", cdf(v, "jetsocat_rtt_us_cdf")),
        series("two native relays", cdf(v, "rtt_relay_us_cdf")),
        series("direct", cdf(v, "rtt_direct_us_cdf")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !lines.is_empty() {
        plots.push(Plot {
            file: "jmux-rtt.svg".into(),
            caption: "Round trip of 64 B through a JMUX tunnel, two native relays, and direct"
                .into(),
            svg: cdf_svg("JMUX round trip, 64 B", &lines)?,
        });
    }
    let ms = |key: &str| num(v, key).map(|s| s * 1000.0);
    let mib = num(v, "upload_bytes").map_or(8.0, |b| b / f64::from(1 << 20));
    let (h2_title, h1_title) = (
        format!("HTTP/2 upload {mib} MiB (ms)"),
        format!("HTTP/1.1 upload {mib} MiB (ms)"),
    );
    let panels: Vec<Panel> = [
        panel(
            "bulk (MB/s)",
            vec![
                ("Tether", num(v, "bulk_mb_per_s")),
                ("procs", num(v, "tether_procs_bulk_mb_per_s")),
                ("jetsocat", num(v, "jetsocat_bulk_mb_per_s")),
                ("direct", num(v, "bulk_direct_mb_per_s")),
            ],
        ),
        panel(
            &h2_title,
            vec![
                ("Tether", ms("h2_upload_s")),
                ("procs", ms("tether_procs_h2_upload_s")),
                ("jetsocat", ms("jetsocat_h2_upload_s")),
                ("direct", ms("h2_direct_s")),
            ],
        ),
        panel(
            &h1_title,
            vec![
                ("Tether", ms("h1_upload_s")),
                ("procs", ms("tether_procs_h1_upload_s")),
                ("jetsocat", ms("jetsocat_h1_upload_s")),
                ("direct", ms("h1_direct_s")),
            ],
        ),
        panel(
            "CPU per GB relayed (s)",
            vec![
                ("Tether", num(v, "cpu_s_per_gb")),
                ("procs", num(v, "tether_procs_cpu_s_per_gb")),
                ("jetsocat", num(v, "jetsocat_cpu_s_per_gb")),
            ],
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !panels.is_empty() {
        plots.push(Plot {
            file: "jmux-throughput.svg".into(),
            caption: "JMUX tunnel: Tether (guests in one process; procs: two tether jmux \
                      processes) vs jetsocat (two processes) vs direct"
                .into(),
            svg: bars_svg("JMUX tunnel", &panels)?,
        });
    }
    Ok(plots)
}

/// The round-trip CDFs of `tether bench load` (`name` "load", streams
/// called connections) or `tether bench load --jmux` ("load-jmux",
/// channels): all open against one open, and the old poll-all loop's
/// when the run measured it.
fn load_plots(v: &Value, name: &str, unit: &str) -> anyhow::Result<Vec<Plot>> {
    let mut plots = Vec::new();
    let old = v.get("poll_all").filter(|o| o.is_object());
    let p3 = v.get("p3").filter(|o| o.is_object());
    let lines: Vec<Series> = [
        series(&format!("all {unit}s open"), cdf(v, "rtt_us_cdf_loaded")),
        series(&format!("one {unit} open"), cdf(v, "rtt_us_cdf_single")),
        old.and_then(|o| series("old loop, all open", cdf(o, "rtt_us_cdf_loaded"))),
        p3.and_then(|o| series("p3 guest, all open", cdf(o, "rtt_us_cdf_loaded"))),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !lines.is_empty() {
        let count = |v: &Value| num(v, &format!("{unit}s")).map_or(String::new(), format_value);
        let mut caption = format!(
            "Echo round trip (32 B) with {} {unit}s open vs one",
            count(v)
        );
        if let Some(o) = old {
            let _ = write!(
                caption,
                ", and the old poll-all loop with {} open",
                count(o)
            );
        }
        if let Some(o) = p3 {
            let _ = write!(caption, ", and the p3 guest with {} open", count(o));
        }
        plots.push(Plot {
            file: format!("{name}-rtt.svg"),
            caption,
            svg: cdf_svg(&format!("round trip under load ({unit}s), 32 B"), &lines)?,
        });
    }
    Ok(plots)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The headline numbers of a bench JSON as table rows (every number at the
/// top level, in file order).
fn figures_table(v: &Value) -> String {
    let mut rows = String::new();
    if let Some(map) = v.as_object() {
        for (key, value) in map {
            if let Some(n) = value.as_f64() {
                let _ = writeln!(
                    rows,
                    "<tr><td>{}</td><td class=\"n\">{}</td></tr>",
                    escape(key),
                    format_value(n)
                );
            }
        }
    }
    format!("<table>\n<tr><th>field</th><th>value</th></tr>\n{rows}</table>\n")
}

/// What [`render`] wrote.
#[derive(Debug)]
pub struct Rendered {
    /// `DIR/report.html`.
    pub page: PathBuf,
    /// The SVG files, in page order.
    pub plots: Vec<PathBuf>,
}

/// Reads the bench JSON files and `meta.json` found in `dir` and writes one
/// SVG per plot and `report.html` there.
///
/// Errors: no bench JSON in `dir`, a file that is not JSON, a plot that
/// cannot be drawn, or I/O.
pub fn render(dir: &Path) -> anyhow::Result<Rendered> {
    let read = |name: &str| -> anyhow::Result<Option<Value>> {
        let path = dir.join(format!("{name}.json"));
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(
                serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    };
    let meta: Meta = match read("meta")? {
        Some(v) => serde_json::from_value(v).context("meta.json")?,
        None => Meta::default(),
    };
    let mut body = String::new();
    let mut files = Vec::new();
    let mut found = 0;
    for (name, title) in BENCHES {
        let Some(v) = read(name)? else { continue };
        found += 1;
        let plots = match *name {
            "echo" => echo_plots(&v)?,
            "quic" => quic_plots(&v)?,
            "jmux" => jmux_plots(&v)?,
            "isolation" => isolation_plots(&v)?,
            "load-jmux" => load_plots(&v, name, "channel")?,
            _ => load_plots(&v, name, "connection")?,
        };
        let _ = writeln!(body, "<section id=\"{name}\">\n<h2>{}</h2>", escape(title));
        for plot in plots {
            let path = dir.join(&plot.file);
            std::fs::write(&path, &plot.svg)
                .with_context(|| format!("writing {}", path.display()))?;
            let _ = writeln!(
                body,
                "<figure><img src=\"{}\" alt=\"{}\"/><figcaption>{}</figcaption></figure>",
                plot.file,
                escape(&plot.caption),
                escape(&plot.caption)
            );
            files.push(path);
        }
        let _ = writeln!(
            body,
            "<details><summary>every figure (<a href=\"{name}.json\">{name}.json</a>)</summary>\n{}</details>\n</section>",
            figures_table(&v)
        );
    }
    anyhow::ensure!(
        found > 0,
        "no bench results in {} (expected echo.json, quic.json, jmux.json, load.json, load-jmux.json or isolation.json)",
        dir.display()
    );
    let commands: String = meta
        .commands
        .iter()
        .map(|c| format!("<li><code>{}</code></li>\n", escape(c)))
        .collect();
    let page = format!(
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
         <title>Tether benchmarks</title>\n<style>\n\
         body {{ font-family: sans-serif; max-width: 1200px; margin: 2em auto; color: #222; }}\n\
         figure {{ display: inline-block; margin: 0.5em; }} img {{ max-width: 100%; border: 1px solid #ddd; }}\n\
         table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 2px 8px; }} td.n {{ text-align: right; }}\n\
         dt {{ font-weight: bold; }}\n</style>\n</head>\n<body>\n<h1>Tether benchmarks</h1>\n\
         <p>Every figure compares a guest with native code (or Tether with the reference) measured in the same run.</p>\n\
         <dl>\n<dt>date</dt><dd>{}</dd>\n<dt>commit</dt><dd><code>{}</code></dd>\n<dt>machine</dt><dd>{}</dd>\n\
         <dt>commands</dt><dd><ul>\n{commands}</ul></dd>\n</dl>\n{body}</body>\n</html>\n",
        escape(&meta.date),
        escape(&meta.commit),
        escape(&meta.machine),
    );
    let page_path = dir.join("report.html");
    std::fs::write(&page_path, page).with_context(|| format!("writing {}", page_path.display()))?;
    Ok(Rendered {
        page: page_path,
        plots: files,
    })
}
