//! A model of MidoNet's data plane: what the agent (midolman) does to a packet in the
//! virtual topology that the backend resources describe.
//!
//! It is the oracle of this project's tests and the engine of `trace` and `check`: given
//! bridges, routers, ports, links, routes, chains and rules (the one typed model of
//! [`midonet_translators::model`]) plus the workloads behind bound interfaces, it answers
//! whether a connection is delivered, where, through which rules, and what source address
//! the client sees on the reply. Pure: no I/O, no clock, no randomness (every random
//! choice MidoNet would make is explored).
//!
//! The semantics, and where they deviate from midolman, are in `docs/dataplane.md`.

mod chainrules;
pub mod check;
pub mod cluster;
mod engine;
pub mod live;
mod packet;
pub mod policy;
mod state;
mod topology;
mod trace;

pub use check::{check, Failure, FlowKind, Report, Tally};
pub use cluster::Cluster;
pub use engine::{Hop, Step};
pub use live::{LiveTopology, RecordChange};
pub use packet::{icmp, FlowTuple, IcmpMessage, Protocol, Quoted, SocketV4, ETHERTYPE_IPV4};
pub use topology::{contains, prefix_mask, Attachment, BuildProblem, RuleOrder, Topology};
pub use trace::{
    trace, trace_without_hops, Leg, Path, Probe, Trace, TraceError, Verdict, MAX_PATHS,
};
