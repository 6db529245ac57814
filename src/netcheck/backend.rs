//! Reads the whole virtual topology of the tenant through the MidoNet REST API, with GETs
//! only, into the typed model the data-plane model builds from.

use midonet_translators::model::{Resource, Router};
use uuid::Uuid;

use crate::backend::{BackendClient, BackendError};
use crate::sweep::list_tenant_devices;

/// The tenant's bridges, routers and chains (listed as the orphan sweep lists them), each
/// bridge's ports, MAC and ARP tables, each router's ports and routes (`Local` ones
/// included: they are how a router answers for its own addresses), each chain's rules in
/// listed order (MidoNet lists them in evaluation order: build with
/// `RuleOrder::Listed`), every host's interface-port bindings, and the load balancer each
/// router names (`loadBalancerId`) with its pools, their members and VIPs.
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
    out.extend(read_load_balancers(backend, &devices.routers).await?);
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

/// The load balancers `routers` name, with everything below them.
async fn read_load_balancers(
    backend: &BackendClient,
    routers: &[Router],
) -> Result<Vec<Resource>, BackendError> {
    let named: Vec<Uuid> = routers.iter().filter_map(|r| r.load_balancer_id).collect();
    if named.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for lb in backend.list_load_balancers().await? {
        if !named.contains(&lb.id) {
            continue;
        }
        for pool in
            gone_is_empty(backend.list_load_balancer_pools(lb.id).await)?.unwrap_or_default()
        {
            if let Some(members) = gone_is_empty(backend.list_pool_members(pool.id).await)? {
                out.extend(members.into_iter().map(Resource::PoolMember));
            }
            if let Some(vips) = gone_is_empty(backend.list_pool_vips(pool.id).await)? {
                out.extend(vips.into_iter().map(Resource::Vip));
            }
            out.push(Resource::Pool(pool));
        }
        out.push(Resource::LoadBalancer(lb));
    }
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
