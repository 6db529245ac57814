//! The Translation version.
//!
//! It seeds every Translation name and every backend ID. Bumping it makes the controllers
//! treat every existing Translation as stale: they are deleted (so the pusher deletes their
//! backend resources) and rebuilt under new names and IDs. Bump it only for changes the
//! pusher cannot apply in place (see the README's "Translation version" section).
//!
//! A version's names and IDs are the same whatever release translates it, so that running
//! the controllers at an earlier version (`--translation-version`, a rollback) finds that
//! version's Translations as it left them; how a version names its Translations is its
//! [`crate::naming::NameScheme`]. Version 1 is the original integration's naming; version 2
//! brought the readable names.

/// The current Translation version.
pub const TRANSLATION_VERSION: &str = "2";
