//! A model of MidoNet's data plane: what the agent (midolman) does to a packet in the
//! virtual topology that the backend resources describe.
//!
//! It is the oracle of this project's tests and the engine of `trace` and `check`: given
//! bridges, routers, ports, links, routes, chains and rules (the one typed model of
//! [`midonet_translators::model`], a router's L4 load balancer included) plus the workloads behind bound interfaces (behind bridge
//! ports or exterior router ports, outside clients behind an uplink included), it answers
//! whether a connection is delivered, where, through which rules, and what the client sees
//! back: the reply, or the ICMP error or echo reply a router answers. Pure: no I/O, no
//! clock, no randomness (every random choice MidoNet would make is explored). What it does
//! not simulate it refuses, naming the rule or device, rather than guess.
//!
//! The semantics, the midolman sources and tests behind each, the conformance suite ported
//! from midolman's tests (`tests/conformance/`) and what still deviates are in
//! `docs/dataplane.md`.

mod chainrules;
pub mod check;
pub mod cluster;
mod engine;
pub mod live;
pub mod outside;
mod packet;
pub mod policy;
pub mod reads;
mod state;
mod topology;
mod trace;

pub use check::{check, Failure, FlowKind, Report, Tally};
pub use cluster::Cluster;
pub use engine::{Hop, Step};
pub use live::{LiveTopology, RecordChange};
pub use packet::{icmp, FlowTuple, IcmpMessage, Protocol, Quoted, SocketV4, ETHERTYPE_IPV4};
pub use reads::{Changes, Reads};
pub use topology::{contains, prefix_mask, Attachment, BuildProblem, RuleOrder, Topology};
pub use trace::{
    trace, trace_reading, trace_sequence, trace_without_hops, Leg, Path, Probe, ProbeRequest,
    Session, Trace, TraceError, Verdict, MAX_PATHS,
};
