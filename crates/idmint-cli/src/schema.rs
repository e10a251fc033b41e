//! `idmint schema print`: the DDL a DBA applies for the store's backend (MySQL/MariaDB or
//! PostgreSQL), feature by feature, with the URL's table names, and the GRANT statements each
//! feature needs. It connects to nothing: the store URL is resolved as `serve` resolves it
//! (flag, `IDMINT_STORE`, the config file) and only read.

use anyhow::Context;
use clap::Subcommand;

use crate::StoreArgs;

/// `idmint schema …`.
#[derive(Subcommand)]
pub enum SchemaCommand {
    /// Print the tables idmint may create on the store's database and the GRANT statements
    /// of each feature (segment ids, tag deletion, tag creation, worker-id leases,
    /// store-assigned worker ids, sequences), as SQL a DBA applies. Then run the node with
    /// `create_tables=false` in the store URL to have it issue no DDL at all, and grant its
    /// account only what the features it uses need (docs/deploy.md). Connects to nothing.
    Print {
        /// The grantee as written in the GRANT statements [default: 'idmint'@'%' on
        /// MySQL, idmint on PostgreSQL]
        #[arg(long, value_name = "ACCOUNT")]
        account: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Runs a `schema` command.
pub fn run(command: SchemaCommand) -> anyhow::Result<()> {
    match command {
        SchemaCommand::Print { account, store } => {
            let env = |name: &str| std::env::var(name).ok();
            let flags =
                idmint_server::Overrides { store: store.store.clone(), ..Default::default() };
            let settings = idmint_server::Settings::load(store.config.as_deref(), &env, &flags)
                .context("invalid configuration")?;
            let parts = idmint_store::schema(&settings.store, account.as_deref())?;
            print!("{}", idmint_store::render_schema(&parts));
            Ok(())
        }
    }
}
