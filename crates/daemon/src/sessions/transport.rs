//! The runtime adapter: an rmcp transport over channels, which feeds one hosted runtime session
//! or call its client messages and hands every server message to retention (`emit`).

use std::sync::Arc;

use rmcp::{
    RoleServer, ServiceExt,
    model::{ClientJsonRpcMessage, GetExtensions, JsonRpcMessage, ServerJsonRpcMessage},
    service::OriginatingRequestId,
    transport::Transport,
};
use runtime::{McpServer, Principal};
use tokio::sync::mpsc;

use super::{Host, HostedSessions};

/// An rmcp transport feeding one runtime session.
pub(super) struct ChannelTransport {
    pub(super) rx: mpsc::Receiver<ClientJsonRpcMessage>,
    pub(super) host: Host,
    pub(super) sessions: Arc<HostedSessions>,
}

impl HostedSessions {
    /// Serves the built-in runtime to `host` (a hosted session or call) over `rx` as
    /// `principal`, with the profile of the host's role. The future ends when the MCP service
    /// ends or the host is stopped, whichever comes first; what follows is the caller's.
    pub(super) fn serve_runtime(
        self: &Arc<Self>,
        host: &Host,
        rx: mpsc::Receiver<ClientJsonRpcMessage>,
        principal: &str,
    ) -> impl Future<Output = ()> + Send + 'static {
        let access = self.runtime.access(Some(crate::role_profile(host.role)));
        let server = McpServer::new(access, Principal::named(principal));
        let transport = ChannelTransport {
            rx,
            host: host.clone(),
            sessions: self.clone(),
        };
        let stop = host.stop.clone();
        async move {
            tokio::select! {
                r = server.serve(transport) => {
                    if let Ok(running) = r {
                        tokio::select! {
                            _ = running.waiting() => {}
                            _ = stop.cancelled() => {}
                        }
                    }
                }
                _ = stop.cancelled() => {}
            }
        }
    }
}

/// The session's output cannot fail; this type only satisfies the transport trait.
#[derive(Debug, thiserror::Error)]
#[error("session closed")]
pub(super) struct Closed;

impl Transport<RoleServer> for ChannelTransport {
    type Error = Closed;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let related = match &item {
            JsonRpcMessage::Request(r) => r
                .request
                .extensions()
                .get::<OriginatingRequestId>()
                .map(|o| o.0.clone().into_json_value()),
            _ => None,
        };
        if let Ok(v) = serde_json::to_value(&item) {
            self.sessions.emit(&self.host, v, related);
        }
        std::future::ready(Ok(()))
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        tokio::select! {
            m = self.rx.recv() => m,
            _ = self.host.stop.cancelled() => None,
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}
