//! Store URLs: `sqlite://PATH` (the default, `sqlite://./idmint-data/idmint.db`) and
//! `memory://` (nothing persists; for tests and demos).
//!
//! Displaying a URL never shows a password.

use std::fmt;
use std::path::PathBuf;

use crate::StoreError;

/// A parsed store location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// In-process memory; everything is lost at exit.
    Memory,
    /// An SQLite database file, created with its directory when absent.
    Sqlite(PathBuf),
}

/// The store `idmint serve` and `idmint tag` use without `--store`.
pub const DEFAULT_STORE_URL: &str = "sqlite://./idmint-data/idmint.db";

const ACCEPTED: &str = "use sqlite://PATH (e.g. sqlite://./idmint-data/idmint.db) or memory://";

impl StoreUrl {
    /// Parses a store URL.
    pub fn parse(url: &str) -> Result<StoreUrl, StoreError> {
        let bad = |reason: String| StoreError::BadUrl { url: redact(url), reason };
        let (scheme, rest) = url
            .split_once("://")
            .or_else(|| url.split_once(':'))
            .ok_or_else(|| bad(format!("no scheme; {ACCEPTED}")))?;
        match scheme {
            "memory" if rest.is_empty() => Ok(StoreUrl::Memory),
            "memory" => Err(bad("memory:// takes no path".to_string())),
            "sqlite" if rest.is_empty() => Err(bad(format!("no database path; {ACCEPTED}"))),
            "sqlite" => Ok(StoreUrl::Sqlite(PathBuf::from(rest))),
            "mysql" | "mariadb" | "postgres" | "postgresql" | "redis" => {
                Err(bad(format!("the {scheme} backend is not part of this build yet; {ACCEPTED}")))
            }
            other => Err(bad(format!("unknown scheme {other:?}; {ACCEPTED}"))),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory://"),
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
        }
    }
}

/// `url` with the password of its `user:password@` part replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return url.to_string() };
    match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_accepted_forms() {
        assert_eq!(StoreUrl::parse("memory://"), Ok(StoreUrl::Memory));
        assert_eq!(
            StoreUrl::parse(DEFAULT_STORE_URL),
            Ok(StoreUrl::Sqlite(PathBuf::from("./idmint-data/idmint.db")))
        );
        assert_eq!(StoreUrl::parse("sqlite:///var/x.db"), Ok(StoreUrl::Sqlite("/var/x.db".into())));
        assert_eq!(StoreUrl::parse("sqlite:x.db"), Ok(StoreUrl::Sqlite("x.db".into())));
    }

    #[test]
    fn refuses_with_a_reason_and_never_shows_a_password() {
        let err = StoreUrl::parse("mysql://root:hunter2@db:3306/ids").unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("root:***@db:3306") && err.contains("not part of this build"));
        assert!(StoreUrl::parse("sqlite://").is_err());
        assert!(StoreUrl::parse("ftp://x").unwrap_err().to_string().contains("unknown scheme"));
        assert!(StoreUrl::parse("just-a-path").is_err());
    }
}
