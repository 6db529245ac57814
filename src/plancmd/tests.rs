//! The planner on hand-made Translations: a node with its bridge, uplink port and binding,
//! two pods with a port and a binding each on the node's bridge, and a global chain with a
//! rule. Expected counts follow from MidoNet's semantics: a bridge's deletion takes its
//! ports, a port's takes its binding, a chain's takes its rules.

use super::*;
use crate::crd::{Condition, TranslationStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use midonet_translators::TranslationResource;

const HOST: &str = "aaaaaaaa-0000-4000-8000-000000000001";

/// A UUID made of the version digit and a serial: every version's IDs differ.
fn id(version: &str, serial: u32) -> String {
    format!("{serial:08x}-0000-4000-8000-00000000000{version}")
}

fn bridge(v: &str, serial: u32) -> TranslationResource {
    TranslationResource::new(
        "Bridge",
        "",
        format!(
            r#"{{"id":"{}","name":"b{serial}","tenantId":"t"}}"#,
            id(v, serial)
        ),
    )
}

fn port(v: &str, bridge: u32, serial: u32) -> TranslationResource {
    TranslationResource::new(
        "Port",
        id(v, bridge),
        format!(r#"{{"id":"{}","type":"Bridge"}}"#, id(v, serial)),
    )
}

fn binding(v: &str, port: u32, interface: &str) -> TranslationResource {
    TranslationResource::new(
        "HostInterfacePort",
        HOST,
        format!(
            r#"{{"hostId":"{HOST}","portId":"{}","interfaceName":"{interface}"}}"#,
            id(v, port)
        ),
    )
}

fn chain(v: &str, serial: u32) -> TranslationResource {
    TranslationResource::new(
        "Chain",
        "",
        format!(
            r#"{{"id":"{}","name":"c{serial}","tenantId":"t"}}"#,
            id(v, serial)
        ),
    )
}

fn rule(v: &str, chain: u32, serial: u32) -> TranslationResource {
    TranslationResource::new(
        "Rule",
        id(v, chain),
        format!(r#"{{"id":"{}","type":"accept"}}"#, id(v, serial)),
    )
}

/// A Translation as the runner writes it: owned by `owner` (kind, uid) or global.
fn desired_tr(
    name: &str,
    v: &str,
    owner: Option<(&str, &str)>,
    resources: Vec<TranslationResource>,
) -> Translation {
    let mut labels = BTreeMap::from([(VERSION_LABEL.to_string(), v.to_string())]);
    if owner.is_none() {
        labels.insert(GLOBAL_LABEL.into(), "true".into());
    }
    let d = DesiredTranslation {
        name: name.into(),
        namespace: "ns".into(),
        labels,
        resources,
    };
    let owner = owner.map(|(kind, uid)| OwnerReference {
        api_version: "v1".into(),
        kind: kind.into(),
        name: uid.into(),
        uid: uid.into(),
        ..OwnerReference::default()
    });
    translation_object(&d, owner.as_ref())
}

/// The same Translation as stored once pushed: Ready, every resource recorded.
fn pushed(tr: &Translation) -> Translation {
    let mut t = tr.clone();
    t.metadata.generation = Some(1);
    let parsed = parse_all(t.desired_resources()).unwrap();
    t.status = Some(TranslationStatus {
        observed_generation: Some(1),
        pushed: parsed
            .into_iter()
            .map(|d| PushedResource {
                kind: d.resource.kind().name().into(),
                path: d.path,
                body_hash: d.body_hash,
            })
            .collect(),
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Pushed".into(),
            observed_generation: Some(1),
            ..Condition::default()
        }],
        ..TranslationStatus::default()
    });
    t
}

fn node(v: &str) -> Translation {
    desired_tr(
        &format!("node.{v}.n1"),
        v,
        Some(("Node", "uid-n1")),
        vec![bridge(v, 1), port(v, 1, 2), binding(v, 2, "n1-uplink")],
    )
}

fn pod(v: &str, name: &str, port_serial: u32) -> Translation {
    desired_tr(
        &format!("pod.{v}.{name}"),
        v,
        Some(("Pod", &format!("uid-{name}"))),
        vec![
            port(v, 1, port_serial),
            binding(v, port_serial, &format!("veth-{name}")),
        ],
    )
}

fn global(v: &str) -> Translation {
    desired_tr(
        &format!("global.{v}.main"),
        v,
        None,
        vec![chain(v, 9), rule(v, 9, 10)],
    )
}

fn cluster(v: &str) -> Vec<Translation> {
    vec![node(v), pod(v, "a", 3), pod(v, "b", 4), global(v)]
}

fn scope() -> Scope {
    Scope {
        owner_kinds: ["Node".to_string(), "Pod".to_string()].into(),
        globals: true,
        groups: false,
    }
}

fn existing_v1() -> Vec<Translation> {
    cluster("1").iter().map(pushed).collect()
}

/// The plan of `want` over `existing` for the owners of [`scope`], with the default cutover.
fn plan_with_defaults(
    version: &str,
    want: &[Translation],
    existing: &[Translation],
    rate: f64,
) -> Plan {
    plan(
        version,
        want,
        existing,
        &scope(),
        rate,
        CutoverOrder::default(),
    )
}

fn counts(pairs: &[(&str, Reason, usize)]) -> Counts {
    let mut c = Counts::new();
    for (kind, reason, n) in pairs {
        c.entry(kind.to_string()).or_default().insert(*reason, *n);
    }
    c
}

#[test]
fn in_sync_there_is_nothing_to_do() {
    let p = plan_with_defaults("1", &cluster("1"), &existing_v1(), 100.0);
    assert!(p.nothing_to_do(), "{p:#?}");
    assert_eq!(p.translations.unchanged, 4);
    assert_eq!(p.backend.total(), 0);
    assert_eq!(p.render_text(), "nothing to do\n");
}

#[test]
fn a_changed_object_is_an_update_of_what_differs() {
    // Pod a now has a chain instead of its binding: one create, one removal.
    let mut want = cluster("1");
    want[1] = desired_tr(
        "pod.1.a",
        "1",
        Some(("Pod", "uid-a")),
        vec![port("1", 1, 3), chain("1", 11)],
    );
    let p = plan_with_defaults("1", &want, &existing_v1(), 100.0);
    assert_eq!(
        p.translations.update,
        counts(&[("pod", Reason::ChangedObject, 1)])
    );
    assert!(p.translations.create.is_empty() && p.translations.delete.is_empty());
    assert_eq!(p.translations.unchanged, 3);
    assert_eq!(
        (
            p.backend.creates,
            p.backend.updates,
            p.backend.deletes_removed
        ),
        (1, 0, 1)
    );
    assert_eq!(p.backend.total(), 2);
    assert_eq!(p.rebinds.total, 0);
    assert!(!p.nothing_to_do());
}

#[test]
fn a_deleted_object_makes_a_stale_delete_and_a_new_one_a_create() {
    // Pod b is gone, pod c is new.
    let want = vec![node("1"), pod("1", "a", 3), pod("1", "c", 5), global("1")];
    let p = plan_with_defaults("1", &want, &existing_v1(), 100.0);
    assert_eq!(p.translations.delete, counts(&[("pod", Reason::Stale, 1)]));
    assert_eq!(
        p.translations.create,
        counts(&[("pod", Reason::NewObject, 1)])
    );
    // Pod b's port is deleted explicitly (its bridge stays), its binding goes with it.
    assert_eq!((p.backend.deletes_retired, p.backend.cascaded), (1, 1));
    // Pod c: a port and a binding of a new interface (not a rebinding).
    assert_eq!(p.backend.creates, 2);
    assert_eq!(p.rebinds.total, 0);
    assert_eq!(p.backend.total(), 3);
}

#[test]
fn translations_out_of_scope_are_left_alone_unless_of_another_version() {
    let mut policy = pushed(&desired_tr(
        "networkpolicy.1.np",
        "1",
        Some(("NetworkPolicy", "uid-np")),
        vec![chain("1", 12)],
    ));
    let mut existing = existing_v1();
    existing.push(policy.clone());
    assert!(plan_with_defaults("1", &cluster("1"), &existing, 100.0).nothing_to_do());
    // Another version's goes whatever its kind: the bump's retirement deletes them all.
    policy.metadata.labels = Some([(VERSION_LABEL.to_string(), "0".to_string())].into());
    existing.pop();
    existing.push(policy);
    let p = plan_with_defaults("1", &cluster("1"), &existing, 100.0);
    assert_eq!(
        p.translations.delete,
        counts(&[("networkpolicy", Reason::VersionBump, 1)])
    );
    assert_eq!(p.backend.deletes_retired, 1);
}

#[test]
fn a_bump_replaces_everything_rebinds_every_interface_and_lets_cascades_delete() {
    let p = plan_with_defaults("2", &cluster("2"), &existing_v1(), 7.0);
    let all = counts(&[
        ("global", Reason::VersionBump, 1),
        ("node", Reason::VersionBump, 1),
        ("pod", Reason::VersionBump, 2),
    ]);
    assert_eq!(p.translations.create, all);
    assert_eq!(p.translations.delete, all);
    assert_eq!(p.translations.unchanged, 0);
    // Every resource of version 2 created: bridge, port, binding; 2 × (port, binding);
    // chain, rule.
    assert_eq!(p.backend.creates, 9);
    // The three interfaces (the node's uplink, two pods') move to new ports. Their old
    // ports are all on version 1's node bridge: the cutover deletes that bridge, and
    // MidoNet the three ports and bindings with it.
    assert_eq!(p.rebinds.total, 3);
    assert_eq!(
        p.rebinds.by_kind,
        BTreeMap::from([("node".to_string(), 1), ("pod".to_string(), 2)])
    );
    assert_eq!(p.backend.deletes_cutover, 1);
    // Of version 1's nine resources only the chain is left to DELETE when version 1
    // retires: the bridge went at the cutover, the ports with the bridge (the pods' ones
    // with the node Translation's), the bindings with their ports, the rule with its chain.
    assert_eq!(p.backend.deletes_retired, 1);
    assert_eq!(p.backend.cascaded, 7);
    assert_eq!(p.backend.total(), 9 + 1 + 1);
    assert_eq!(p.estimate.requests, 11);
    assert!(
        (p.estimate.seconds - 11.0 / 7.0).abs() < 1e-9,
        "{}",
        p.estimate.seconds
    );
    let text = p.render_text();
    assert!(
        text.contains("Host interfaces rebound: 3 (node 1, pod 2)"),
        "{text}"
    );
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["translations"]["create"]["pod"]["version-bump"], 2);
    assert_eq!(json["backend"]["deletesRetired"], 1);
    assert_eq!(json["backend"]["deletesCutover"], 1);
}

