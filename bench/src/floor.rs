//! The floors: the least work the controllers' initial sync could do, measured by plain
//! clients on the same control plane and simulator before the controllers run.
//!
//! A floor writes the same Translations as the translators do (same namespace, name,
//! labels, owner, finalizer, field managers: each manager is an entry in the object's
//! managedFields, which the apiserver reads and writes with the object) and the same
//! backend resources, with plain clients at concurrency 8, the backend's level by level
//! ([`dependency_levels`]) so that referents exist first. What each floor writes per
//! Translation is a [`FloorWrites`]. Each floor runs under the bench's Translation watch,
//! as the watched sync does, and is then cleared ([`clear`]) so that the sync starts from
//! an empty backend. With the edge the floors run before the IPAM has given the
//! LoadBalancer Services their addresses: [`wanted`] stands them in (`crate::edge`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams};
use kube::Client;
use midonet_kube_controllers::backend::{BackendClient, BackendConfig};
use midonet_kube_controllers::crd::Translation;
use midonet_kube_controllers::translate;
use midonet_sim::admin::AdminClient;
use midonet_translators::{DesiredTranslation, Resource, TranslatorConfig};

use crate::controlplane::apiserver_and_bench_cpu;
use crate::costs;
use crate::edge::{BenchEdge, Share};
use crate::objects::{each_concurrent, Objects};
use crate::profile::ApiserverProfile;
use crate::tracker::{Key, ReadyTracker, Timeline};
use crate::{Bench, Res, SETTLE};

/// A desired Translation and the owner reference the translators put on it (none for the
/// globals).
pub struct Owned {
    pub owner: Option<OwnerReference>,
    pub translation: DesiredTranslation,
}

/// Every Translation the controllers are to write for the scenario's objects, with its
/// owner; with the edge, also those of the same objects without it (every Service
/// ClusterIP, no edge: [`crate::edge::Share`]). The controllers also translate the
/// apiserver's own `default/kubernetes` Service (its Endpoints exist only if the
/// apiserver's endpoint reconciler made them). With the edge, the LoadBalancer Services
/// are translated with the addresses the IPAM is to give ([`BenchEdge::with_ingress`]).
pub async fn wanted(bench: &Bench, objects: &Objects) -> Res<(Vec<Owned>, Option<Share>)> {
    let client = &bench.client;
    let mut services = objects.services.clone();
    services.extend(
        Api::<Service>::namespaced(client.clone(), "default")
            .get_opt("kubernetes")
            .await?,
    );
    let mut endpoints = objects.endpoints.clone();
    endpoints.extend(
        Api::<Endpoints>::namespaced(client.clone(), "default")
            .get_opt("kubernetes")
            .await?,
    );
    let Some(edge) = &bench.edge else {
        let cfg = TranslatorConfig::default();
        let all = translate_all(&cfg, &objects.nodes, &objects.pods, &services, &endpoints);
        return Ok((all, None));
    };
    let cfg = edge.translator_config();
    let with_ingress = BenchEdge::with_ingress(&services)?;
    let all = translate_all(
        &cfg,
        &objects.nodes,
        &objects.pods,
        &with_ingress,
        &endpoints,
    );
    let plain = Share::plain_services(&services);
    let cfg = TranslatorConfig::default();
    let without = translate_all(&cfg, &objects.nodes, &objects.pods, &plain, &endpoints);
    let share = Share::of(&all, &without);
    Ok((all, Some(share)))
}

/// `translations` of `obj`, each with `obj`'s owner reference.
fn owned_by<O: kube::Resource<DynamicType = ()>>(
    obj: &O,
    translations: Vec<DesiredTranslation>,
) -> impl Iterator<Item = Owned> {
    let owner = translate::owner_reference(obj);
    translations.into_iter().map(move |translation| Owned {
        owner: owner.clone(),
        translation,
    })
}

