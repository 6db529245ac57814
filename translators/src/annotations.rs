//! What the translators read of the annotations the node agent and the CNI plugin write.
//!
//! An absent annotation means "not yet" and is quiet; a malformed one is reported as a
//! warning on the object, and the part of the translation that needs it is skipped.

use std::collections::BTreeMap;

use crate::addr::parse_mac;
use crate::meta::MAC_ADDRESS_ANNOTATION;
use crate::model::MacAddr;
use crate::translate::{reason, Translated};

/// The MAC address of a Node's or Pod's interface (`midonet.org/mac-address`), if
/// annotated and well-formed.
pub fn mac_address(
    annotations: Option<&BTreeMap<String, String>>,
    out: &mut Translated,
) -> Option<MacAddr> {
    let raw = annotations?.get(MAC_ADDRESS_ANNOTATION)?;
    let mac = parse_mac(raw);
    if mac.is_none() {
        out.warn(
            reason::INVALID_MAC_ADDRESS,
            format!("annotation {MAC_ADDRESS_ANNOTATION}={raw:?} is not a MAC address"),
        );
    }
    mac
}