#[test]
fn the_translators_output_is_planned_as_the_runner_writes_it() {
    use serde_json::json;
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "uid": "0f0e0d0c-0000-4000-8000-000000000001",
                     "annotations": {"midonet.org/host-id": "7d3a4e2c-1b0f-4a53-9d0e-2f7a4a4b9c01"}},
        "spec": {"podCIDR": "10.1.2.0/24"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.10"}]}
    }))
    .unwrap();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "0f0e0d0c-0000-4000-8000-000000000002"},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": "Running", "podIP": "10.1.2.7"}
    }))
    .unwrap();
    let cluster = Cluster {
        nodes: vec![node],
        pods: vec![pod],
        services: vec![],
        endpoints: vec![],
        namespaces: vec![],
        network_policies: vec![],
        endpoint_slices: None,
        edge: None,
    };
    let v1 = TranslatorConfig {
        tenant: "t".into(),
        version: "1".into(),
        edge: None,
    };
    let (want, scope) = desired(&v1, &cluster, &Enabled::ALL);
    let existing: Vec<Translation> = want.iter().map(pushed).collect();
    assert!(plan("1", &want, &existing, &scope, 1.0, CutoverOrder::default()).nothing_to_do());
    let v2 = TranslatorConfig {
        version: "2".into(),
        ..v1
    };
    let (want2, scope2) = desired(&v2, &cluster, &Enabled::ALL);
    // Without the link between the versions: what the cutover and the retirement delete
    // is exactly version 1.
    let p = plan(
        "2",
        &want2,
        &existing,
        &scope2,
        1.0,
        CutoverOrder::AllAtOnce,
    );
    let (created, updated, deleted) = p.translation_totals();
    assert_eq!(
        (created, updated, deleted),
        (want2.len(), 0, existing.len())
    );
    assert_eq!(p.translations.create["pod"][&Reason::VersionBump], 1);
    // The one pod's interface moves to its new port.
    assert_eq!(p.rebinds.by_kind.get("pod"), Some(&1));
    // Deleting version 1 costs fewer requests than it has resources: cascades.
    let resources: usize = existing.iter().map(|t| t.desired_resources().len()).sum();
    assert!(p.backend.deletes_retired < resources, "{p:#?}");
    // The node bridge goes at the cutover (it frees the pod's interface), the rest when
    // version 1 retires: explicitly or by MidoNet's cascades.
    assert_eq!(p.backend.deletes_cutover, 1);
    assert_eq!(
        p.backend.deletes_cutover + p.backend.deletes_retired + p.backend.cascaded,
        resources
    );
    // The default links the versions' cluster routers: the link adds its own requests.
    let linked = plan(
        "2",
        &want2,
        &existing,
        &scope2,
        1.0,
        CutoverOrder::default(),
    );
    let link = linked
        .link
        .clone()
        .expect("the translators' node routes can be linked");
    assert!(link.mirrors_deleted >= 1, "{link:?}");
    assert_eq!(linked.backend.deletes_cutover, 1 + link.mirrors_deleted);
    assert_eq!(
        linked.estimate.requests,
        p.estimate.requests + link.creates + link.mirrors_deleted + link.retire_deletes
    );
}

