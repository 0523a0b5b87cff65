//! The ClientHello message body (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2), reassembled from its
//! records: checks every length on the way to the extensions and returns the host_name from the
//! server_name extension (RFC 6066 §3).

use super::reader::{LenPrefix, Reader};
use super::Malformed;

const EXT_SERVER_NAME: u16 = 0;
const NAME_TYPE_HOST_NAME: u8 = 0;
const MAX_HOST_NAME_LEN: usize = 255;

/// Returns the host_name the ClientHello `body` (without its handshake header) carries, if any.
pub(super) fn server_name(body: &[u8]) -> Result<Option<String>, Malformed> {
    let mut r = Reader::new(body);
    // legacy_version and random: fixed size, their values do not matter for routing.
    r.take(2 + 32).ok_or(Malformed::BadLength)?;
    r.sub(LenPrefix::U8).ok_or(Malformed::BadLength)?; // legacy_session_id
    let suites = r.sub(LenPrefix::U16).ok_or(Malformed::BadLength)?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(Malformed::BadLength);
    }
    let compression = r.sub(LenPrefix::U8).ok_or(Malformed::BadLength)?;
    if compression.is_empty() {
        return Err(Malformed::BadLength);
    }
    // A hello from before extensions existed simply ends here.
    if r.is_empty() {
        return Ok(None);
    }
    let extensions = r.sub(LenPrefix::U16).ok_or(Malformed::BadLength)?;
    if !r.is_empty() {
        return Err(Malformed::BadLength);
    }
    find_server_name(extensions)
}

/// Walks the whole extension list, so that a duplicate or broken extension after server_name is
/// still reported: the verdict must not depend on where in the list the problem sits.
fn find_server_name(mut extensions: Reader<'_>) -> Result<Option<String>, Malformed> {
    let mut seen = SeenTypes::new();
    let mut name = None;
    while !extensions.is_empty() {
        let ext_type = extensions.u16().ok_or(Malformed::BadExtension)?;
        let data = extensions
            .sub(LenPrefix::U16)
            .ok_or(Malformed::BadExtension)?;
        if !seen.insert(ext_type) {
            return Err(Malformed::DuplicateExtension);
        }
        if ext_type == EXT_SERVER_NAME {
            name = host_name(data)?;
        }
    }
    Ok(name)
}

/// Reads a ServerNameList and returns its host_name entry; entries of other name types are
/// skipped, assuming the u16-prefixed layout every defined name type would share (as rustls does).
fn host_name(mut data: Reader<'_>) -> Result<Option<String>, Malformed> {
    let mut list = data.sub(LenPrefix::U16).ok_or(Malformed::BadExtension)?;
    if list.is_empty() || !data.is_empty() {
        return Err(Malformed::BadExtension);
    }
    let mut found = None;
    while !list.is_empty() {
        let name_type = list.u8().ok_or(Malformed::BadExtension)?;
        let name = list.sub(LenPrefix::U16).ok_or(Malformed::BadExtension)?;
        if name_type != NAME_TYPE_HOST_NAME {
            continue;
        }
        // RFC 6066: at most one name of each type.
        if found.is_some() {
            return Err(Malformed::BadServerName);
        }
        found = Some(valid_host_name(name)?);
    }
    Ok(found)
}

/// Accepts printable ASCII without spaces, case and all: the router decides what a name means,
/// this only keeps bytes out that could not be a DNS name and would be unsafe in logs or labels.
fn valid_host_name(name: Reader<'_>) -> Result<String, Malformed> {
    let bytes = name.rest();
    if bytes.is_empty() || bytes.len() > MAX_HOST_NAME_LEN {
        return Err(Malformed::BadServerName);
    }
    if !bytes.iter().all(|b| b.is_ascii_graphic()) {
        return Err(Malformed::BadServerName);
    }
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| Malformed::BadServerName)
}

/// A set of the 2^16 extension types as a bitmap on the stack: constant time per extension, no
/// allocation, and no quadratic scan for a hostile hello with thousands of extensions.
struct SeenTypes([u64; 1024]);

impl SeenTypes {
    fn new() -> Self {
        SeenTypes([0; 1024])
    }

    /// Returns false if `t` was already there.
    fn insert(&mut self, t: u16) -> bool {
        let bit = 1u64 << (t % 64);
        match self.0.get_mut(usize::from(t / 64)) {
            Some(word) => {
                let fresh = *word & bit == 0;
                *word |= bit;
                fresh
            }
            None => false,
        }
    }
}
