//! The high-level MidoNet API operations: apply, delete, existence checks and lists.

use std::sync::Arc;

use midonet_translators::model::{
    BackendObject, Bridge, Chain, Host, HostInterfacePort, Ipv4MacPair, Kind, MacPort, Port,
    PortLink, Resource, Route, Router, Rule, TunnelZone,
};
use midonet_translators::model::{IpAddrGroup, IpAddrGroupAddr, PortGroup, PortGroupPort};
use midonet_translators::model::{LoadBalancer, Pool, PoolMember, Vip};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use uuid::Uuid;

use super::error::BackendError;
use super::http::{Call, Reachability, Reply, Transport};
use super::metrics::ClientMetrics;
use super::BackendConfig;

/// Client of the MidoNet REST API. Cheap to clone: clones share the connection pool and
/// the session.
#[derive(Clone)]
pub struct BackendClient {
    transport: Arc<Transport>,
}

impl std::fmt::Debug for BackendClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendClient").finish_non_exhaustive()
    }
}

impl BackendClient {
    /// Builds the client and registers its metrics in `registry`. Does not contact the API.
    pub fn new(cfg: BackendConfig, registry: &prometheus::Registry) -> Result<Self, BackendError> {
        let metrics =
            ClientMetrics::register(registry).map_err(|e| BackendError::Metrics(e.to_string()))?;
        Ok(BackendClient {
            transport: Arc::new(Transport::new(cfg, metrics)?),
        })
    }

    /// Logs in now (`POST /login`). Optional: calls log in by themselves on 401.
    pub async fn login(&self) -> Result<(), BackendError> {
        self.transport.login().await
    }

    /// Whether the API answered the last request made to it.
    pub fn reachability(&self) -> Reachability {
        self.transport.reachability()
    }

    /// Asks the API once whether it answers (`GET` of its root, no retry, no credentials).
    pub async fn probe(&self) -> Result<(), BackendError> {
        self.transport.probe().await
    }

    /// True once a login succeeded.
    pub fn is_logged_in(&self) -> bool {
        self.transport.is_logged_in()
    }

    /// Creates the resource, or makes sure it exists.
    ///
    /// POST; on 409 an updatable kind is PUT (a 409 on the PUT of a TunnelZone is a name
    /// clash MidoNet always reports, and counts as done), any other kind is looked up and
    /// must exist. A port binding (HostInterfacePort) answered 409 that is not there is
    /// [`BackendError::BindingRefused`] (typically: the host is in no tunnel zone). 404 or
    /// 400 on the POST means a referent is not there yet
    /// ([`BackendError::is_referent_missing`]).
    pub async fn apply(&self, r: &Resource) -> Result<(), BackendError> {
        let kind = r.kind();
        let body = serde_json::to_vec(&r.body())
            .map_err(|e| BackendError::Config(format!("cannot serialise a {kind} body: {e}")))?;
        let post_path = r.post_path();
        // MidoNet answers 500 to a duplicate MAC or ARP entry (MNA-1315): not transient.
        let duplicate_is_500 = matches!(kind, Kind::MacPort | Kind::Ipv4MacPair);
        let reply = self
            .transport
            .call(&Call {
                method: Method::POST,
                path: &post_path,
                resource: kind.media_type(),
                content_type: Some(kind.media_type()),
                accept: None,
                body: Some(body.clone()),
                retry_internal_error: !duplicate_is_500,
            })
            .await?;
        match reply.status {
            s if s.is_success() => Ok(()),
            StatusCode::CONFLICT => self.settle_conflict(r, body, &reply).await,
            StatusCode::INTERNAL_SERVER_ERROR if duplicate_is_500 => {
                self.settle_conflict(r, body, &reply).await
            }
            StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST => Err(BackendError::ReferentMissing {
                kind,
                method: "POST".into(),
                path: post_path,
                status: reply.status.as_u16(),
                body: self.transport.scrub(&reply.body),
            }),
            _ => Err(self.unexpected("POST", &post_path, &reply)),
        }
    }

