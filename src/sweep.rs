//! The orphan sweep: backend resources of our tenant that no Translation claims.
//!
//! A resource is *claimed* when some Translation (Terminating ones included) names its
//! item path, either in its desired resources or in its status' pushed record. The sweep
//! lists the tenant's bridges, routers and chains, the NetworkPolicy port groups and IP
//! address groups (known by their name, [`GROUP_NAME_PREFIX`]: MidoNet gives an IP address
//! group no tenant), the load balancer each of the tenant's routers names (a load balancer
//! has no tenant), and under each claimed one its ports, routes (not the `Local` routes MidoNet makes by
//! itself), rules, member ports or addresses, pools with their members and VIPs; every
//! unclaimed item is an orphan. A load balancer no router of ours names is not found. Children
//! of an orphan parent are not reported: deleting the parent deletes them.
//!
//! The backend is listed *before* the Translations, so a resource pushed for a Translation
//! created during the sweep is never taken for an orphan. The periodic loop deletes (when
//! enabled) only orphans found by two consecutive sweeps.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::time::Duration;

use kube::api::{Api, ListParams};
use midonet_translators::model::{Bridge, Chain, Kind, Resource, RouteType, Router};
use midonet_translators::policy::GROUP_NAME_PREFIX;
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use uuid::Uuid;

use crate::backend::{BackendClient, BackendError};
use crate::crd::Translation;

/// The kinds the sweep looks at, in report order.
pub const SWEPT_KINDS: [Kind; 14] = [
    Kind::Bridge,
    Kind::Router,
    Kind::Chain,
    Kind::PortGroup,
    Kind::IpAddrGroup,
    Kind::LoadBalancer,
    Kind::Port,
    Kind::Route,
    Kind::Rule,
    Kind::PortGroupPort,
    Kind::IpAddrGroupAddr,
    Kind::Pool,
    Kind::PoolMember,
    Kind::Vip,
];

