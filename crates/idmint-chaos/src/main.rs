//! `idmint-chaos`: runs chaos scenarios against the real `idmint` binary and prints each
//! scenario's verdict; exits 1 when one fails. `--report FILE` writes the results as
//! Markdown (the table in docs/GUARANTEES.md comes from the long profile's report). Started
//! by `cargo run`, it first builds the `idmint` binary it tests with the same profile, so a
//! run never judges a stale build.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use idmint_chaos::{Profile, Report, SCENARIOS, Settings, missing_tools, scenario};

/// Chaos scenarios for idmint: private servers, concurrent clients, faults, a checked history.
#[derive(Parser)]
#[command(name = "idmint-chaos", version)]
struct Cli {
    /// A scenario name, or `all`. `--list` names them.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// short: seconds per scenario (CI); long: minutes per scenario, 10^7 ids and more.
    #[arg(long, value_enum, default_value_t = ProfileArg::Short)]
    profile: ProfileArg,
    /// Length of each scenario's main phase (its loaded phase or outage), e.g. 60s, 2m.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// The idmint binary; default: `idmint` beside this program (cargo's target directory),
    /// built first when this program runs under `cargo run`.
    #[arg(long)]
    idmint: Option<PathBuf>,
    /// Also write the results as Markdown to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// List the scenarios and their guarantees, and exit.
    #[arg(long)]
    list: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum ProfileArg {
    Short,
    Long,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<bool> {
    if cli.list {
        for s in &SCENARIOS {
            println!("{:<22} {}", s.name, s.guarantee);
        }
        return Ok(true);
    }
    let chosen: Vec<_> = if cli.scenario == "all" {
        SCENARIOS.iter().collect()
    } else {
        let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        vec![scenario(&cli.scenario).with_context(|| {
            format!(
                "unknown scenario {:?}; the scenarios are: all, {}",
                cli.scenario,
                names.join(", ")
            )
        })?]
    };
    let missing = missing_tools();
    if !missing.is_empty() {
        bail!(
            "missing Debian packages: {} (apt-get install {})",
            missing.join(", "),
            missing.join(" ")
        );
    }
    let idmint = match cli.idmint {
        Some(path) => path,
        None => beside_this_program()?,
    };
    if !idmint.exists() {
        bail!(
            "no idmint binary at {}: build it first (`cargo build -p idmint-cli`, with --release for \
             the long profile) or pass --idmint PATH",
            idmint.display()
        );
    }
    let profile = match cli.profile {
        ProfileArg::Short => Profile::Short,
        ProfileArg::Long => Profile::Long,
    };
    if profile == Profile::Long && cfg!(debug_assertions) {
        eprintln!(
            "note: a debug build; the long profile's rates want release binaries \
             (cargo run --release -p idmint-chaos -- --profile long)"
        );
    }
    let settings = Settings { profile, duration: cli.duration, idmint };
    let mut reports = Vec::new();
    for s in chosen {
        eprintln!("== {} ({profile:?})", s.name);
        let report = s.run(&settings)?;
        println!("{report}");
        reports.push(report);
    }
    if let Some(path) = cli.report {
        std::fs::write(&path, markdown(&reports, profile))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(reports.iter().all(Report::passed))
}

/// The `idmint` binary in this program's directory. Under `cargo run` (which sets `CARGO` and
/// `CARGO_MANIFEST_DIR`) it is built first, with the profile this program was built with:
/// cargo does nothing when it is up to date.
fn beside_this_program() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding this program's path")?;
    let idmint = exe.with_file_name("idmint");
    let (Some(cargo), Some(manifest_dir)) =
        (std::env::var_os("CARGO"), std::env::var_os("CARGO_MANIFEST_DIR"))
    else {
        return Ok(idmint);
    };
    // target/debug is the `dev` profile; any other directory is named after its profile.
    let profile = match exe.parent().and_then(|dir| dir.file_name()).and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(name) => name.to_string(),
    };
    eprintln!("== building idmint ({profile} profile)");
    let manifest = PathBuf::from(manifest_dir).join("Cargo.toml");
    let status = std::process::Command::new(cargo)
        .args(["build", "--quiet", "-p", "idmint-cli", "--profile", &profile])
        .arg("--manifest-path")
        .arg(&manifest)
        .status()
        .context("running cargo build -p idmint-cli")?;
    if !status.success() {
        bail!("cargo build -p idmint-cli --profile {profile} failed ({status})");
    }
    Ok(idmint)
}

/// The results as a Markdown table and, per scenario, its criteria and faults.
fn markdown(reports: &[Report], profile: Profile) -> String {
    let mut md = format!("Profile: {profile:?}\n\n");
    md.push_str("| scenario | ids checked | requests | faults | duplicates | out of order | worker ids shared | order violations | repeats | result |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in reports {
        let c = &r.checked;
        let result = if r.passed() { "pass" } else { "FAIL" };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {result} |",
            r.scenario,
            c.ids,
            c.ops,
            r.faults.len(),
            c.duplicates,
            c.not_increasing,
            c.owner_overlaps,
            c.order_violations,
            c.repeats
        );
    }
    for r in reports {
        let _ = writeln!(
            md,
            "\n### {}\n\n{} ({:.0} s)\n",
            r.scenario,
            r.guarantee,
            r.elapsed.as_secs_f64()
        );
        let _ = writeln!(md, "- ids by tag: {}", r.checked.ids_by_tag_text());
        for c in &r.criteria {
            let _ = writeln!(md, "- {} {}: {}", if c.pass { "✓" } else { "✗" }, c.what, c.measured);
        }
        if !r.refusals.is_empty() {
            let list: Vec<String> = r.refusals.iter().map(|(k, v)| format!("{k} × {v}")).collect();
            let _ = writeln!(md, "- answers other than ids: {}", list.join(", "));
        }
        let faults = if r.faults.is_empty() { "none".to_string() } else { r.faults.join("; ") };
        let _ = writeln!(md, "- faults: {faults}");
    }
    md
}

/// `90`, `90s`, `500ms`, `2m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit_ms) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000)
    } else {
        (text, 1_000)
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write 60s, 2m or 500ms"))?;
    if n == 0 || n.saturating_mul(unit_ms) > 3_600_000 {
        return Err(format!("{text:?}: a duration from 1 ms to 1 hour"));
    }
    Ok(Duration::from_millis(n * unit_ms))
}