    /// After a POST conflict (`conflict` is its answer): update in place, or confirm the
    /// resource exists.
    async fn settle_conflict(
        &self,
        r: &Resource,
        body: Vec<u8>,
        conflict: &Reply,
    ) -> Result<(), BackendError> {
        let kind = r.kind();
        let item_path = r.item_path();
        if kind.updatable() {
            let reply = self
                .transport
                .call(&Call {
                    method: Method::PUT,
                    path: &item_path,
                    resource: kind.media_type(),
                    content_type: Some(kind.media_type()),
                    accept: None,
                    body: Some(body),
                    retry_internal_error: true,
                })
                .await?;
            return match reply.status {
                s if s.is_success() => Ok(()),
                // MidoNet checks tunnel zone names against every zone, the updated one
                // included, so a PUT keeping the name always conflicts (MNA-1293).
                StatusCode::CONFLICT if kind == Kind::TunnelZone => Ok(()),
                // Deleted meanwhile, or a referenced chain is not there yet.
                StatusCode::NOT_FOUND => Err(BackendError::ReferentMissing {
                    kind,
                    method: "PUT".into(),
                    path: item_path,
                    status: 404,
                    body: self.transport.scrub(&reply.body),
                }),
                _ => Err(self.unexpected("PUT", &item_path, &reply)),
            };
        }
        if let Resource::PortLink(link) = r {
            return self.confirm_link(link).await;
        }
        if self.exists(kind, &item_path).await? {
            return Ok(());
        }
        if let Resource::HostInterfacePort(binding) = r {
            // Not a resource that exists already: MidoNet refused the binding itself.
            return Err(BackendError::BindingRefused {
                host: binding.parent,
                port: binding.port_id,
                interface: binding.interface_name.clone().unwrap_or_default(),
                body: self.transport.scrub(&conflict.body),
            });
        }
        Err(BackendError::VanishedAfterConflict {
            kind,
            path: item_path,
        })
    }

    /// MidoNet has no GET for a link: read the port and compare its peer.
    async fn confirm_link(&self, link: &PortLink) -> Result<(), BackendError> {
        let port_path = format!("/ports/{}", link.parent);
        let Some(port) = self.get(Kind::Port, &port_path).await? else {
            return Err(BackendError::VanishedAfterConflict {
                kind: Kind::PortLink,
                path: link.item_path(),
            });
        };
        match peer_of(&port) {
            Some(peer) if peer == link.peer_id => Ok(()),
            Some(actual) => Err(BackendError::LinkConflict {
                port: link.parent,
                wanted: link.peer_id,
                actual,
            }),
            // Not linked: the 409 came from the peer's side being linked elsewhere.
            None => Err(BackendError::VanishedAfterConflict {
                kind: Kind::PortLink,
                path: link.item_path(),
            }),
        }
    }

    /// Deletes the resource at its item path; a missing resource counts as deleted.
    pub async fn delete(&self, r: &Resource) -> Result<(), BackendError> {
        self.delete_path(r.kind(), &r.item_path()).await
    }

    /// Deletes whatever is at `item_path` (a path relative to the API base, as
    /// [`Resource::item_path`] gives). 404 counts as done.
    pub async fn delete_path(&self, kind: Kind, item_path: &str) -> Result<(), BackendError> {
        let reply = self
            .transport
            .call(&Call {
                method: Method::DELETE,
                path: item_path,
                resource: kind.media_type(),
                content_type: None,
                accept: None,
                body: None,
                retry_internal_error: true,
            })
            .await?;
        match reply.status {
            s if s.is_success() || s == StatusCode::NOT_FOUND => Ok(()),
            _ => Err(self.unexpected("DELETE", item_path, &reply)),
        }
    }

    /// True if something exists at `item_path`. For a PortLink (`/ports/{id}/link`, which
    /// MidoNet cannot GET) it is true if the port exists and is linked to some peer.
    pub async fn exists(&self, kind: Kind, item_path: &str) -> Result<bool, BackendError> {
        if kind == Kind::PortLink {
            let port_path = item_path.strip_suffix("/link").unwrap_or(item_path);
            let port = self.get(Kind::Port, port_path).await?;
            return Ok(port.as_ref().and_then(peer_of).is_some());
        }
        Ok(self.get(kind, item_path).await?.is_some())
    }

