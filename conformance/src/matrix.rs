//! The aggregator: reads every target's JSON Lines, applies the lock file
//! and the known-failure declarations, renders `conformance/matrix.md` and
//! compares it with the committed copy.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::autobahn::AutobahnSummary;
use crate::cases::{self, CASES, CATEGORIES};
use crate::driver::{Record, TARGETS};

/// The workspace's `conformance/` directory (committed files).
pub fn conformance_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where runs write their JSON Lines and Autobahn summaries.
pub fn results_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| conformance_dir().parent().unwrap().join("target"))
        .join("conformance")
}

/// The JSON Lines file of `target`.
pub fn results_file(target: &str) -> PathBuf {
    results_dir().join(format!("{target}.jsonl"))
}

/// Checks `conformance/cases.lock` against the case list. A locked case
/// that disappeared is an error; so is a new case, until `bless` adds it.
pub fn check_lock(bless: bool) -> anyhow::Result<()> {
    let path = conformance_dir().join("cases.lock");
    let current: BTreeSet<&str> = CASES.iter().map(|c| c.name).collect();
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let locked: BTreeSet<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let gone: Vec<&&str> = locked.difference(&current).collect();
    let new: Vec<&&str> = current.difference(&locked).collect();
    if !gone.is_empty() {
        anyhow::bail!(
            "cases in {} disappeared from the suite: {gone:?}. A case may not vanish; restore it (or, if the removal is deliberate, delete its line from the lock file in the same commit)",
            path.display()
        );
    }
    if !new.is_empty() {
        if !bless {
            anyhow::bail!(
                "new cases not in {}: {new:?}; run with --bless to add them",
                path.display()
            );
        }
        let mut out = String::from(
            "# Every conformance case name. A case listed here that disappears fails the run.\n",
        );
        for name in &current {
            out.push_str(name);
            out.push('\n');
        }
        std::fs::write(&path, out)?;
        eprintln!("added {} case(s) to {}", new.len(), path.display());
    }
    Ok(())
}

/// Known failures of `target`: case name -> reason, from
/// `conformance/known-failures/TARGET.txt` (`case: reason` lines).
pub fn known_failures(target: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let path = conformance_dir()
        .join("known-failures")
        .join(format!("{target}.txt"));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e).with_context(|| path.display().to_string()),
    };
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, reason) = line
            .split_once(':')
            .with_context(|| format!("{}: `{line}` is not `case: reason`", path.display()))?;
        let (name, reason) = (name.trim(), reason.trim());
        anyhow::ensure!(
            CASES.iter().any(|c| c.name == name),
            "{}: unknown case `{name}`",
            path.display()
        );
        anyhow::ensure!(
            !reason.is_empty(),
            "{}: `{name}` needs a reason",
            path.display()
        );
        out.insert(name.to_string(), reason.to_string());
    }
    Ok(out)
}

/// Reads a JSON Lines results file.
pub fn read_records(path: &Path) -> anyhow::Result<Vec<Record>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (run the target first: cargo run --release -p tether-conformance -- run --target ...)",
            path.display()
        )
    })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("{}: {l}", path.display())))
        .collect()
}

/// The aggregate: counts, problems, and the rendered matrix.
pub struct Aggregate {
    /// Targets with results.
    pub targets: usize,
    /// Cases in the suite.
    pub cases: usize,
    /// Results (target x case).
    pub results: usize,
    /// Failing results, declared or not.
    pub failing: usize,
    /// What makes the run fail: undeclared failures, declared failures
    /// that pass, missing results, Autobahn failures.
    pub problems: Vec<String>,
    /// `conformance/matrix.md` as it should be.
    pub matrix: String,
}

/// Aggregates the results of every target plus the Autobahn summary.
pub fn aggregate(autobahn: Option<&AutobahnSummary>) -> anyhow::Result<Aggregate> {
    let mut problems = Vec::new();
    let mut per_target = Vec::new();
    for target in TARGETS {
        let name = target.name();
        let records = read_records(&results_file(name))?;
        let declared = known_failures(name)?;
        let by_name: BTreeMap<&str, &Record> =
            records.iter().map(|r| (r.name.as_str(), r)).collect();
        for case in CASES {
            match by_name.get(case.name) {
                None => problems.push(format!("{name}: no result for {}", case.name)),
                Some(r) => match (r.passed(), declared.get(case.name)) {
                    (false, None) => {
                        problems.push(format!("{name}: {} failed: {}", case.name, r.message))
                    }
                    (true, Some(reason)) => problems.push(format!(
                        "{name}: {} is declared as a known failure ({reason}) but passes: remove the declaration",
                        case.name
                    )),
                    _ => {}
                },
            }
        }
        per_target.push((name, records, declared));
    }
    let results: usize = per_target.iter().map(|(_, r, _)| r.len()).sum();
    let failing: usize = per_target
        .iter()
        .map(|(_, r, _)| r.iter().filter(|r| !r.passed()).count())
        .sum();

    let mut m = String::new();
    writeln!(m, "# Tether conformance matrix\n")?;
    writeln!(
        m,
        "Generated by `just conformance` (`cargo run --release -p tether-conformance`), which fails when this file differs from what the run produces. Cells: cases passed / cases in the category.\n"
    )?;
    write!(m, "| category | cases |")?;
    for (name, _, _) in &per_target {
        write!(m, " {name} |")?;
    }
    writeln!(m)?;
    write!(m, "|---|---|")?;
    for _ in &per_target {
        write!(m, "---|")?;
    }
    writeln!(m)?;
    for cat in CATEGORIES.iter().copied().chain(["total"]) {
        let in_cat = |n: &str| cat == "total" || cases::find(n).map(|c| c.category()) == Some(cat);
        let count = CASES.iter().filter(|c| in_cat(c.name)).count();
        write!(m, "| {cat} | {count} |")?;
        for (_, records, _) in &per_target {
            let pass = records
                .iter()
                .filter(|r| in_cat(&r.name) && r.passed())
                .count();
            write!(m, " {pass}/{count} |")?;
        }
        writeln!(m)?;
    }
    writeln!(
        m,
        "\n{} targets, {results} results, {failing} failing.\n",
        per_target.len()
    )?;
    writeln!(m, "## Failures\n")?;
    writeln!(
        m,
        "Every failure is declared in `conformance/known-failures/TARGET.txt` with its reason; an undeclared failure, or a declared one that passes, fails the run.\n"
    )?;
    let mut any = false;
    for (name, records, declared) in &per_target {
        for r in records.iter().filter(|r| !r.passed()) {
            let reason = declared
                .get(&r.name)
                .map(String::as_str)
                .unwrap_or("NOT DECLARED");
            writeln!(m, "- {name} `{}`: {reason}", r.name)?;
            any = true;
        }
    }
    if !any {
        writeln!(m, "None.")?;
    }
    match autobahn {
        Some(a) => {
            problems.extend(a.problems());
            m.push('\n');
            m.push_str(&a.render());
        }
        None => {
            problems.push("no Autobahn|Testsuite results (run without --skip-autobahn)".into());
        }
    }
    Ok(Aggregate {
        targets: per_target.len(),
        cases: CASES.len(),
        results,
        failing,
        problems,
        matrix: m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_file_matches_the_case_list() {
        check_lock(false).expect("cases.lock is current");
    }

    #[test]
    fn every_declaration_names_a_case_and_gives_a_reason() {
        for target in TARGETS {
            let declared = known_failures(target.name()).expect("declarations parse");
            for (case, reason) in declared {
                assert!(cases::find(&case).is_some(), "{case}");
                assert!(reason.len() > 10, "{case}: reason too short");
            }
        }
    }
}
