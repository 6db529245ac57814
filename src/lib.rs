//! midonet-kube-controllers: Kubernetes controllers that translate cluster objects into
//! `Translation` custom resources and push those to the MidoNet REST API.

pub mod crd;
pub mod leader;