/// Records the translators whose objects, or watched dependencies, the cluster does not list.
#[derive(Default)]
struct Unlisted(Vec<&'static str>);

impl Translators for Unlisted {
    fn kind<K: TranslatorKind>(&mut self) {
        let cluster = Cluster {
            endpoint_slices: Some(vec![]),
            ..Cluster::default()
        };
        let lists = Lists::new(&cluster);
        if lists.listed::<K::Object>().is_none()
            || (K::Dependency::WATCHED && lists.listed::<K::Dependency>().is_none())
        {
            self.0.push(K::NAME);
        }
    }
    fn network_policy(&mut self) {}
}

#[test]
fn plan_lists_what_every_translator_reads() {
    for source in [EndpointsSource::Endpoints, EndpointsSource::SlicesV1] {
        let mut unlisted = Unlisted::default();
        for_each_translator(&Enabled::ALL.controllers(), source, &mut unlisted);
        assert!(unlisted.0.is_empty(), "{source:?}: {:?}", unlisted.0);
    }
    // Able to fail: v1beta1 slices are given to plan in the v1 shape, not listed as such.
    let mut unlisted = Unlisted::default();
    for_each_translator(
        &Enabled::ALL.controllers(),
        EndpointsSource::SlicesV1Beta1,
        &mut unlisted,
    );
    assert_eq!(unlisted.0, ["service"]);
}

/// A node routed by a cluster router (serial 20, the global's): its router port (21)
/// linked to its bridge's port (2) and the route to its pod subnet through it (22).
fn routed_node(v: &str) -> Translation {
    let mut resources = node(v).desired_resources().to_vec();
    resources.extend([
        TranslationResource::new(
            "Port",
            id(v, 20),
            format!(
                r#"{{"id":"{}","type":"Router","portAddress":"10.1.0.1","networkAddress":"10.1.0.0","networkLength":24}}"#,
                id(v, 21)
            ),
        ),
        TranslationResource::new(
            "PortLink",
            id(v, 2),
            format!(r#"{{"portId":"{}","peerId":"{}"}}"#, id(v, 2), id(v, 21)),
        ),
        TranslationResource::new(
            "Route",
            id(v, 20),
            format!(
                r#"{{"id":"{}","dstNetworkAddr":"10.1.0.0","dstNetworkLength":24,"srcNetworkAddr":"0.0.0.0","srcNetworkLength":0,"nextHopPort":"{}","weight":100,"type":"Normal"}}"#,
                id(v, 22),
                id(v, 21)
            ),
        ),
    ]);
    desired_tr(
        &format!("node.{v}.n1"),
        v,
        Some(("Node", "uid-n1")),
        resources,
    )
}

fn routed_cluster(v: &str) -> Vec<Translation> {
    vec![routed_node(v), pod(v, "a", 3), pod(v, "b", 4), global(v)]
}

#[test]
fn a_linked_bump_adds_the_link_its_mirrors_and_their_deletions() {
    let existing: Vec<Translation> = routed_cluster("1").iter().map(pushed).collect();
    let want = routed_cluster("2");
    let at_once = plan(
        "2",
        &want,
        &existing,
        &scope(),
        1.0,
        CutoverOrder::AllAtOnce,
    );
    assert_eq!(at_once.link, None);
    let linked = plan("2", &want, &existing, &scope(), 1.0, CutoverOrder::Linked);
    // Two link ports, their link, one mirror on the old router (both versions route the
    // same subnet), one on the new router for the one host that moves; the new router's
    // mirror deleted before the host's batch; the two ports deleted when the link retires
    // (their routes and link go with them).
    let cost = LinkCost {
        creates: 5,
        mirrors_deleted: 1,
        retire_deletes: 2,
    };
    assert_eq!(linked.link, Some(cost.clone()));
    assert_eq!(
        linked.backend.creates,
        at_once.backend.creates + cost.creates
    );
    assert_eq!(
        linked.backend.deletes_cutover,
        at_once.backend.deletes_cutover + cost.mirrors_deleted
    );
    assert_eq!(
        linked.backend.deletes_retired,
        at_once.backend.deletes_retired + cost.retire_deletes
    );
    assert_eq!(linked.estimate.requests, at_once.estimate.requests + 8);
    assert!(linked
        .render_text()
        .contains("the link between the versions"));
    // Nothing moves: no link.
    let steady = plan(
        "1",
        &routed_cluster("1"),
        &existing,
        &scope(),
        1.0,
        CutoverOrder::Linked,
    );
    assert_eq!(steady.link, None);
}
