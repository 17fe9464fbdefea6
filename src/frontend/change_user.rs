//! The fields of a `COM_CHANGE_USER` packet, read as the server reads them for the session's
//! capabilities (the session checks the user and resets its backend connection).

use mysql_common::constants::CapabilityFlags;

use crate::protocol::wire::Reader;

/// The fields of a COM_CHANGE_USER packet.
pub(super) struct ChangeUser<'a> {
    pub user: &'a [u8],
    pub auth_response: &'a [u8],
    pub database: &'a [u8],
    pub charset: Option<u16>,
    pub plugin: Option<&'a [u8]>,
    pub connect_attrs: Option<&'a [u8]>,
}

impl<'a> ChangeUser<'a> {
    pub fn parse(payload: &'a [u8], caps: CapabilityFlags) -> Option<ChangeUser<'a>> {
        let mut r = Reader::new(payload.get(1..)?);
        let user = r.null_terminated()?;
        let auth_response = if caps.contains(CapabilityFlags::CLIENT_SECURE_CONNECTION) {
            let n = r.u8()? as usize;
            r.bytes(n)?
        } else {
            r.null_terminated()?
        };
        let database = r.null_terminated_or_rest();
        let charset = if r.is_empty() { None } else { r.u16() };
        let plugin = if caps.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH) && !r.is_empty() {
            Some(r.null_terminated_or_rest())
        } else {
            None
        };
        let connect_attrs = if caps.contains(CapabilityFlags::CLIENT_CONNECT_ATTRS) && !r.is_empty()
        {
            let start = r.remaining();
            r.lenenc_bytes()?;
            Some(&start[..start.len() - r.remaining().len()])
        } else {
            None
        };
        Some(ChangeUser {
            user,
            auth_response,
            database,
            charset,
            plugin,
            connect_attrs,
        })
    }
}