/// A backend resource of our tenant that no Translation claims.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Orphan {
    pub kind: Kind,
    /// Item path relative to the API base, e.g. `/bridges/{id}`: what DELETE takes.
    pub path: String,
    /// Human-readable context (e.g. which bridge a port is on).
    pub description: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("cannot list Translations: {0}")]
    Kube(#[from] kube::Error),
    #[error("MidoNet API: {0}")]
    Backend(#[from] BackendError),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("{0}")]
    Setup(String),
}

/// What the Translations claim: item paths, plus bare ids of entries that do not parse
/// (claimed under any kind, to stay on the safe side).
#[derive(Debug, Default)]
struct Claims {
    paths: HashSet<String>,
    ids: HashSet<Uuid>,
}

impl Claims {
    fn from_translations(trs: &[Translation]) -> Claims {
        let mut claims = Claims::default();
        for tr in trs {
            for entry in tr.desired_resources() {
                match Resource::from_entry(entry) {
                    Ok(r) => {
                        claims.paths.insert(r.item_path());
                    }
                    Err(err) => {
                        let id = serde_json::from_str::<serde_json::Value>(&entry.body)
                            .ok()
                            .and_then(|b| {
                                b.get("id")?.as_str().and_then(|s| s.parse::<Uuid>().ok())
                            });
                        tracing::debug!(
                            translation = tr.metadata.name.as_deref().unwrap_or(""),
                            namespace = tr.metadata.namespace.as_deref().unwrap_or(""),
                            error = %err,
                            ?id,
                            "sweep: unparseable Translation entry; claiming its id"
                        );
                        claims.ids.extend(id);
                    }
                }
            }
            if let Some(status) = &tr.status {
                claims
                    .paths
                    .extend(status.pushed.iter().map(|p| p.path.clone()));
            }
        }
        claims
    }

    /// `id` is the resource's own ID; members of groups have none.
    fn claims(&self, path: &str, id: Option<Uuid>) -> bool {
        self.paths.contains(path) || id.is_some_and(|id| self.ids.contains(&id))
    }
}

/// A listed backend resource.
struct Found {
    kind: Kind,
    id: Option<Uuid>,
    path: String,
    description: String,
    /// Item path of the parent, for a child.
    parent: Option<String>,
}

/// The tenant's top-level devices and chains.
#[derive(Clone, Debug, Default)]
pub struct TenantDevices {
    pub bridges: Vec<Bridge>,
    pub routers: Vec<Router>,
    pub chains: Vec<Chain>,
}

/// Lists the bridges, routers and chains of `tenant`. The `tenant_id` query narrows the
/// listing and the filter on each item's `tenantId` makes sure of it (an API that ignores
/// the query must not hand us another tenant's devices). Shared by the sweep and the
/// backend reader of `trace` and `check`.
pub async fn list_tenant_devices(
    backend: &BackendClient,
    tenant: &str,
) -> Result<TenantDevices, BackendError> {
    let ours = |t: &Option<String>| t.as_deref() == Some(tenant);
    Ok(TenantDevices {
        bridges: backend
            .list_bridges(Some(tenant))
            .await?
            .into_iter()
            .filter(|b| ours(&b.tenant_id))
            .collect(),
        routers: backend
            .list_routers(Some(tenant))
            .await?
            .into_iter()
            .filter(|r| ours(&r.tenant_id))
            .collect(),
        chains: backend
            .list_chains(Some(tenant))
            .await?
            .into_iter()
            .filter(|c| ours(&c.tenant_id))
            .collect(),
    })
}

/// Lists the tenant's resources: the top-level devices and chains, and all their children.
async fn list_backend(
    backend: &BackendClient,
    tenant: &str,
) -> Result<(Vec<Found>, Vec<Found>), SweepError> {
    let parents = listed_parents(backend, tenant).await?;
    let mut children = Vec::new();
    for p in &parents {
        let Some(id) = p.id else { continue };
        match listed_children(backend, p, id).await {
            Ok(items) => children.extend(items.into_iter().map(|mut f: Found| {
                f.parent = Some(p.path.clone());
                f
            })),
            // A parent deleted since it was listed has no children left to worry about.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok((parents, children))
}

/// The tenant's top-level devices and chains, and the NetworkPolicy groups.
async fn listed_parents(backend: &BackendClient, tenant: &str) -> Result<Vec<Found>, SweepError> {
    let devices = list_tenant_devices(backend, tenant).await?;
    let mut parents = Vec::new();
    for b in devices.bridges {
        parents.push(found(Kind::Bridge, "bridges", b.id, "bridge".into()));
    }
    for r in devices.routers {
        parents.push(found(Kind::Router, "routers", r.id, "router".into()));
        // A load balancer has no tenant: the one a router of ours names is ours.
        if let Some(lb) = r.load_balancer_id {
            let what = format!("load balancer of /routers/{}", r.id);
            parents.push(found(Kind::LoadBalancer, "load_balancers", lb, what));
        }
    }
    for c in devices.chains {
        parents.push(found(Kind::Chain, "chains", c.id, "chain".into()));
    }
    for g in backend.list_port_groups().await? {
        if is_policy_group(g.name.as_deref(), g.tenant_id.as_deref(), tenant) {
            let what = format!("port group {:?}", g.name.as_deref().unwrap_or_default());
            parents.push(found(Kind::PortGroup, "port_groups", g.id, what));
        }
    }
    for g in backend.list_ip_addr_groups().await? {
        if is_policy_group(g.name.as_deref(), None, tenant) {
            let what = format!(
                "IP address group {:?}",
                g.name.as_deref().unwrap_or_default()
            );
            parents.push(found(Kind::IpAddrGroup, "ip_addr_groups", g.id, what));
        }
    }
    Ok(parents)
}

/// The children of `p` (whose ID is `id`) that the sweep looks at.
async fn listed_children(
    backend: &BackendClient,
    p: &Found,
    id: Uuid,
) -> Result<Vec<Found>, crate::backend::BackendError> {
    // A parent deleted since it was listed has no children left to worry about.
    match p.kind {
        Kind::Bridge => backend.list_bridge_ports(id).await.map(|ports| {
            ports
                .into_iter()
                .map(|x| found(Kind::Port, "ports", x.id, format!("port of {}", p.path)))
                .collect::<Vec<_>>()
        }),
        Kind::Router => {
            let ports = backend.list_router_ports(id).await;
            let routes = backend.list_routes(id).await;
            match (ports, routes) {
                (Ok(ports), Ok(routes)) => Ok(ports
                    .into_iter()
                    .map(|x| found(Kind::Port, "ports", x.id, format!("port of {}", p.path)))
                    .chain(
                        routes
                            .into_iter()
                            .filter(|r| r.route_type != Some(RouteType::Local))
                            .map(|x| {
                                found(Kind::Route, "routes", x.id, format!("route of {}", p.path))
                            }),
                    )
                    .collect()),
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        }
        Kind::PortGroup => backend.list_port_group_ports(id).await.map(|members| {
            members
                .into_iter()
                .map(|m| member(Resource::PortGroupPort(m), &p.path))
                .collect()
        }),
        Kind::IpAddrGroup => backend.list_ip_addr_group_addrs(id).await.map(|addrs| {
            addrs
                .into_iter()
                .map(|a| member(Resource::IpAddrGroupAddr(a), &p.path))
                .collect()
        }),
        Kind::LoadBalancer => load_balancer_children(backend, &p.path, id).await,
        _ => backend.list_rules(id).await.map(|rules| {
            rules
                .into_iter()
                .map(|x| found(Kind::Rule, "rules", x.id, format!("rule of {}", p.path)))
                .collect()
        }),
    }
}

/// A load balancer's pools, their members and VIPs (deleting an orphan pool takes its
/// members and VIPs, which are then reported too and deleted idempotently).
async fn load_balancer_children(
    backend: &BackendClient,
    lb_path: &str,
    id: Uuid,
) -> Result<Vec<Found>, BackendError> {
    let mut out = Vec::new();
    for pool in backend.list_load_balancer_pools(id).await? {
        let pool_path = format!("/pools/{}", pool.id);
        let what = |m: &str| format!("{m} of {pool_path}");
        // A pool deleted since it was listed has nothing left below it.
        let gone = |e: &BackendError| e.is_not_found();
        let members = match backend.list_pool_members(pool.id).await {
            Err(e) if gone(&e) => continue,
            listed => listed?.into_iter().map(|m| (Kind::PoolMember, m.id)),
        };
        let vips = match backend.list_pool_vips(pool.id).await {
            Err(e) if gone(&e) => continue,
            listed => listed?.into_iter().map(|v| (Kind::Vip, v.id)),
        };
        for (kind, child) in members.chain(vips) {
            let (collection, name) = match kind {
                Kind::Vip => ("vips", "VIP"),
                _ => ("pool_members", "member"),
            };
            out.push(found(kind, collection, child, what(name)));
        }
        let desc = format!("pool of {lb_path}");
        out.push(found(Kind::Pool, "pools", pool.id, desc));
    }
    Ok(out)
}

fn found(kind: Kind, collection: &str, id: Uuid, description: String) -> Found {
    Found {
        kind,
        id: Some(id),
        path: format!("/{collection}/{id}"),
        description,
        parent: None,
    }
}

/// A group member (port or address): no ID of its own, its item path names it.
fn member(r: Resource, group_path: &str) -> Found {
    let what = match &r {
        Resource::PortGroupPort(m) => format!("member port {} of {group_path}", m.port_id),
        Resource::IpAddrGroupAddr(a) => format!("address {} of {group_path}", a.addr),
        _ => format!("member of {group_path}"),
    };
    Found {
        kind: r.kind(),
        id: None,
        path: r.item_path(),
        description: what,
        parent: None,
    }
}

/// Whether a port group or IP address group is one the NetworkPolicy translator of
/// `tenant` could have made: named with [`GROUP_NAME_PREFIX`], and (a port group may carry
/// one) of no other tenant. Hand-made groups of operators are never ours.
fn is_policy_group(name: Option<&str>, group_tenant: Option<&str>, tenant: &str) -> bool {
    name.is_some_and(|n| n.starts_with(GROUP_NAME_PREFIX))
        && group_tenant.is_none_or(|t| t == tenant)
}

/// The backend resources of `tenant` that no Translation claims, sorted by kind and path.
///
/// One LIST of all Translations (after listing the backend), and one backend GET per
/// collection: the tenant's bridges, routers and chains and the policy groups, then the
/// ports, routes, rules and group members of each.
pub async fn find_orphans(
    kube: &kube::Client,
    backend: &BackendClient,
    tenant: &str,
) -> Result<Vec<Orphan>, SweepError> {
    let (parents, children) = list_backend(backend, tenant).await?;
    let trs = Api::<Translation>::all(kube.clone())
        .list(&ListParams::default())
        .await?;
    let claims = Claims::from_translations(&trs.items);
    Ok(unclaimed(parents, children, &claims, tenant))
}

/// The listed resources `claims` does not cover, children of an unclaimed parent left out,
/// sorted by kind and path.
fn unclaimed(
    parents: Vec<Found>,
    children: Vec<Found>,
    claims: &Claims,
    tenant: &str,
) -> Vec<Orphan> {
    let mut orphan_parents = BTreeSet::new();
    let mut orphans = Vec::new();
    for p in parents {
        if !claims.claims(&p.path, p.id) {
            orphan_parents.insert(p.path.clone());
            orphans.push(Orphan {
                kind: p.kind,
                path: p.path,
                description: match p.kind {
                    Kind::PortGroup | Kind::IpAddrGroup => {
                        format!("NetworkPolicy {} claimed by no Translation", p.description)
                    }
                    _ => format!(
                        "{} of tenant {tenant} claimed by no Translation",
                        p.description
                    ),
                },
            });
        }
    }
    for c in children {
        // Deleting the orphan parent deletes it too.
        let parent_orphaned = c
            .parent
            .as_ref()
            .is_some_and(|p| orphan_parents.contains(p));
        if parent_orphaned || claims.claims(&c.path, c.id) {
            continue;
        }
        orphans.push(Orphan {
            kind: c.kind,
            path: c.path,
            description: format!("{} claimed by no Translation", c.description),
        });
    }
    orphans.sort();
    orphans.dedup_by(|a, b| a.path == b.path);
    orphans
}

/// Deletes the orphans (404 counts as deleted). Returns how many were deleted. Stops at the
/// first error.
pub async fn delete_orphans(
    backend: &BackendClient,
    orphans: &[Orphan],
) -> Result<usize, SweepError> {
    let mut deleted = 0;
    for o in orphans {
        backend.delete_path(o.kind, &o.path).await?;
        tracing::info!(backend_kind = %o.kind, backend_path = %o.path, "sweep: deleted orphan");
        deleted += 1;
    }
    Ok(deleted)
}

/// Prometheus metrics of the sweep.
#[derive(Clone)]
pub struct SweepMetrics {
    found: IntGaugeVec,
    deleted: IntCounterVec,
}

impl SweepMetrics {
    pub fn new(registry: &Registry) -> Result<SweepMetrics, prometheus::Error> {
        let found = IntGaugeVec::new(
            Opts::new(
                "midonet_kube_controllers_orphans_found",
                "Backend resources of the tenant claimed by no Translation, at the last sweep.",
            ),
            &["kind"],
        )?;
        let deleted = IntCounterVec::new(
            Opts::new(
                "midonet_kube_controllers_orphans_deleted_total",
                "Orphaned backend resources the sweep deleted.",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(found.clone()))?;
        registry.register(Box::new(deleted.clone()))?;
        for k in SWEPT_KINDS {
            found.with_label_values(&[k.name()]).set(0);
            deleted.with_label_values(&[k.name()]);
        }
        Ok(SweepMetrics { found, deleted })
    }

    /// Counts one orphan of `kind` deleted (by the loop or by a crash recovery).
    pub fn count_deleted(&self, kind: Kind) {
        self.deleted.with_label_values(&[kind.name()]).inc();
    }

    fn record_found(&self, orphans: &[Orphan]) {
        let mut counts: BTreeMap<Kind, i64> = SWEPT_KINDS.iter().map(|k| (*k, 0)).collect();
        for o in orphans {
            *counts.entry(o.kind).or_default() += 1;
        }
        for (k, n) in counts {
            self.found.with_label_values(&[k.name()]).set(n);
        }
    }
}

/// One sweep of the loop: find, log, and delete orphans seen by the previous sweep too.
async fn sweep_once(
    kube: &kube::Client,
    backend: &BackendClient,
    tenant: &str,
    delete: bool,
    metrics: &SweepMetrics,
    previous: &mut BTreeSet<String>,
) -> Result<(), SweepError> {
    let orphans = find_orphans(kube, backend, tenant).await?;
    metrics.record_found(&orphans);
    for o in &orphans {
        tracing::warn!(backend_kind = %o.kind, backend_path = %o.path, description = %o.description, "sweep: orphan");
    }
    tracing::info!(orphans = orphans.len(), delete, "sweep done");
    let current: BTreeSet<String> = orphans.iter().map(|o| o.path.clone()).collect();
    if delete {
        let confirmed: Vec<Orphan> = orphans
            .into_iter()
            .filter(|o| previous.contains(&o.path))
            .collect();
        for o in &confirmed {
            delete_orphans(backend, std::slice::from_ref(o)).await?;
            metrics.count_deleted(o.kind);
        }
    }
    *previous = current;
    Ok(())
}

/// Sweeps every `period` until `shutdown` completes. With `delete`, an orphan is deleted
/// once two consecutive sweeps found it. Errors are logged and the next sweep retries.
pub async fn sweep_loop(
    kube: kube::Client,
    backend: BackendClient,
    tenant: String,
    period: Duration,
    delete: bool,
    metrics: SweepMetrics,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut previous = BTreeSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(period) => {}
        }
        let sweep = sweep_once(&kube, &backend, &tenant, delete, &metrics, &mut previous);
        tokio::select! {
            _ = &mut shutdown => return,
            res = sweep => if let Err(err) = res {
                tracing::warn!(error = %err, "sweep failed; retrying at the next period");
            },
        }
    }
}

/// `midonet-kube-controllers sweep [--delete]`: prints `KIND PATH` per orphan and a
/// summary on stdout; deletes them with `delete`.
pub async fn run_cli(cfg: crate::config::Config, delete: bool) -> Result<(), SweepError> {
    let registry = Registry::new();
    let kube = crate::clients::kube_client(&cfg)
        .await
        .map_err(|e| SweepError::Setup(e.to_string()))?;
    let backend = crate::clients::backend_client(&cfg, &registry)
        .map_err(|e| SweepError::Setup(e.to_string()))?;
    let orphans = find_orphans(&kube, &backend, &cfg.tenant).await?;
    for o in &orphans {
        println!("{} {}", o.kind, o.path);
    }
    if delete {
        let n = delete_orphans(&backend, &orphans).await?;
        println!("{n} orphan(s) of tenant {} deleted", cfg.tenant);
    } else {
        println!(
            "{} orphan(s) of tenant {} found (dry run; --delete deletes them)",
            orphans.len(),
            cfg.tenant
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{PushedResource, TranslationResource, TranslationSpec, TranslationStatus};

    #[test]
    fn claims_cover_desired_pushed_and_unparseable_entries() {
        let (b, p, gone, odd) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        let mut tr = Translation::new(
            "t",
            "ns",
            TranslationSpec {
                resources: vec![
                    TranslationResource::new("Bridge", "", format!(r#"{{"id":"{b}"}}"#)),
                    TranslationResource::new(
                        "Port",
                        b.to_string(),
                        format!(r#"{{"id":"{p}","type":"Bridge"}}"#),
                    ),
                    // Bad type: not a Resource, but its id is still claimed.
                    TranslationResource::new(
                        "Port",
                        b.to_string(),
                        format!(r#"{{"id":"{odd}","type":"Nonsense"}}"#),
                    ),
                    TranslationResource::new("Bogus", "", "not json".to_string()),
                ],
            },
        );
        tr.status = Some(TranslationStatus {
            pushed: vec![PushedResource {
                kind: "Rule".into(),
                path: format!("/rules/{gone}"),
                body_hash: String::new(),
            }],
            ..TranslationStatus::default()
        });
        let claims = Claims::from_translations(&[tr]);
        assert!(claims.claims(&format!("/bridges/{b}"), Some(b)));
        assert!(claims.claims(&format!("/ports/{p}"), Some(p)));
        assert!(claims.claims(&format!("/rules/{gone}"), Some(gone)));
        assert!(claims.claims(&format!("/ports/{odd}"), Some(odd)));
        let other = Uuid::new_v4();
        assert!(!claims.claims(&format!("/bridges/{other}"), Some(other)));
        // A path is claimed for its kind only.
        assert!(!claims.claims(&format!("/routers/{b}"), Some(Uuid::new_v4())));
    }

    #[test]
    fn policy_groups_are_known_by_name_and_tenant() {
        assert!(is_policy_group(Some("KUBE-NP-NODE-PORTS"), None, "t"));
        assert!(is_policy_group(
            Some("KUBE-NP-ADDRS-ns=shop;pods=app in (web)"),
            None,
            "t"
        ));
        assert!(is_policy_group(
            Some("KUBE-NP-PORTS-ns=a;pods={}"),
            Some("t"),
            "t"
        ));
        // Another tenant's, an operator's own, a nameless one: never ours.
        assert!(!is_policy_group(Some("KUBE-NP-NODE-PORTS"), Some("u"), "t"));
        assert!(!is_policy_group(Some("admins"), None, "t"));
        assert!(!is_policy_group(None, Some("t"), "t"));
    }

    #[test]
    fn unclaimed_groups_and_members_are_orphans() {
        use midonet_translators::model::{IpAddrGroup, IpAddrGroupAddr, PortGroup, PortGroupPort};
        let (live_pg, live_ag, gone_pg, gone_ag, port, stray_port) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        let ip = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap();
        let live: Vec<Resource> = vec![
            PortGroup::new(live_pg, "KUBE-NP-NODE-PORTS").into(),
            PortGroupPort::new(live_pg, port).into(),
            IpAddrGroup::new(live_ag, "KUBE-NP-ADDRS-ns=a;pods={}").into(),
            IpAddrGroupAddr::new(live_ag, ip("10.1.0.1")).into(),
        ];
        let tr = Translation::new(
            "networkpolicygroup.v1.abc",
            "a",
            TranslationSpec {
                resources: live.iter().map(Resource::to_entry).collect(),
            },
        );
        let claims = Claims::from_translations(&[tr]);
        let group = |kind, collection, id| found(kind, collection, id, "group".into());
        let parents = vec![
            group(Kind::PortGroup, "port_groups", live_pg),
            group(Kind::IpAddrGroup, "ip_addr_groups", live_ag),
            group(Kind::PortGroup, "port_groups", gone_pg),
            group(Kind::IpAddrGroup, "ip_addr_groups", gone_ag),
        ];
        let child = |r: Resource| {
            let mut f = member(r.clone(), "g");
            f.parent = Some(match &r {
                Resource::PortGroupPort(m) => format!("/port_groups/{}", m.parent),
                Resource::IpAddrGroupAddr(a) => format!("/ip_addr_groups/{}", a.parent),
                _ => unreachable!(),
            });
            f
        };
        let stray_member: Resource = PortGroupPort::new(live_pg, stray_port).into();
        let stray_addr: Resource = IpAddrGroupAddr::new(live_ag, ip("10.1.0.9")).into();
        let children = vec![
            child(live[1].clone()),
            child(live[3].clone()),
            child(stray_member.clone()),
            child(stray_addr.clone()),
            // Go with their orphaned group.
            child(PortGroupPort::new(gone_pg, port).into()),
            child(IpAddrGroupAddr::new(gone_ag, ip("10.1.0.1")).into()),
        ];
        let orphans = unclaimed(parents, children, &claims, "t");
        let got: BTreeSet<(Kind, String)> =
            orphans.iter().map(|o| (o.kind, o.path.clone())).collect();
        let want: BTreeSet<(Kind, String)> = [
            (Kind::PortGroup, format!("/port_groups/{gone_pg}")),
            (Kind::IpAddrGroup, format!("/ip_addr_groups/{gone_ag}")),
            (
                Kind::PortGroupPort,
                format!("/port_groups/{live_pg}/ports/{stray_port}"),
            ),
            (
                Kind::IpAddrGroupAddr,
                format!("/ip_addr_groups/{live_ag}/versions/4/ip_addrs/10.1.0.9"),
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want, "{orphans:#?}");
    }
}
