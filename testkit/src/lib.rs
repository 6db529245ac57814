//! Test and benchmark tooling, kept out of the controllers' library: nothing here is part of
//! the product, and the product does not depend on it at run time.
//!
//! - [`scenario`]: sample clusters at scale (the Kubernetes objects only).
//! - [`probe`]: the flow probe, which measures how long flows are interrupted while the
//!   backend changes.
//!
//! The benchmark (the `midonet-kube-bench` crate, `bench/`) and the integration tests both
//! use it.

pub mod probe;
pub mod scenario;