/// The namespace and name of a namespaced object.
fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Every Translation the controllers are to write for these objects with `cfg`, with its
/// owner.
pub fn translate_all(
    cfg: &TranslatorConfig,
    nodes: &[Node],
    pods: &[Pod],
    services: &[Service],
    endpoints: &[Endpoints],
) -> Vec<Owned> {
    let by_name: BTreeMap<String, &Node> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.clone().map(|k| (k, n)))
        .collect();
    let svc_by_key: BTreeMap<Key, &Service> =
        services.iter().map(|s| (key_of(&s.metadata), s)).collect();
    let mut out: Vec<Owned> = midonet_translators::global(cfg)
        .into_iter()
        .map(|translation| Owned {
            owner: None,
            translation,
        })
        .collect();
    for n in nodes {
        out.extend(owned_by(n, midonet_translators::node(cfg, n).translations));
    }
    for p in pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| by_name.get(n).copied());
        let translated = midonet_translators::pod(cfg, p, node);
        out.extend(owned_by(p, translated.translations));
    }
    for s in services {
        let translated = midonet_translators::service(cfg, s);
        out.extend(owned_by(s, translated.translations));
    }
    for e in endpoints {
        let service = svc_by_key.get(&key_of(&e.metadata)).copied();
        let translated = midonet_translators::endpoints(cfg, e, service);
        out.extend(owned_by(e, translated.translations));
    }
    out
}

/// The namespaces and names of the Translations the controllers are to write for these
/// pods (which the edge does not change). A pod need not come from the apiserver: the
/// names do not depend on its UID.
pub fn translation_keys(nodes: &[Node], pods: &[Pod]) -> BTreeSet<Key> {
    let cfg = TranslatorConfig::default();
    let node_of = |p: &Pod| {
        let name = p.spec.as_ref()?.node_name.as_deref()?;
        nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
    };
    pods.iter()
        .flat_map(|p| midonet_translators::pod(&cfg, p, node_of(p)).translations)
        .map(|t| (t.namespace, t.name))
        .collect()
}

/// The Translations' backend resources (parsed, in push order) in levels: each one's
/// resources need only what its own earlier resources and the Translations of lower levels
/// provide (`Resource::requires`), so that a plain client pushing level by level is never
/// refused for a missing referent.
fn dependency_levels(all: &[Owned]) -> Res<Vec<Vec<Vec<Resource>>>> {
    let mut resources = Vec::with_capacity(all.len());
    let mut provider = HashMap::new();
    for (i, o) in all.iter().enumerate() {
        let rs = o
            .translation
            .resources
            .iter()
            .map(Resource::from_entry)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        for r in &rs {
            for p in r.provides() {
                provider.insert(p, i);
            }
        }
        resources.push(rs);
    }
    let needs: Vec<Vec<usize>> = resources
        .iter()
        .enumerate()
        .map(|(i, rs)| {
            rs.iter()
                .flat_map(Resource::requires)
                .filter_map(|r| provider.get(&r).copied())
                .filter(|p| *p != i)
                .collect()
        })
        .collect();
    let level = levels_of(&needs)?;
    let mut levels = vec![Vec::new(); level.iter().max().map_or(0, |m| m + 1)];
    for (rs, l) in resources.into_iter().zip(&level) {
        levels[*l].push(rs);
    }
    Ok(levels)
}

/// Each node's level in the graph `needs` (node `i` needs nodes `needs[i]`): the longest
/// path from a node that needs nothing, by relaxation (the levels are few).
fn levels_of(needs: &[Vec<usize>]) -> Res<Vec<usize>> {
    let mut level = vec![0usize; needs.len()];
    for _ in 0..=needs.len() {
        let mut changed = false;
        for (i, ns) in needs.iter().enumerate() {
            let l = ns.iter().map(|p| level[*p] + 1).max().unwrap_or(0);
            if l > level[i] {
                level[i] = l;
                changed = true;
            }
        }
        if !changed {
            return Ok(level);
        }
    }
    Err("the scenario's Translations need each other in a cycle".into())
}

/// What the plain client of a floor writes per Translation.
#[derive(Clone, Copy, PartialEq)]
pub enum FloorWrites {
    /// One create: the floor of the ratio.
    Create,
    /// A create, then a status write shaped like the pusher's: the least any controller
    /// that records a Ready condition per Translation can write.
    CreateAndStatus,
}

