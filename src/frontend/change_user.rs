//! The fields of a `COM_CHANGE_USER` packet, read as the server reads them for the session's
//! capabilities, and the session's handling of it: the user checked against the proxy's own,
//! the backend connection reset.

use mysql_common::constants::CapabilityFlags;
use tokio::io::{AsyncRead, AsyncWrite};

use super::login::{access_denied, auth_switch_request, check_password, checkable_plugin};
use super::session::{Session, SessionEnd};
use crate::backend::LoginReply;
use crate::protocol::auth::Plugin;
use crate::protocol::commands::*;
use crate::protocol::packet::write_packet;
use crate::protocol::wire::{self, ErrorPacket, Reader};
use crate::relay::Relay;

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

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// COM_CHANGE_USER: the new user is checked against the proxy's own users; the backend
    /// connection is then reset with COM_CHANGE_USER for the proxy's backend user, so the
    /// session state is cleared exactly as the server clears it.
    pub(super) async fn change_user(&mut self, payload: &[u8]) -> Result<(), SessionEnd> {
        let Some(request) = ChangeUser::parse(payload, self.capabilities) else {
            return self
                .reply_error(ErrorPacket::new(
                    ER_UNKNOWN_COM_ERROR,
                    "08S01",
                    "Malformed COM_CHANGE_USER packet",
                ))
                .await;
        };
        let user = String::from_utf8_lossy(request.user).into_owned();
        let client = self.client.get_mut();
        let mut seq = 1u8;
        let plugin_auth = self
            .capabilities
            .contains(CapabilityFlags::CLIENT_PLUGIN_AUTH);
        let checkable = checkable_plugin(
            &self.ctx,
            &user,
            plugin_auth,
            request.plugin,
            request.auth_response,
        );
        let (plugin, response) = match checkable {
            Some(p) => (p, request.auth_response.to_vec()),
            None => {
                write_packet(client, seq, &auth_switch_request(&self.nonce))
                    .await
                    .map_err(SessionEnd::Client)?;
                let reply = self
                    .client
                    .next_logical_packet(1 << 16)
                    .await
                    .map_err(SessionEnd::Client)?;
                seq = reply.seq.wrapping_add(1);
                (Plugin::Native, reply.payload.to_vec())
            }
        };
        let client = self.client.get_mut();
        if !check_password(&self.ctx, &user, plugin, &self.nonce, &response) {
            self.ctx.metrics.login_failed();
            // The server resets the session on a failed COM_CHANGE_USER too (user variables,
            // temporary tables, prepared statements go; the database stays): so does msgproxy.
            if let Err(e) = self.backend.reset_connection().await {
                return Err(SessionEnd::Backend(std::io::Error::other(e.to_string())));
            }
            self.tracker.server_reset();
            let client = self.client.get_mut();
            let err = access_denied(&user, self.peer, !response.is_empty());
            write_packet(client, seq, &err.encode(true))
                .await
                .map_err(SessionEnd::Client)?;
            return Ok(());
        }
        if plugin == Plugin::CachingSha2 && !response.is_empty() {
            seq = write_packet(client, seq, &[0x01, 0x03])
                .await
                .map_err(SessionEnd::Client)?;
        }
        let target = self.backend.target.clone();
        let reply = self
            .backend
            .change_user(
                &target,
                request.database,
                request.charset,
                request.connect_attrs,
            )
            .await
            .map_err(|e| SessionEnd::Backend(std::io::Error::other(e.to_string())))?;
        match reply {
            LoginReply::Ok(ok) => {
                self.relay = Relay::new(
                    self.capabilities,
                    wire::status_flags(&ok).unwrap_or(self.relay.status),
                    self.relay.watch.clone(),
                );
                self.user = user;
                self.tracker.after_change_user(
                    request.database,
                    self.capabilities
                        .contains(CapabilityFlags::CLIENT_MULTI_STATEMENTS),
                );
                write_packet(self.client.get_mut(), seq, &ok)
                    .await
                    .map_err(SessionEnd::Client)?;
            }
            LoginReply::Err(err) => {
                write_packet(self.client.get_mut(), seq, &err)
                    .await
                    .map_err(SessionEnd::Client)?;
            }
        }
        Ok(())
    }
}
