//! Names of the finalizer, labels and annotations shared by the translators and the controllers.

/// Finalizer on every Translation: the pusher removes it only after the backend confirmed
/// the deletion of every resource the Translation pushed.
pub const FINALIZER: &str = "midonet.org/deleter";
/// Label with the UID of the Kubernetes object a Translation was made from.
pub const OWNER_UID_LABEL: &str = "midonet.org/owner-uid";
/// Label on Translations of cluster-global resources (they have no owner).
pub const GLOBAL_LABEL: &str = "midonet.org/global";
/// Label with the Translation version a Translation was written with.
pub const VERSION_LABEL: &str = "midonet.org/translation-version";

/// Node annotation: the backend Host id of the node.
pub const HOST_ID_ANNOTATION: &str = "midonet.org/host-id";
/// Node annotation: the tunnel zone the node's host joins (`""` = the default zone).
pub const TUNNEL_ZONE_ID_ANNOTATION: &str = "midonet.org/tunnel-zone-id";
/// Node annotation: the node's tunnel endpoint IP.
pub const TUNNEL_ENDPOINT_IP_ANNOTATION: &str = "midonet.org/tunnel-endpoint-ip";
/// Node/Pod annotation: the MAC address of the node's or pod's interface.
pub const MAC_ADDRESS_ANNOTATION: &str = "midonet.org/mac-address";
