//! midonet-kube-controllers: Kubernetes controllers that translate cluster objects into
//! `Translation` custom resources and push those to the MidoNet REST API.

pub mod authz;
pub mod backend;
pub mod cache;
pub mod clients;
pub mod compat;
pub mod config;
mod conventions;
pub mod crd;
pub mod events;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod health;
pub mod http;
pub mod informer;
pub mod lbipam;
pub mod leader;
pub mod locks;
pub mod logfields;
pub mod netcheck;
pub mod nodeannotator;
pub mod plancmd;
pub mod pusher;
pub mod recovery;
pub mod retry;
pub mod run;
pub mod scaffold;
pub mod streams;
pub mod sweep;
pub mod translate;
pub mod workers;
