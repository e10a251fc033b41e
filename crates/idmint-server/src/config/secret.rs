//! Secrets as types: a [`Secret`] (a permutation key, a token) and a [`SecretUrl`] (a URL
//! that may hold a password) print masked in `Display`, `Debug` and `Serialize`, so no log
//! line, error or printed configuration shows one. A new secret key is a key of one of
//! these types; only `expose` gives the value, to the code that uses it.

use std::fmt::{self, Display};
use std::str::FromStr;

use serde::{Deserialize, Serialize, Serializer};

/// What a secret prints as, wherever it is printed.
pub const SECRET_MASK: &str = "***";

/// A secret from the configuration (a permutation key, a token). `Display`, `Debug` and
/// `Serialize` print [`SECRET_MASK`]; only [`Secret::expose`] gives the value, to the code
/// that uses it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

/// A URL that may carry a password (`store`, `redis`). `Display`, `Debug` and `Serialize`
/// print it with every password as `***` (`mysql://app:***@db/ids`); only
/// [`SecretUrl::expose`] gives the URL as written, to the code that connects.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretUrl(String);

impl Secret {
    /// A secret holding `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the code that uses it; never for a log, an error or output.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SECRET_MASK)
    }
}

impl Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SECRET_MASK)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(SECRET_MASK)
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Secret, Self::Err> {
        Ok(Secret(text.to_string()))
    }
}

impl SecretUrl {
    /// A URL as written (it may hold a password).
    pub fn new(url: impl Into<String>) -> SecretUrl {
        SecretUrl(url.into())
    }

    /// The URL as written, password included: for the code that connects, never for a
    /// log, an error or output.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", idmint_store::redact_urls(&self.0))
    }
}

impl Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&idmint_store::redact_urls(&self.0))
    }
}

impl Serialize for SecretUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&idmint_store::redact_urls(&self.0))
    }
}

impl FromStr for SecretUrl {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<SecretUrl, Self::Err> {
        Ok(SecretUrl(text.to_string()))
    }
}
