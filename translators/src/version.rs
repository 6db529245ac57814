//! The Translation version.
//!
//! It seeds every Translation name and every backend ID. Bumping it makes the controllers
//! treat every existing Translation as stale: they are deleted (so the pusher deletes their
//! backend resources) and rebuilt under new names and IDs. Bump it only for changes the
//! pusher cannot apply in place (see the README's "Translation version" section).

/// The current Translation version.
pub const TRANSLATION_VERSION: &str = "1";
