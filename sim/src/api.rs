//! The simulated MidoNet REST API under `/midonet-api`: routing, media types, auth,
//! fault injection and counting around the [`Store`](super::store::Store) operations.
//!
//! Checks run in MidoNet's order: authentication (401), path (404) and method (405),
//! media type (406), body (400), then the operation's own answers.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use midonet_translators::model::Kind;
use serde_json::{json, Value};
use uuid::Uuid;

use super::conn::ConnInfo;
use super::faults::Verdict;
use super::store::{ApiError, Child, Device, Outcome, Reply, Store};
use super::SimState;

/// The API's path prefix.
pub(crate) const API_PREFIX: &str = "/midonet-api";
const ERROR_MEDIA_TYPE: &str = "application/vnd.org.midonet.Error-v1+json";
const TOKEN_MEDIA_TYPE: &str = "application/vnd.org.midonet.Token-v1+json";
const APPLICATION_MEDIA_TYPE: &str = "application/vnd.org.midonet.Application-v5+json";

/// A resolved API path.
#[derive(Clone, Debug, PartialEq)]
enum Endpoint {
    Root,
    Login,
    TunnelZones,
    TunnelZone(Uuid),
    TunnelZoneHosts(Uuid),
    TunnelZoneHost(Uuid, Uuid),
    Hosts,
    Host(Uuid),
    HostPorts(Uuid),
    HostPort(Uuid, Uuid),
    Bridges,
    Bridge(Uuid),
    BridgePorts(Uuid),
    MacTable(Uuid, Option<u16>),
    MacEntry(Uuid, Option<u16>, String),
    ArpTable(Uuid),
    ArpEntry(Uuid, String),
    Routers,
    Router(Uuid),
    RouterPorts(Uuid),
    RouterRoutes(Uuid),
    Ports,
    Port(Uuid),
    PortLink(Uuid),
    Route(Uuid),
    Chains,
    Chain(Uuid),
    ChainRules(Uuid),
    Rule(Uuid),
    PortGroups,
    PortGroup(Uuid),
    PortGroupPorts(Uuid),
    PortGroupPort(Uuid, Uuid),
    IpAddrGroups,
    IpAddrGroup(Uuid),
    IpAddrGroupAddrs(Uuid),
    IpAddrGroupAddr(Uuid, String),
    LoadBalancers,
    LoadBalancer(Uuid),
    LoadBalancerPools(Uuid),
    LoadBalancerVips(Uuid),
    Pools,
    Pool(Uuid),
    PoolPoolMembers(Uuid),
    PoolVips(Uuid),
    PoolMembers,
    PoolMember(Uuid),
    Vips,
    Vip(Uuid),
}

fn id(s: &str) -> Option<Uuid> {
    Uuid::parse_str(s).ok()
}

