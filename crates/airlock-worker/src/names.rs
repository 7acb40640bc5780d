//! Names that can only be built by parsing: worker ids, input and output
//! names, secret names, channel names.
//!
//! Each rule is a tiny hand-written matcher rather than a regex: the grammars
//! are one character class for the first character and one for the rest, and
//! a matcher that cannot backtrack cannot be made slow by a hostile name.
//!
//! The platform secret denylist (KEY-5) lives here as data, next to the
//! grammar it narrows.

use std::fmt;

use serde::Serialize;

/// Why a string is not a valid name of some kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a valid {what} ({rule})")]
pub struct NameError {
    what: &'static str,
    value: String,
    rule: String,
}

impl NameError {
    fn new(what: &'static str, value: &str, rule: impl Into<String>) -> Self {
        // Never echo back an unbounded value.
        let value: String = value.chars().take(80).collect();
        Self {
            what,
            value,
            rule: rule.into(),
        }
    }

    /// Stable error code.
    pub fn code(&self) -> &'static str {
        "invalid_name"
    }
}

/// `first` then up to `max_rest` of `rest`.
fn matches(s: &str, first: fn(u8) -> bool, rest: fn(u8) -> bool, max_rest: usize) -> bool {
    let b = s.as_bytes();
    match b.split_first() {
        Some((f, tail)) => first(*f) && tail.len() <= max_rest && tail.iter().all(|c| rest(*c)),
        None => false,
    }
}

fn lower_digit(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, NameError> {
                Self::parse(s)
            }
        }
    };
}

name_type!(
    /// A worker id: `[a-z0-9][a-z0-9-]{0,62}` (RUN-1). Equal to the name of
    /// the bundle's folder.
    WorkerId
);
name_type!(
    /// An input or output name: `[a-z][a-z0-9_]{0,63}`.
    FieldName
);
name_type!(
    /// A secret a worker may declare: `[A-Z][A-Z0-9_]{0,63}` (KEY-4) and not
    /// owned by the platform (KEY-5, [`PLATFORM_SECRET_NAMES`]).
    SecretName
);
name_type!(
    /// A credential channel name: `[a-z][a-z0-9_]{0,31}` (NET-6).
    ChannelName
);

impl WorkerId {
    pub const RULE: &'static str = "expected [a-z0-9][a-z0-9-]{0,62}";

    pub fn parse(s: &str) -> Result<Self, NameError> {
        if matches(s, lower_digit, |c| lower_digit(c) || c == b'-', 62) {
            Ok(Self(s.to_string()))
        } else {
            Err(NameError::new("worker id", s, Self::RULE))
        }
    }
}

impl FieldName {
    pub const RULE: &'static str = "expected [a-z][a-z0-9_]{0,63}";

    pub fn parse(s: &str) -> Result<Self, NameError> {
        if matches(
            s,
            |c| c.is_ascii_lowercase(),
            |c| lower_digit(c) || c == b'_',
            63,
        ) {
            Ok(Self(s.to_string()))
        } else {
            Err(NameError::new("field name", s, Self::RULE))
        }
    }
}

impl ChannelName {
    pub const RULE: &'static str = "expected [a-z][a-z0-9_]{0,31}";

    pub fn parse(s: &str) -> Result<Self, NameError> {
        if matches(
            s,
            |c| c.is_ascii_lowercase(),
            |c| lower_digit(c) || c == b'_',
            31,
        ) {
            Ok(Self(s.to_string()))
        } else {
            Err(NameError::new("channel name", s, Self::RULE))
        }
    }
}

/// Prefix of names the platform owns (run metadata, configuration). A
/// manifest can never declare one.
pub const PLATFORM_SECRET_PREFIX: &str = "AIRLOCK_";

/// Secret names the platform owns (KEY-5): its key material, session keys,
/// database connection string and signing keys. Refused at load whatever a
/// manifest or the database says. Names of provider keys behind configured
/// channels depend on the deployment's channel configuration; the run
/// service refuses those on top of this list.
pub const PLATFORM_SECRET_NAMES: &[&str] = &[
    "KEK",
    "DATA_KEY",
    "SESSION_KEY",
    "SESSION_SECRET",
    "CSRF_KEY",
    "DATABASE_URL",
    "AUDIT_SIGNING_KEY",
    "WEBHOOK_SIGNING_KEY",
];

/// Whether `name` belongs to the platform and can never be declared.
pub fn is_platform_secret(name: &str) -> bool {
    name.starts_with(PLATFORM_SECRET_PREFIX) || PLATFORM_SECRET_NAMES.contains(&name)
}

impl SecretName {
    pub const RULE: &'static str = "expected [A-Z][A-Z0-9_]{0,63}";

    pub fn parse(s: &str) -> Result<Self, NameError> {
        let upper_digit = |c: u8| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_';
        if !matches(s, |c| c.is_ascii_uppercase(), upper_digit, 63) {
            return Err(NameError::new("secret name", s, Self::RULE));
        }
        if is_platform_secret(s) {
            return Err(NameError::new(
                "secret name",
                s,
                format!(
                    "reserved for the platform: names starting with {PLATFORM_SECRET_PREFIX} and {} can never be declared",
                    PLATFORM_SECRET_NAMES.join(", ")
                ),
            ));
        }
        Ok(Self(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_1_worker_id_grammar() {
        for ok in ["a", "0", "hello-python", "a-", &"a".repeat(63)] {
            assert!(WorkerId::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "A", "a_b", "a.b", "a/b", "é", &"a".repeat(64)] {
            assert!(WorkerId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_4_secret_name_grammar_and_key_5_platform_names() {
        for ok in ["A", "GITHUB_TOKEN", "X1", &format!("A{}", "B".repeat(63))] {
            assert!(SecretName::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "github_token",
            "1A",
            "_A",
            "A-B",
            &"A".repeat(65),
            "AIRLOCK_X",
            "AIRLOCK_",
            "KEK",
            "DATABASE_URL",
            "SESSION_KEY",
        ] {
            assert!(SecretName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_and_channel_names() {
        assert!(FieldName::parse("count_2").is_ok());
        assert!(FieldName::parse("2count").is_err());
        assert!(FieldName::parse(&"a".repeat(65)).is_err());
        assert!(ChannelName::parse("openai").is_ok());
        assert!(ChannelName::parse("open-ai").is_err());
        assert!(ChannelName::parse(&"a".repeat(33)).is_err());
    }

    #[test]
    fn name_error_does_not_echo_unbounded_values() {
        let e = WorkerId::parse(&"X".repeat(10_000)).unwrap_err();
        assert!(e.to_string().len() < 200);
    }
}
