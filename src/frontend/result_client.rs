//! The session's client connection as the destination of a streamed result (a message `STREAM`): the
//! stream frames its packets, the session writes them here.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use crate::protocol::packet::PacketReader;
use crate::protocol::streamed_result::ResultClient;

impl<S: AsyncRead + AsyncWrite + Unpin> ResultClient for PacketReader<S> {
    async fn send(&mut self, packets: &[u8]) -> std::io::Result<()> {
        let w = self.get_mut();
        w.write_all(packets).await?;
        w.flush().await
    }

    async fn left(&mut self) {
        // `fill` only appends what arrives to the reader's buffer, so dropping it mid-read loses nothing.
        if let Ok(n) = self.fill().await {
            if n > 0 {
                debug!("stream client sent a command while streaming; closing the stream");
            }
        }
    }
}