impl Endpoint {
    /// Resolves the path segments below the prefix; `None` is a 404. Path ids that are
    /// not UUIDs are 404 too, as with MidoNet's typed path parameters.
    fn parse(segs: &[&str]) -> Option<Endpoint> {
        use Endpoint as E;
        Some(match segs {
            [] => E::Root,
            ["login"] => E::Login,
            ["tunnel_zones"] => E::TunnelZones,
            ["tunnel_zones", tz] => E::TunnelZone(id(tz)?),
            ["tunnel_zones", tz, "hosts"] => E::TunnelZoneHosts(id(tz)?),
            ["tunnel_zones", tz, "hosts", h] => E::TunnelZoneHost(id(tz)?, id(h)?),
            ["hosts"] => E::Hosts,
            ["hosts", h] => E::Host(id(h)?),
            ["hosts", h, "ports"] => E::HostPorts(id(h)?),
            ["hosts", h, "ports", p] => E::HostPort(id(h)?, id(p)?),
            ["bridges"] => E::Bridges,
            ["bridges", b] => E::Bridge(id(b)?),
            ["bridges", b, "ports"] => E::BridgePorts(id(b)?),
            ["bridges", b, "mac_table"] => E::MacTable(id(b)?, None),
            ["bridges", b, "mac_table", e] => E::MacEntry(id(b)?, None, e.to_string()),
            ["bridges", b, "vlans", v, "mac_table"] => E::MacTable(id(b)?, Some(v.parse().ok()?)),
            ["bridges", b, "vlans", v, "mac_table", e] => {
                E::MacEntry(id(b)?, Some(v.parse().ok()?), e.to_string())
            }
            ["bridges", b, "arp_table"] => E::ArpTable(id(b)?),
            ["bridges", b, "arp_table", e] => E::ArpEntry(id(b)?, e.to_string()),
            ["routers"] => E::Routers,
            ["routers", r] => E::Router(id(r)?),
            ["routers", r, "ports"] => E::RouterPorts(id(r)?),
            ["routers", r, "routes"] => E::RouterRoutes(id(r)?),
            ["ports"] => E::Ports,
            ["ports", p] => E::Port(id(p)?),
            ["ports", p, "link"] => E::PortLink(id(p)?),
            ["routes", r] => E::Route(id(r)?),
            ["chains"] => E::Chains,
            ["chains", c] => E::Chain(id(c)?),
            ["chains", c, "rules"] => E::ChainRules(id(c)?),
            ["rules", r] => E::Rule(id(r)?),
            ["port_groups"] => E::PortGroups,
            ["port_groups", g] => E::PortGroup(id(g)?),
            ["port_groups", g, "ports"] => E::PortGroupPorts(id(g)?),
            ["port_groups", g, "ports", p] => E::PortGroupPort(id(g)?, id(p)?),
            ["ip_addr_groups"] => E::IpAddrGroups,
            ["ip_addr_groups", g] => E::IpAddrGroup(id(g)?),
            ["ip_addr_groups", g, "ip_addrs"] => E::IpAddrGroupAddrs(id(g)?),
            ["ip_addr_groups", g, "versions", "4", "ip_addrs", a] => {
                E::IpAddrGroupAddr(id(g)?, a.to_string())
            }
            ["load_balancers"] => E::LoadBalancers,
            ["load_balancers", lb] => E::LoadBalancer(id(lb)?),
            ["load_balancers", lb, "pools"] => E::LoadBalancerPools(id(lb)?),
            ["load_balancers", lb, "vips"] => E::LoadBalancerVips(id(lb)?),
            ["pools"] => E::Pools,
            ["pools", p] => E::Pool(id(p)?),
            ["pools", p, "pool_members"] => E::PoolPoolMembers(id(p)?),
            ["pools", p, "vips"] => E::PoolVips(id(p)?),
            ["pool_members"] => E::PoolMembers,
            ["pool_members", m] => E::PoolMember(id(m)?),
            ["vips"] => E::Vips,
            ["vips", v] => E::Vip(id(v)?),
            _ => return None,
        })
    }

    /// The kind the endpoint serves (`None` for the root and login).
    fn kind(&self) -> Option<Kind> {
        use Endpoint as E;
        Some(match self {
            E::Root | E::Login => return None,
            E::TunnelZones | E::TunnelZone(_) => Kind::TunnelZone,
            E::TunnelZoneHosts(_) | E::TunnelZoneHost(..) => Kind::TunnelZoneHost,
            E::Hosts | E::Host(_) => Kind::Host,
            E::HostPorts(_) | E::HostPort(..) => Kind::HostInterfacePort,
            E::Bridges | E::Bridge(_) => Kind::Bridge,
            E::BridgePorts(_) | E::RouterPorts(_) | E::Ports | E::Port(_) => Kind::Port,
            E::MacTable(..) | E::MacEntry(..) => Kind::MacPort,
            E::ArpTable(_) | E::ArpEntry(..) => Kind::Ipv4MacPair,
            E::Routers | E::Router(_) => Kind::Router,
            E::RouterRoutes(_) | E::Route(_) => Kind::Route,
            E::PortLink(_) => Kind::PortLink,
            E::Chains | E::Chain(_) => Kind::Chain,
            E::ChainRules(_) | E::Rule(_) => Kind::Rule,
            E::PortGroups | E::PortGroup(_) => Kind::PortGroup,
            E::PortGroupPorts(_) | E::PortGroupPort(..) => Kind::PortGroupPort,
            E::IpAddrGroups | E::IpAddrGroup(_) => Kind::IpAddrGroup,
            E::IpAddrGroupAddrs(_) | E::IpAddrGroupAddr(..) => Kind::IpAddrGroupAddr,
            E::LoadBalancers | E::LoadBalancer(_) => Kind::LoadBalancer,
            E::LoadBalancerPools(_) | E::Pools | E::Pool(_) => Kind::Pool,
            E::PoolPoolMembers(_) | E::PoolMembers | E::PoolMember(_) => Kind::PoolMember,
            E::LoadBalancerVips(_) | E::PoolVips(_) | E::Vips | E::Vip(_) => Kind::Vip,
        })
    }