/// One floor: writes `all` (see the module docs); returns how long it took and its
/// timeline. With `controllers_watch`, one more Translation watch runs, standing in for
/// the controllers' informer: one more watch the apiserver sends every write to.
async fn timed_floor(
    client: &Client,
    api_url: &str,
    all: &[Owned],
    writes: FloorWrites,
    controllers_watch: bool,
) -> Res<(Duration, Timeline)> {
    let backend = BackendClient::new(
        BackendConfig {
            url: url::Url::parse(api_url)?,
            ..BackendConfig::default()
        },
        &prometheus::Registry::new(),
    )?;
    let levels = dependency_levels(all)?;
    // Watched as during the sync; only its timeline is used.
    let watch = ReadyTracker::start(client);
    watch.listed().await;
    let informer = controllers_watch.then(|| ReadyTracker::start(client));
    if let Some(w) = &informer {
        w.listed().await;
    }
    let start = Instant::now();
    let kube_side = each_concurrent(all, 8, |o| {
        let d = &o.translation;
        let t = translate::translation_object(d, o.owner.as_ref());
        let trs: Api<Translation> = Api::namespaced(client.clone(), &d.namespace);
        async move {
            let created = trs.create(&costs::translators_params(), &t).await?;
            if writes == FloorWrites::CreateAndStatus {
                costs::write_pushed_status(&trs, created, &costs::pusher_params()).await?;
            }
            Ok(())
        }
    });
    let backend_side = async {
        for level in &levels {
            each_concurrent(level, 8, |resources| {
                let backend = &backend;
                async move {
                    for r in resources {
                        backend.apply(r).await?;
                    }
                    Ok(())
                }
            })
            .await?;
        }
        Res::Ok(())
    };
    let (a, b) = tokio::join!(kube_side, backend_side);
    a?;
    b?;
    Ok((start.elapsed(), watch.timeline(start)))
}

/// One measured floor.
pub struct FloorRun {
    pub time: Duration,
    /// The apiserver's CPU time over it.
    pub cpu: Duration,
    /// The bench's own CPU time over it: the floor's clients, the simulator, the watches.
    pub client_cpu: Duration,
    pub timeline: Timeline,
}

/// A floor of `writes` over `all`, its duration, timeline and the apiserver's CPU over it;
/// then [`clear`], once `profile` (started just before) has ended.
pub async fn measured(
    bench: &Bench,
    all: &[Owned],
    writes: FloorWrites,
    controllers_watch: bool,
    profile: Option<ApiserverProfile>,
) -> Res<FloorRun> {
    let (client, api_url) = (&bench.client, &bench.api_url);
    let (cpu0, client_cpu0) = apiserver_and_bench_cpu()?;
    let (time, timeline) = timed_floor(client, api_url, all, writes, controllers_watch).await?;
    let (cpu1, client_cpu1) = apiserver_and_bench_cpu()?;
    let (cpu, client_cpu) = (cpu1 - cpu0, client_cpu1 - client_cpu0);
    if let Some(profile) = profile {
        profile.finish().await?;
    }
    clear(client, &bench.admin, all).await?;
    Ok(FloorRun {
        time,
        cpu,
        client_cpu,
        timeline,
    })
}

/// Removes what a floor wrote: its Translations (finalizer first), and the backend
/// (hosts kept).
pub async fn clear(client: &Client, admin: &AdminClient, written: &[Owned]) -> Res<()> {
    each_concurrent(written, 16, |o| {
        let d = &o.translation;
        let trs: Api<Translation> = Api::namespaced(client.clone(), &d.namespace);
        async move {
            costs::remove_finalizers(&trs, &d.name).await?;
            trs.delete(&d.name, &DeleteParams::default()).await?;
            Ok(())
        }
    })
    .await?;
    admin.wipe().await?;
    admin.reset_requests().await?;
    // Let the apiserver and kube-controller-manager finish with the deletions.
    tokio::time::sleep(SETTLE).await;
    Ok(())
}

/// The floors measured before the sync.
pub struct Floors {
    pub plain: FloorRun,
    pub status: FloorRun,
    /// With `--watched-floor`: the status floor under a second Translation watch.
    pub watched: Option<FloorRun>,
}

/// The plain floor, the floor with a status write and (with `--watched-floor`) the
/// watched floor, in that order, each cleared after it.
pub async fn before_sync(bench: &Bench, wanted: &[Owned]) -> Res<Floors> {
    eprintln!("bench: measuring the floor");
    let plain = measured(
        bench,
        wanted,
        FloorWrites::Create,
        false,
        bench.profile("floor"),
    )
    .await?;
    eprintln!("bench: measuring the floor with a status write per Translation");
    let status = FloorWrites::CreateAndStatus;
    let status = measured(bench, wanted, status, false, bench.profile("floor-status")).await?;
    let watched = if bench.args.watched_floor {
        eprintln!("bench: measuring the floor with a status write and a second watch");
        let profile = bench.profile("floor-watched");
        let writes = FloorWrites::CreateAndStatus;
        Some(measured(bench, wanted, writes, true, profile).await?)
    } else {
        None
    };
    Ok(Floors {
        plain,
        status,
        watched,
    })
}