    /// The JSON of the resource at `item_path`, or `None` if it does not exist.
    pub async fn get(&self, kind: Kind, item_path: &str) -> Result<Option<Value>, BackendError> {
        let reply = self
            .transport
            .call(&Call {
                method: Method::GET,
                path: item_path,
                resource: kind.media_type(),
                content_type: None,
                accept: Some(kind.media_type()),
                body: None,
                retry_internal_error: true,
            })
            .await?;
        match reply.status {
            StatusCode::NOT_FOUND => Ok(None),
            s if s.is_success() => {
                if reply.body.trim().is_empty() {
                    return Ok(Some(Value::Null));
                }
                serde_json::from_str(&reply.body)
                    .map(Some)
                    .map_err(|e| decode_error("GET", item_path, e.to_string()))
            }
            _ => Err(self.unexpected("GET", item_path, &reply)),
        }
    }

    /// The JSON items of a collection. 404 (e.g. a missing parent) is an error for which
    /// [`BackendError::is_not_found`] is true.
    pub async fn list_json(&self, kind: Kind, path: &str) -> Result<Vec<Value>, BackendError> {
        let media = kind.collection_media_type().unwrap_or("application/json");
        let reply = self
            .transport
            .call(&Call {
                method: Method::GET,
                path,
                resource: media,
                content_type: None,
                accept: Some(media),
                body: None,
                retry_internal_error: true,
            })
            .await?;
        if !reply.status.is_success() {
            return Err(self.unexpected("GET", path, &reply));
        }
        match serde_json::from_str(&reply.body) {
            Ok(Value::Array(items)) => Ok(items),
            Ok(_) => Err(decode_error("GET", path, "expected a JSON array".into())),
            Err(e) => Err(decode_error("GET", path, e.to_string())),
        }
    }

    async fn list<T: BackendObject>(
        &self,
        path: &str,
        parent: Option<Uuid>,
    ) -> Result<Vec<T>, BackendError> {
        self.list_json(T::KIND, path)
            .await?
            .into_iter()
            .map(|item| {
                T::from_body(parent, item).map_err(|e| decode_error("GET", path, e.to_string()))
            })
            .collect()
    }

    /// `GET /hosts`: the hosts MidoNet knows, to resolve node names to host ids.
    pub async fn list_hosts(&self) -> Result<Vec<Host>, BackendError> {
        self.list("/hosts", None).await
    }

    /// `GET /tunnel_zones`.
    pub async fn list_tunnel_zones(&self) -> Result<Vec<TunnelZone>, BackendError> {
        self.list("/tunnel_zones", None).await
    }

    /// `GET /bridges[?tenant_id=…]`.
    pub async fn list_bridges(&self, tenant_id: Option<&str>) -> Result<Vec<Bridge>, BackendError> {
        self.list(&with_tenant("/bridges", tenant_id), None).await
    }

    /// `GET /routers[?tenant_id=…]`.
    pub async fn list_routers(&self, tenant_id: Option<&str>) -> Result<Vec<Router>, BackendError> {
        self.list(&with_tenant("/routers", tenant_id), None).await
    }

    /// `GET /chains[?tenant_id=…]`.
    pub async fn list_chains(&self, tenant_id: Option<&str>) -> Result<Vec<Chain>, BackendError> {
        self.list(&with_tenant("/chains", tenant_id), None).await
    }

    /// `GET /chains/{id}/rules`: the chain's rules in evaluation order, each with its
    /// current 1-based `position`.
    pub async fn list_rules(&self, chain_id: Uuid) -> Result<Vec<Rule>, BackendError> {
        self.list(&format!("/chains/{chain_id}/rules"), Some(chain_id))
            .await
    }

    /// `GET /bridges/{id}/ports`.
    pub async fn list_bridge_ports(&self, bridge_id: Uuid) -> Result<Vec<Port>, BackendError> {
        self.list(&format!("/bridges/{bridge_id}/ports"), Some(bridge_id))
            .await
    }

    /// `GET /routers/{id}/ports`.
    pub async fn list_router_ports(&self, router_id: Uuid) -> Result<Vec<Port>, BackendError> {
        self.list(&format!("/routers/{router_id}/ports"), Some(router_id))
            .await
    }

    /// `GET /routers/{id}/routes`. Includes the `Local` routes MidoNet creates by itself
    /// for every router port address.
    pub async fn list_routes(&self, router_id: Uuid) -> Result<Vec<Route>, BackendError> {
        self.list(&format!("/routers/{router_id}/routes"), Some(router_id))
            .await
    }