    fn is_collection(&self) -> bool {
        use Endpoint as E;
        matches!(
            self,
            E::TunnelZones
                | E::TunnelZoneHosts(_)
                | E::Hosts
                | E::HostPorts(_)
                | E::Bridges
                | E::BridgePorts(_)
                | E::MacTable(..)
                | E::ArpTable(_)
                | E::Routers
                | E::RouterPorts(_)
                | E::RouterRoutes(_)
                | E::Ports
                | E::Chains
                | E::ChainRules(_)
                | E::PortGroups
                | E::PortGroupPorts(_)
                | E::IpAddrGroups
                | E::IpAddrGroupAddrs(_)
                | E::LoadBalancers
                | E::LoadBalancerPools(_)
                | E::LoadBalancerVips(_)
                | E::Pools
                | E::PoolPoolMembers(_)
                | E::PoolVips(_)
                | E::PoolMembers
                | E::Vips
        )
    }

    /// Methods the endpoint supports; anything else is 405. A collection lists and
    /// creates, an item reads and deletes, and only items of the kinds MidoNet updates in
    /// place ([`Kind::updatable`]: Router, Bridge, Port, TunnelZone, PortGroup) take PUT.
    /// Hosts and the all-ports list are read-only; a port link is made and removed.
    /// MidoNet also takes PUTs of load balancers and pool members (partial updates, see
    /// [`Kind::updatable`]) and lists a load balancer's VIPs without creating through it.
    fn methods(&self) -> &'static [Method] {
        use Endpoint as E;
        const GET: &[Method] = &[Method::GET];
        const GET_POST: &[Method] = &[Method::GET, Method::POST];
        const GET_DELETE: &[Method] = &[Method::GET, Method::DELETE];
        const GET_PUT_DELETE: &[Method] = &[Method::GET, Method::PUT, Method::DELETE];
        const POST_DELETE: &[Method] = &[Method::POST, Method::DELETE];
        match self {
            E::Root | E::Hosts | E::Host(_) | E::Ports | E::LoadBalancerVips(_) => GET,
            E::LoadBalancer(_) | E::PoolMember(_) => GET_PUT_DELETE,
            E::Login => GET_POST,
            E::PortLink(_) => POST_DELETE,
            collection if collection.is_collection() => GET_POST,
            item if item.kind().is_some_and(Kind::updatable) => GET_PUT_DELETE,
            _ => GET_DELETE,
        }
    }
}

// --- Media types ------------------------------------------------------------------------

/// Vendor media types MidoNet accepts for one item of a kind.
fn item_types(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::TunnelZone => &["application/vnd.org.midonet.TunnelZone-v1+json"],
        Kind::TunnelZoneHost => &[
            "application/vnd.org.midonet.TunnelZoneHost-v1+json",
            "application/vnd.org.midonet.GreTunnelZoneHost-v1+json",
        ],
        Kind::Router => &["application/vnd.org.midonet.Router-v3+json"],
        Kind::Bridge => &[
            "application/vnd.org.midonet.Bridge-v4+json",
            "application/vnd.org.midonet.Bridge-v5+json",
        ],
        Kind::Port => &[
            "application/vnd.org.midonet.Port-v3+json",
            "application/vnd.org.midonet.Port-v4+json",
        ],
        Kind::PortLink => &["application/vnd.org.midonet.PortLink-v1+json"],
        Kind::Route => &["application/vnd.org.midonet.Route-v1+json"],
        Kind::Chain => &["application/vnd.org.midonet.Chain-v1+json"],
        Kind::Rule => &["application/vnd.org.midonet.Rule-v2+json"],
        Kind::Host => &["application/vnd.org.midonet.Host-v3+json"],
        Kind::HostInterfacePort => &["application/vnd.org.midonet.HostInterfacePort-v1+json"],
        Kind::MacPort => &["application/vnd.org.midonet.MacPort-v2+json"],
        Kind::Ipv4MacPair => &["application/vnd.org.midonet.IP4Mac-v1+json"],
        Kind::PortGroup => &["application/vnd.org.midonet.PortGroup-v1+json"],
        Kind::PortGroupPort => &["application/vnd.org.midonet.PortGroupPort-v1+json"],
        Kind::IpAddrGroup => &["application/vnd.org.midonet.IpAddrGroup-v1+json"],
        Kind::IpAddrGroupAddr => &["application/vnd.org.midonet.IpAddrGroupAddr-v1+json"],
        Kind::LoadBalancer => &["application/vnd.org.midonet.LoadBalancer-v1+json"],
        Kind::Pool => &["application/vnd.org.midonet.Pool-v1+json"],
        Kind::PoolMember => &["application/vnd.org.midonet.PoolMember-v1+json"],
        Kind::Vip => &["application/vnd.org.midonet.VIP-v1+json"],
    }
}

