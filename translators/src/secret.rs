//! [`Secret`]: a credential of the MidoNet API (a password, a session token) that must never
//! be shown.
//!
//! The controllers' configuration, their REST client and the API simulator all handle the
//! same credentials, so they share one type that prints the same everywhere. It lives in
//! this crate because this is the one crate all three depend on; it is a plain value with
//! no I/O, so it keeps the crate pure.

use std::fmt;

/// A string that must not be shown: `Debug` and `Display` print [`Secret::REDACTED`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// What is shown in place of a secret, also where one is cut out of a larger text.
    pub const REDACTED: &'static str = "[redacted]";

    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that has to send or check it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Secret::REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Secret::REDACTED)
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let s = Secret::new("hunter2-secret");
        assert_eq!(format!("{s}"), "[redacted]");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some([redacted])");
        assert_eq!(s.expose(), "hunter2-secret");
    }
}