    /// `GET /bridges/{id}/mac_table`: the bridge's static MAC entries (untagged VLAN).
    pub async fn list_mac_table(&self, bridge_id: Uuid) -> Result<Vec<MacPort>, BackendError> {
        self.list(&format!("/bridges/{bridge_id}/mac_table"), Some(bridge_id))
            .await
    }

    /// `GET /bridges/{id}/arp_table`: the bridge's static ARP entries.
    pub async fn list_arp_table(&self, bridge_id: Uuid) -> Result<Vec<Ipv4MacPair>, BackendError> {
        self.list(&format!("/bridges/{bridge_id}/arp_table"), Some(bridge_id))
            .await
    }

    /// `GET /port_groups`: every port group (NetworkPolicy source sets).
    pub async fn list_port_groups(&self) -> Result<Vec<PortGroup>, BackendError> {
        self.list("/port_groups", None).await
    }

    /// `GET /port_groups/{id}/ports`: the group's member ports.
    pub async fn list_port_group_ports(
        &self,
        group_id: Uuid,
    ) -> Result<Vec<PortGroupPort>, BackendError> {
        self.list(&format!("/port_groups/{group_id}/ports"), Some(group_id))
            .await
    }

    /// `GET /ip_addr_groups`: every IP address group (NetworkPolicy address sets).
    pub async fn list_ip_addr_groups(&self) -> Result<Vec<IpAddrGroup>, BackendError> {
        self.list("/ip_addr_groups", None).await
    }

    /// `GET /ip_addr_groups/{id}/ip_addrs`: the group's addresses.
    pub async fn list_ip_addr_group_addrs(
        &self,
        group_id: Uuid,
    ) -> Result<Vec<IpAddrGroupAddr>, BackendError> {
        self.list(
            &format!("/ip_addr_groups/{group_id}/ip_addrs"),
            Some(group_id),
        )
        .await
    }

    /// `GET /load_balancers`: every L4 load balancer (they carry no tenant: a router of
    /// ours names its own by `loadBalancerId`).
    pub async fn list_load_balancers(&self) -> Result<Vec<LoadBalancer>, BackendError> {
        self.list("/load_balancers", None).await
    }

    /// `GET /load_balancers/{id}/pools`.
    pub async fn list_load_balancer_pools(&self, lb: Uuid) -> Result<Vec<Pool>, BackendError> {
        self.list(&format!("/load_balancers/{lb}/pools"), Some(lb))
            .await
    }

    /// `GET /pools/{id}/pool_members`.
    pub async fn list_pool_members(&self, pool: Uuid) -> Result<Vec<PoolMember>, BackendError> {
        self.list(&format!("/pools/{pool}/pool_members"), Some(pool))
            .await
    }

    /// `GET /pools/{id}/vips`.
    pub async fn list_pool_vips(&self, pool: Uuid) -> Result<Vec<Vip>, BackendError> {
        self.list(&format!("/pools/{pool}/vips"), Some(pool)).await
    }

    /// `GET /hosts/{id}/ports`: the host's interface-port bindings.
    pub async fn list_host_ports(
        &self,
        host_id: Uuid,
    ) -> Result<Vec<HostInterfacePort>, BackendError> {
        self.list(&format!("/hosts/{host_id}/ports"), Some(host_id))
            .await
    }

    fn unexpected(&self, method: &str, path: &str, reply: &Reply) -> BackendError {
        BackendError::Status {
            method: method.to_string(),
            path: path.to_string(),
            status: reply.status.as_u16(),
            body: self.transport.scrub(&reply.body),
        }
    }
}

fn decode_error(method: &str, path: &str, message: String) -> BackendError {
    BackendError::Decode {
        method: method.to_string(),
        path: path.to_string(),
        message,
    }
}

/// The `peerId` of a port's JSON.
fn peer_of(port: &Value) -> Option<Uuid> {
    port.get("peerId")
        .and_then(Value::as_str)
        .and_then(|s| Uuid::parse_str(s).ok())
}

fn with_tenant(path: &str, tenant_id: Option<&str>) -> String {
    match tenant_id {
        None => path.to_string(),
        Some(tenant) => {
            let encoded: String = url::form_urlencoded::byte_serialize(tenant.as_bytes()).collect();
            format!("{path}?tenant_id={encoded}")
        }
    }
}