/// Whether creates and updates of the kind also take plain `application/json`.
/// MidoNet's tunnel-zone-host and ARP-table resources take only their vendor types.
fn writes_take_plain_json(kind: Kind) -> bool {
    !matches!(
        kind,
        Kind::TunnelZoneHost | Kind::Ipv4MacPair | Kind::IpAddrGroup | Kind::IpAddrGroupAddr
    )
}

/// `type/subtype` of a media type, lowercased, parameters dropped.
fn essence(media: &str) -> Option<(String, String)> {
    let base = media.split(';').next()?.trim();
    let (ty, sub) = base.split_once('/')?;
    let (ty, sub) = (ty.trim(), sub.trim());
    if ty.is_empty() || sub.is_empty() {
        return None;
    }
    Some((ty.to_ascii_lowercase(), sub.to_ascii_lowercase()))
}

/// JAX-RS compatibility: equal ignoring case, or a wildcard on either side.
fn compatible(a: &(String, String), b: &(String, String)) -> bool {
    let part = |x: &str, y: &str| x == "*" || y == "*" || x == y;
    part(&a.0, &b.0) && part(&a.1, &b.1)
}

fn any_compatible(given: &str, allowed: &[&str]) -> bool {
    let Some(given) = essence(given) else {
        return false;
    };
    allowed
        .iter()
        .filter_map(|a| essence(a))
        .any(|a| compatible(&a, &given))
}

/// 406 unless the `Content-Type` of a create or update is one the kind takes.
fn check_content_type(kind: Kind, headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut allowed: Vec<&str> = item_types(kind).to_vec();
    if writes_take_plain_json(kind) {
        allowed.push("application/json");
    }
    if any_compatible(given, &allowed) {
        Ok(())
    } else {
        Err(ApiError::new(
            406,
            format!("media type {given:?} is not acceptable for a {kind}"),
        ))
    }
}

/// 406 if an `Accept` header is present and accepts none of the kind's types. A missing
/// `Accept` is taken as `*/*`.
fn check_accept(kind: Kind, collection: bool, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let mut allowed: Vec<String> = if collection {
        item_types(kind)
            .iter()
            .map(|t| t.replacen("midonet.", "midonet.collection.", 1))
            .collect()
    } else {
        item_types(kind).iter().map(|t| t.to_string()).collect()
    };
    allowed.push("application/json".into());
    let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
    if accept.split(',').any(|a| any_compatible(a, &allowed)) {
        Ok(())
    } else {
        Err(ApiError::new(
            406,
            format!("cannot answer a {kind} as {accept:?}"),
        ))
    }
}

// --- The handler ------------------------------------------------------------------------

