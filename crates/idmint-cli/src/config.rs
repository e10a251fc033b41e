//! `idmint config check`: resolve a configuration exactly as `idmint serve` would (the file,
//! then `IDMINT_*` variables, then flags) and print it, or every problem in it. It only
//! parses and checks: it opens no store, Redis or socket, so it runs anywhere (CI, a
//! deployment hook) and cannot disturb a running node.

use std::path::PathBuf;

use clap::Subcommand;

use crate::ServeArgs;

/// `idmint config …`.
#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Check a configuration and print it as it would run: every key with its value
    /// (defaults included) and where it came from, secrets as "***". Takes serve's flags
    /// and reads IDMINT_* variables, so it shows what `idmint serve` with the same
    /// arguments would run with. Connects to nothing (no store, no Redis): it validates
    /// only. Exit status 0: valid; 1: invalid, every problem listed on stderr with how to
    /// fix it (an IDMINT_* variable idmint does not read is one, named with the nearest
    /// variable it reads); 2: bad command line.
    Check {
        /// The TOML file to check (before --config and IDMINT_CONFIG) [default: --config
        /// or IDMINT_CONFIG; none: the defaults and IDMINT_* variables alone]
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
        #[command(flatten)]
        serve: ServeArgs,
    },
}

/// Runs a `config` command.
pub fn run(command: ConfigCommand) -> anyhow::Result<()> {
    match command {
        ConfigCommand::Check { file, mut serve } => {
            // The file named here is the one to check, whatever IDMINT_CONFIG says.
            if file.is_some() {
                serve.store.config = file;
            }
            let (settings, unknown_variables) = serve.settings()?;
            // A variable idmint does not read is a misspelling until shown otherwise: serve
            // would run without its value.
            if let Some(unknown) = unknown_variables {
                return Err(anyhow::Error::new(unknown).context("invalid configuration"));
            }
            let source = match &serve.store.config {
                Some(path) => format!("{}, then IDMINT_* variables and flags", path.display()),
                None => "no config file; IDMINT_* variables and flags".to_string(),
            };
            // What `serve` would lower for its file descriptor limit (the hard one, which it
            // raises the soft one to): said only when it would; refused when too low.
            let mut lowered = None;
            if let Some(descriptors) = crate::fds::hard() {
                let mut limits = settings.http_limits;
                let reserved = settings.descriptors_reserved();
                let fitted = limits.fit_descriptors(descriptors, reserved, settings.listeners());
                if let Some(configured) = fitted.map_err(anyhow::Error::msg)? {
                    lowered = Some(format!(
                        "# limits.connections_max = {configured} is lowered to {} at start: the \
                         file descriptor limit {descriptors} leaves that after {reserved} for the \
                         stores, marks files and logs",
                        limits.connections_max
                    ));
                }
            }
            println!("# idmint configuration: valid. From {source}; checked without connecting.");
            println!("# Each value's origin is in its comment; secrets are shown as \"***\".");
            print!("{}", settings.effective.to_toml());
            if let Some(lowered) = lowered {
                println!("{lowered}");
            }
            Ok(())
        }
    }
}
