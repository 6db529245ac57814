//! Pod: a port on its node's bridge, bound to the pod's host-side interface.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Node, Pod};
use uuid::Uuid;

use crate::addr::{parse_ipv4, AddrError};
use crate::annotations::mac_address;
use crate::filters::pod_port;
use crate::meta::HOST_ID_ANNOTATION;
use crate::model::{HostInterfacePort, Ipv4MacPair, MacPort};
use crate::naming::{pod_interface_name, NameKey, Part};
pub use crate::topology::POD_KIND;
use crate::topology::{node_bridge_id, pod_port_id};
use crate::translate::{reason, DesiredTranslation, NamespacedName, Translated, TranslatorConfig};

/// Kinds of the Pod's version-independent Translations.
pub const POD_MAC_KIND: &str = "Pod-MAC";
pub const POD_ARP_KIND: &str = "Pod-ARP";

/// `node` is the Node named by the pod's `spec.nodeName`, if known. Pods that are not on the
/// pod network (unscheduled, `hostNetwork`, finished) produce nothing, and so do pods whose
/// Node is unknown or has no host id yet: they are translated again when the Node changes.
pub fn pod(cfg: &TranslatorConfig, pod: &Pod, node: Option<&Node>) -> Translated {
    let id = match NamespacedName::of(POD_KIND, &pod.metadata) {
        Ok(id) => id,
        Err(w) => return Translated::refused(w),
    };
    let mut out = Translated::default();
    let Some((node_name, host)) = placement(pod, node) else {
        return out;
    };
    let key = id.key();
    let bridge = node_bridge_id(cfg, node_name);
    let port = pod_port_id(cfg, &key);
    out.translations.push(DesiredTranslation::versioned(
        cfg,
        POD_KIND,
        &NameKey::object(id.name),
        id.namespace,
        vec![
            pod_port(cfg, bridge, port),
            HostInterfacePort::new(host, port, pod_interface_name(&key)).into(),
        ],
    ));
    let entries = mac_entries(cfg, id, pod, bridge, port, &mut out);
    out.translations.extend(entries);
    out
}

/// The node a pod on the pod network runs on, and that node's host: `None` for a pod not
/// on the pod network (unscheduled, `hostNetwork`, finished), or whose Node is not `node`
/// or has no valid host id yet (that is the Node's problem, reported on the Node).
fn placement<'a>(pod: &'a Pod, node: Option<&Node>) -> Option<(&'a str, Uuid)> {
    let spec = pod.spec.as_ref()?;
    let node_name = spec.node_name.as_deref().filter(|n| !n.is_empty())?;
    if spec.host_network == Some(true) {
        return None;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let node = node.filter(|n| n.metadata.name.as_deref() == Some(node_name))?;
    let host = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HOST_ID_ANNOTATION))
        .and_then(|raw| Uuid::parse_str(raw.trim()).ok())?;
    Some((node_name, host))
}

/// With the MAC annotation: the pod port's MAC-table entry and, once the pod has an IPv4
/// address, its ARP entry, each its own Translation named by its content.
fn mac_entries(
    cfg: &TranslatorConfig,
    id: NamespacedName,
    pod: &Pod,
    bridge: Uuid,
    port: Uuid,
    out: &mut Translated,
) -> Vec<DesiredTranslation> {
    let Some(mac) = mac_address(pod.metadata.annotations.as_ref(), out) else {
        return Vec::new();
    };
    let (name, namespace) = (id.name, id.namespace);
    let hex = mac.to_hex();
    // Versioned like the port: the entries live under the version's bridge, so the old
    // version's stay (and keep the old topology working) until a bump has cut over.
    let mut entries = vec![DesiredTranslation::versioned(
        cfg,
        POD_MAC_KIND,
        &NameKey::object(name).marked("mac", Part::Label(&hex)),
        namespace,
        vec![MacPort::new(bridge, mac, port).into()],
    )];
    if let Some(ip) = pod_ipv4(pod, out) {
        entries.push(DesiredTranslation::versioned(
            cfg,
            POD_ARP_KIND,
            &NameKey::object(name)
                .marked("ip", Part::Ipv4(ip))
                .then(Part::Label(&hex)),
            namespace,
            vec![Ipv4MacPair::new(bridge, ip, mac).into()],
        ));
    }
    entries
}

/// The pod's IPv4 address: `status.podIP`, or the first IPv4 entry of `status.podIPs`.
/// Nothing (and no warning) while the pod has no address yet.
fn pod_ipv4(pod: &Pod, out: &mut Translated) -> Option<Ipv4Addr> {
    let status = pod.status.as_ref()?;
    let candidates = status
        .pod_ip
        .iter()
        .map(String::as_str)
        .chain(
            status
                .pod_ips
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|p| p.ip.as_str()),
        )
        .filter(|ip| !ip.is_empty());
    let mut invalid = Vec::new();
    let mut ipv6 = false;
    for raw in candidates {
        match parse_ipv4(raw) {
            Ok(ip) => return Some(ip),
            Err(AddrError::Ipv6) => ipv6 = true,
            Err(AddrError::Invalid) => invalid.push(format!("{raw:?}")),
        }
    }
    if !invalid.is_empty() {
        invalid.dedup();
        out.warn(
            reason::INVALID_POD_IP,
            format!(
                "pod IP {} is not an IP address; no ARP entry is made",
                invalid.join(", ")
            ),
        );
    } else if ipv6 {
        out.warn(
            reason::UNSUPPORTED_IP_FAMILY,
            "the pod has only IPv6 addresses; no ARP entry is made",
        );
    }
    None
}