/// Serves every request that is not for the admin API.
pub(crate) async fn handle(
    State(sim): State<Arc<SimState>>,
    ConnectInfo(conn): ConnectInfo<ConnInfo>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(rest) = uri
        .path()
        .strip_prefix(API_PREFIX)
        .filter(|r| r.is_empty() || r.starts_with('/'))
    else {
        return error_response(&ApiError::not_found("not a MidoNet API path"));
    };
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let endpoint = Endpoint::parse(&segments);
    let label = match &endpoint {
        Some(Endpoint::Root) => "Application",
        Some(e) => e.kind().map_or("login", Kind::name),
        None => "unknown",
    };
    let is_login = endpoint == Some(Endpoint::Login);
    sim.counter.request(label, method.as_str(), is_login);

    let latency = sim.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match sim.faults.decide(method.as_str()) {
        Verdict::Pass => {}
        Verdict::Drop => {
            sim.counter.fault();
            conn.kill();
            // Never written: the connection fails first.
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
        Verdict::Fail(status) => {
            sim.counter.fault();
            let err = ApiError::new(status, "fault injected by the simulator");
            sim.counter.answered(status);
            return error_response(&err);
        }
    }

    let response = match serve(&sim, endpoint, &method, &uri, &headers, &body) {
        Ok(response) => response,
        Err(err) => error_response(&err),
    };
    sim.counter.answered(response.status().as_u16());
    response
}

fn serve(
    sim: &SimState,
    endpoint: Option<Endpoint>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    if endpoint == Some(Endpoint::Login) {
        if !Endpoint::Login.methods().contains(method) {
            return Err(method_not_allowed());
        }
        let login = sim.auth.login(headers)?;
        let mut response = json_response(
            StatusCode::OK,
            TOKEN_MEDIA_TYPE,
            &json!({"key": login.key, "expires": login.expires}),
        );
        let cookie = format!("sessionId={}; Expires={}", login.key, login.expires);
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
        return Ok(response);
    }
    sim.auth.check(headers)?;
    let endpoint = endpoint.ok_or_else(|| ApiError::not_found("no such MidoNet API path"))?;
    if !endpoint.methods().contains(method) {
        return Err(method_not_allowed());
    }
    if endpoint == Endpoint::Root {
        return Ok(json_response(
            StatusCode::OK,
            APPLICATION_MEDIA_TYPE,
            &json!({"version": "v5", "uri": format!("{API_PREFIX}/")}),
        ));
    }
    let kind = endpoint
        .kind()
        .ok_or_else(|| ApiError::not_found("no such MidoNet API path"))?;
    let writes = *method == Method::POST || *method == Method::PUT;
    let input = if writes {
        check_content_type(kind, headers)?;
        Some(
            serde_json::from_slice::<Value>(body)
                .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?,
        )
    } else {
        if *method == Method::GET {
            check_accept(kind, endpoint.is_collection(), headers)?;
        }
        None
    };
    let tenant = tenant_query(uri);
    let outcome = {
        let mut store = crate::lock(&sim.store);
        dispatch(&mut store, endpoint, method, tenant.as_deref(), input)
    };
    let reply = outcome?;
    if *method != Method::GET {
        sim.mark_dirty();
    }
    Ok(match reply {
        Reply::Created(path) => {
            let mut response = StatusCode::CREATED.into_response();
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost");
            if let Ok(location) = HeaderValue::from_str(&format!("http://{host}{API_PREFIX}{path}"))
            {
                response.headers_mut().insert(header::LOCATION, location);
            }
            response
        }
        Reply::NoContent => StatusCode::NO_CONTENT.into_response(),
        Reply::Json(media, value) => json_response(StatusCode::OK, media, &value),
    })
}

/// Runs the store operation of an endpoint and method (already checked to be allowed).
fn dispatch(
    s: &mut Store,
    endpoint: Endpoint,
    method: &Method,
    tenant: Option<&str>,
    input: Option<Value>,
) -> Outcome {
    use Endpoint as E;
    let body = || input.clone().unwrap_or(Value::Null);
    match (endpoint, method.as_str()) {
        (E::TunnelZones, "GET") => s.list_tunnel_zones(),
        (E::TunnelZones, "POST") => s.create_tunnel_zone(body()),
        (E::TunnelZone(id), "GET") => s.get_tunnel_zone(id),
        (E::TunnelZone(id), "PUT") => s.update_tunnel_zone(id, body()),
        (E::TunnelZone(id), "DELETE") => s.delete_tunnel_zone(id),
        (E::TunnelZoneHosts(tz), "GET") => s.list_tunnel_zone_hosts(tz),
        (E::TunnelZoneHosts(tz), "POST") => s.create_tunnel_zone_host(tz, body()),
        (E::TunnelZoneHost(tz, h), "GET") => s.get_tunnel_zone_host(tz, h),
        (E::TunnelZoneHost(tz, h), "DELETE") => s.delete_tunnel_zone_host(tz, h),
        (E::Hosts, "GET") => s.list_hosts(),
        (E::Host(h), "GET") => s.get_host(h),
        (E::HostPorts(h), "GET") => s.list_host_ports(h),
        (E::HostPorts(h), "POST") => s.create_host_port(h, body()),
        (E::HostPort(h, p), "GET") => s.get_host_port(h, p),
        (E::HostPort(h, p), "DELETE") => s.delete_host_port(h, p),
        (E::Bridges, "GET") => s.list_bridges(tenant),
        (E::Bridges, "POST") => s.create_bridge(body()),
        (E::Bridge(id), "GET") => s.get_bridge(id),
        (E::Bridge(id), "PUT") => s.update_bridge(id, body()),
        (E::Bridge(id), "DELETE") => s.delete_bridge(id),
        (E::BridgePorts(b), "GET") => s.list_device_ports(Device::Bridge, b),
        (E::BridgePorts(b), "POST") => s.create_port(Device::Bridge, b, body()),
        (E::MacTable(b, vlan), "GET") => s.list_mac_table(b, vlan),
        (E::MacTable(b, vlan), "POST") => s.create_mac_entry(b, vlan, body()),
        (E::MacEntry(b, vlan, e), "GET") => s.get_mac_entry(b, vlan, &e),
        (E::MacEntry(b, vlan, e), "DELETE") => s.delete_mac_entry(b, vlan, &e),
        (E::ArpTable(b), "GET") => s.list_arp_table(b),
        (E::ArpTable(b), "POST") => s.create_arp_entry(b, body()),
        (E::ArpEntry(b, e), "GET") => s.get_arp_entry(b, &e),
        (E::ArpEntry(b, e), "DELETE") => s.delete_arp_entry(b, &e),
        (E::Routers, "GET") => s.list_routers(tenant),
        (E::Routers, "POST") => s.create_router(body()),
        (E::Router(id), "GET") => s.get_router(id),
        (E::Router(id), "PUT") => s.update_router(id, body()),
        (E::Router(id), "DELETE") => s.delete_router(id),
        (E::RouterPorts(r), "GET") => s.list_device_ports(Device::Router, r),
        (E::RouterPorts(r), "POST") => s.create_port(Device::Router, r, body()),
        (E::RouterRoutes(r), "GET") => s.list_routes(r),
        (E::RouterRoutes(r), "POST") => s.create_route(r, body()),
        (E::Ports, "GET") => s.list_ports(),
        (E::Port(id), "GET") => s.get_port(id),
        (E::Port(id), "PUT") => s.update_port(id, body()),
        (E::Port(id), "DELETE") => s.delete_port(id),
        (E::PortLink(p), "POST") => s.link_ports(p, body()),
        (E::PortLink(p), "DELETE") => s.unlink_port(p),
        (E::Route(id), "GET") => s.get_route(id),
        (E::Route(id), "DELETE") => s.delete_route(id),
        (E::Chains, "GET") => s.list_chains(tenant),
        (E::Chains, "POST") => s.create_chain(body()),
        (E::Chain(id), "GET") => s.get_chain(id),
        (E::Chain(id), "DELETE") => s.delete_chain(id),
        (E::ChainRules(c), "GET") => s.list_rules(c),
        (E::ChainRules(c), "POST") => s.create_rule(c, body()),
        (E::Rule(id), "GET") => s.get_rule(id),
        (E::Rule(id), "DELETE") => s.delete_rule(id),
        (E::PortGroups, "GET") => s.list_port_groups(tenant),
        (E::PortGroups, "POST") => s.create_port_group(body()),
        (E::PortGroup(id), "GET") => s.get_port_group(id),
        (E::PortGroup(id), "PUT") => s.update_port_group(id, body()),
        (E::PortGroup(id), "DELETE") => s.delete_port_group(id),
        (E::PortGroupPorts(g), "GET") => s.list_port_group_ports(g),
        (E::PortGroupPorts(g), "POST") => s.create_port_group_port(g, body()),
        (E::PortGroupPort(g, p), "GET") => s.get_port_group_port(g, p),
        (E::PortGroupPort(g, p), "DELETE") => s.delete_port_group_port(g, p),
        (E::IpAddrGroups, "GET") => s.list_ip_addr_groups(),
        (E::IpAddrGroups, "POST") => s.create_ip_addr_group(body()),
        (E::IpAddrGroup(id), "GET") => s.get_ip_addr_group(id),
        (E::IpAddrGroup(id), "DELETE") => s.delete_ip_addr_group(id),
        (E::IpAddrGroupAddrs(g), "GET") => s.list_ip_addr_group_addrs(g),
        (E::IpAddrGroupAddrs(g), "POST") => s.create_ip_addr_group_addr(g, body()),
        (E::IpAddrGroupAddr(g, a), "GET") => s.get_ip_addr_group_addr(g, &a),
        (E::IpAddrGroupAddr(g, a), "DELETE") => s.delete_ip_addr_group_addr(g, &a),
        (endpoint, method) => dispatch_l4lb(s, endpoint, method, input),
    }
}

/// The load-balancer endpoints of [`dispatch`].
fn dispatch_l4lb(s: &mut Store, endpoint: Endpoint, method: &str, input: Option<Value>) -> Outcome {
    use Endpoint as E;
    let body = || input.clone().unwrap_or(Value::Null);
    let (m, v) = (Child::Member, Child::Vip);
    match (endpoint, method) {
        (E::LoadBalancers, "GET") => s.list_load_balancers(),
        (E::LoadBalancers, "POST") => s.create_load_balancer(body()),
        (E::LoadBalancer(id), "GET") => s.get_load_balancer(id),
        (E::LoadBalancer(id), "PUT") => s.update_load_balancer(id, body()),
        (E::LoadBalancer(id), "DELETE") => s.delete_load_balancer(id),
        (E::LoadBalancerPools(lb), "GET") => s.list_pools(Some(lb)),
        (E::LoadBalancerPools(lb), "POST") => s.create_pool(Some(lb), body()),
        (E::LoadBalancerVips(lb), "GET") => s.list_load_balancer_vips(lb),
        (E::Pools, "GET") => s.list_pools(None),
        (E::Pools, "POST") => s.create_pool(None, body()),
        (E::Pool(id), "GET") => s.get_pool(id),
        (E::Pool(id), "PUT") => s.update_pool(id, body()),
        (E::Pool(id), "DELETE") => s.delete_pool(id),
        (E::PoolPoolMembers(p), "GET") => s.list_children(m, Some(p)),
        (E::PoolPoolMembers(p), "POST") => s.create_child(m, Some(p), body()),
        (E::PoolVips(p), "GET") => s.list_children(v, Some(p)),
        (E::PoolVips(p), "POST") => s.create_child(v, Some(p), body()),
        (E::PoolMembers, "GET") => s.list_children(m, None),
        (E::PoolMembers, "POST") => s.create_child(m, None, body()),
        (E::PoolMember(id), "GET") => s.get_child(m, id),
        (E::PoolMember(id), "PUT") => s.update_child(m, id, body()),
        (E::PoolMember(id), "DELETE") => s.delete_child(m, id),
        (E::Vips, "GET") => s.list_children(v, None),
        (E::Vips, "POST") => s.create_child(v, None, body()),
        (E::Vip(id), "GET") => s.get_child(v, id),
        (E::Vip(id), "PUT") => s.update_child(v, id, body()),
        (E::Vip(id), "DELETE") => s.delete_child(v, id),
        _ => Err(method_not_allowed()),
    }
}

fn method_not_allowed() -> ApiError {
    ApiError::new(405, "method not allowed on this path")
}

/// The `tenant_id` query parameter of collection GETs.
fn tenant_query(uri: &Uri) -> Option<String> {
    let query = uri.query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "tenant_id")
        .map(|(_, v)| v.into_owned())
}

