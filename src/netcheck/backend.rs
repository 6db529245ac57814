//! Reads the whole virtual topology of the tenant through the MidoNet REST API, with GETs
//! only, into the typed model the data-plane model builds from.

use midonet_translators::model::Resource;

use crate::backend::{BackendClient, BackendError};
use crate::sweep::list_tenant_devices;

/// The tenant's bridges, routers and chains (listed as the orphan sweep lists them), each
/// bridge's ports, MAC and ARP tables, each router's ports and routes (`Local` ones
/// included: they are how a router answers for its own addresses), each chain's rules in
/// listed order (MidoNet lists them in evaluation order: build with
/// `RuleOrder::Listed`), and every host's interface-port bindings.
///
/// Ports carry `peerId` in their GET body, which is how the model links them. A device
/// deleted between its listing and the listing of its children is skipped, as the sweep
/// does: it is simply gone from the topology.
pub async fn read_topology(
    backend: &BackendClient,
    tenant: &str,
) -> Result<Vec<Resource>, BackendError> {
    let devices = list_tenant_devices(backend, tenant).await?;
    let mut out = Vec::new();
    for b in &devices.bridges {
        let id = b.id;
        if let Some(ports) = gone_is_empty(backend.list_bridge_ports(id).await)? {
            out.extend(ports.into_iter().map(Resource::Port));
        }
        if let Some(macs) = gone_is_empty(backend.list_mac_table(id).await)? {
            out.extend(macs.into_iter().map(Resource::MacPort));
        }
        if let Some(arps) = gone_is_empty(backend.list_arp_table(id).await)? {
            out.extend(arps.into_iter().map(Resource::Ipv4MacPair));
        }
    }
    for r in &devices.routers {
        if let Some(ports) = gone_is_empty(backend.list_router_ports(r.id).await)? {
            out.extend(ports.into_iter().map(Resource::Port));
        }
        if let Some(routes) = gone_is_empty(backend.list_routes(r.id).await)? {
            out.extend(routes.into_iter().map(Resource::Route));
        }
    }
    for c in &devices.chains {
        if let Some(rules) = gone_is_empty(backend.list_rules(c.id).await)? {
            out.extend(rules.into_iter().map(Resource::Rule));
        }
    }
    for h in backend.list_hosts().await? {
        if let Some(bindings) = gone_is_empty(backend.list_host_ports(h.id).await)? {
            out.extend(bindings.into_iter().map(Resource::HostInterfacePort));
        }
    }
    for g in backend.list_port_groups().await? {
        if let Some(members) = gone_is_empty(backend.list_port_group_ports(g.id).await)? {
            out.extend(members.into_iter().map(Resource::PortGroupPort));
        }
        out.push(Resource::PortGroup(g));
    }
    for g in backend.list_ip_addr_groups().await? {
        if let Some(addrs) = gone_is_empty(backend.list_ip_addr_group_addrs(g.id).await)? {
            out.extend(addrs.into_iter().map(Resource::IpAddrGroupAddr));
        }
        out.push(Resource::IpAddrGroup(g));
    }
    out.extend(devices.bridges.into_iter().map(Resource::Bridge));
    out.extend(devices.routers.into_iter().map(Resource::Router));
    out.extend(devices.chains.into_iter().map(Resource::Chain));
    Ok(out)
}

/// A 404 on a child collection means the parent went away meanwhile: nothing to read.
fn gone_is_empty<T>(listed: Result<Vec<T>, BackendError>) -> Result<Option<Vec<T>>, BackendError> {
    match listed {
        Ok(items) => Ok(Some(items)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}