fn json_response(status: StatusCode, media: &str, value: &Value) -> Response {
    let mut response = (status, value.to_string()).into_response();
    if let Ok(ct) = HeaderValue::from_str(media) {
        response.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    response
}

/// A MidoNet-style error: `{message, code}` plus `violations` for invalid bodies.
pub(crate) fn error_response(err: &ApiError) -> Response {
    let status = StatusCode::from_u16(err.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = json!({"message": err.message, "code": err.status});
    if !err.violations.is_empty() {
        body["violations"] = err
            .violations
            .iter()
            .map(|(property, message)| json!({"property": property, "message": message}))
            .collect();
    }
    let mut response = json_response(status, ERROR_MEDIA_TYPE, &body);
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"midonet-api\""),
        );
    }
    response
}

/// An empty body with a status, for admin answers.
pub(crate) fn empty(status: StatusCode) -> Response {
    (status, Body::empty()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_to_endpoints() {
        let b = "11111111-1111-4111-8111-111111111111";
        let bu = id(b).unwrap();
        assert_eq!(Endpoint::parse(&[]), Some(Endpoint::Root));
        assert_eq!(Endpoint::parse(&["bridges", b]), Some(Endpoint::Bridge(bu)));
        assert_eq!(
            Endpoint::parse(&["bridges", b, "vlans", "7", "mac_table"]),
            Some(Endpoint::MacTable(bu, Some(7)))
        );
        assert_eq!(Endpoint::parse(&["bridges", "nope"]), None);
        assert_eq!(
            Endpoint::parse(&["bridges", b, "vlans", "x", "mac_table"]),
            None
        );
        assert_eq!(Endpoint::parse(&["vteps"]), None);
    }

    #[test]
    fn methods_follow_midonet() {
        let u = id("11111111-1111-4111-8111-111111111111").unwrap();
        let allows = |e: Endpoint, m: Method| e.methods().contains(&m);
        // Updated in place: bridges, routers, ports, tunnel zones, port groups.
        for item in [
            Endpoint::Bridge(u),
            Endpoint::Router(u),
            Endpoint::Port(u),
            Endpoint::TunnelZone(u),
            Endpoint::PortGroup(u),
        ] {
            assert!(allows(item.clone(), Method::PUT), "{item:?}");
            assert!(allows(item, Method::DELETE));
        }
        // Replaced, never updated.
        for item in [
            Endpoint::Chain(u),
            Endpoint::Rule(u),
            Endpoint::Route(u),
            Endpoint::HostPort(u, u),
            Endpoint::IpAddrGroup(u),
        ] {
            assert!(!allows(item.clone(), Method::PUT), "{item:?}");
            assert!(allows(item.clone(), Method::GET), "{item:?}");
            assert!(allows(item, Method::DELETE));
        }
        assert!(allows(Endpoint::Bridges, Method::POST));
        assert!(allows(Endpoint::ChainRules(u), Method::POST));
        assert!(!allows(Endpoint::Bridges, Method::DELETE));
        // Hosts are midolman's, the port list is a view: read-only.
        assert!(!allows(Endpoint::Hosts, Method::POST));
        assert!(!allows(Endpoint::Host(u), Method::DELETE));
        assert!(!allows(Endpoint::Ports, Method::POST));
        assert!(!allows(Endpoint::PortLink(u), Method::GET));
        assert!(allows(Endpoint::PortLink(u), Method::POST));
        assert!(allows(Endpoint::Login, Method::POST));
        assert!(!allows(Endpoint::Root, Method::POST));
        // Load balancing: every item takes PUT (a load balancer's and a member's are
        // partial updates); a load balancer's VIP list is read-only.
        for item in [
            Endpoint::LoadBalancer(u),
            Endpoint::Pool(u),
            Endpoint::PoolMember(u),
            Endpoint::Vip(u),
        ] {
            assert!(allows(item.clone(), Method::PUT), "{item:?}");
            assert!(allows(item, Method::DELETE));
        }
        assert!(!allows(Endpoint::LoadBalancerVips(u), Method::POST));
        assert!(allows(Endpoint::Vips, Method::POST));
        assert!(allows(Endpoint::PoolPoolMembers(u), Method::POST));
        let s = u.to_string();
        assert_eq!(
            Endpoint::parse(&["pools", &s, "pool_members"]),
            Some(Endpoint::PoolPoolMembers(u))
        );
        assert_eq!(Endpoint::parse(&["vips", &s]), Some(Endpoint::Vip(u)));
    }

    #[test]
    fn media_type_compatibility() {
        let bridge = item_types(Kind::Bridge);
        assert!(any_compatible(
            "application/vnd.org.midonet.Bridge-v4+json",
            bridge
        ));
        assert!(any_compatible(
            "Application/VND.org.midonet.bridge-v5+json; charset=utf-8",
            bridge
        ));
        assert!(any_compatible("*/*", bridge));
        assert!(!any_compatible(
            "application/vnd.org.midonet.Router-v3+json",
            bridge
        ));
        assert!(!any_compatible("text/plain", bridge));
        assert!(!any_compatible("", bridge));
        assert!(!any_compatible("garbage", bridge));
        // The original controller's spelling of the MAC media type.
        assert!(any_compatible(
            Kind::MacPort.media_type(),
            item_types(Kind::MacPort)
        ));
    }
}
