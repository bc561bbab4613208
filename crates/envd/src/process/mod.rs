//! envd's `process.Process` service: one tonic implementation served over gRPC, gRPC-Web and
//! Connect.

mod pty;
mod spawn;
mod subscriber;
mod table;
mod tree;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use e2b_envd_proto::process::process_event::{Event, KeepAlive, StartEvent};
use e2b_envd_proto::process::process_server::Process;
use e2b_envd_proto::process::{
    CloseStdinRequest, CloseStdinResponse, ConnectRequest, ConnectResponse, ListRequest,
    ListResponse, ProcessEvent, ProcessInfo, SendInputRequest, SendInputResponse,
    SendSignalRequest, SendSignalResponse, Signal, StartRequest, StartResponse, StreamInputRequest,
    StreamInputResponse, UpdateRequest, UpdateResponse, process_input, stream_input_request,
};
use futures::{Stream, StreamExt as _};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

pub(crate) use table::ProcessTable;
use table::{ProcEntry, Subscription};

use crate::connect::{ConnectRouter, StreamMessage};
use crate::state::State;

type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The Process service implementation shared by every protocol.
#[derive(Debug, Clone)]
pub(crate) struct ProcessService {
    state: Arc<State>,
    table: Arc<ProcessTable>,
}

impl ProcessService {
    pub(crate) fn new(state: Arc<State>, table: Arc<ProcessTable>) -> Self {
        Self { state, table }
    }
}

/// Registers the eight Process procedures in a Connect router.
pub(crate) fn register_connect(router: ConnectRouter, svc: Arc<ProcessService>) -> ConnectRouter {
    macro_rules! unary {
        ($router:expr, $name:literal, $method:ident) => {{
            let s = svc.clone();
            $router.unary(concat!("/process.Process/", $name), move |req| {
                let s = s.clone();
                async move { Process::$method(&*s, req).await }
            })
        }};
    }
    let router = unary!(router, "List", list);
    let router = unary!(router, "Update", update);
    let router = unary!(router, "SendInput", send_input);
    let router = unary!(router, "SendSignal", send_signal);
    let router = unary!(router, "CloseStdin", close_stdin);
    let s = svc.clone();
    let router = router.server_stream("/process.Process/Start", move |req| {
        let s = s.clone();
        async move { Process::start(&*s, req).await }
    });
    let s = svc.clone();
    let router = router.server_stream("/process.Process/Connect", move |req| {
        let s = s.clone();
        async move { Process::connect(&*s, req).await }
    });
    let s = svc;
    router.client_stream("/process.Process/StreamInput", move |req| {
        let s = s.clone();
        async move { Process::stream_input(&*s, req).await }
    })
}

/// The output chunk of a data event and its field number in `DataEvent`.
fn output_payload(event: Option<&ProcessEvent>) -> Option<(u32, &bytes::Bytes)> {
    use e2b_envd_proto::process::process_event::{DataEvent, data_event::Output};
    match event?.event.as_ref()? {
        Event::Data(DataEvent {
            output: Some(output),
        }) => Some(match output {
            Output::Stdout(b) => (1, b),
            Output::Stderr(b) => (2, b),
            Output::Pty(b) => (3, b),
        }),
        _ => None,
    }
}

/// `{Start,Connect}Response.event` (1) → `ProcessEvent.data` (2) → `DataEvent.<output>`: the
/// chunk is the tail of the encoding and goes to the socket as its own frame.
fn split_output(event: Option<&ProcessEvent>) -> Option<(bytes::Bytes, bytes::Bytes)> {
    let (field, payload) = output_payload(event)?;
    Some((
        crate::connect::nested_bytes_prefix(&[1, 2, field], payload.len()),
        payload.clone(),
    ))
}

impl StreamMessage for StartResponse {
    fn split_payload(&self) -> Option<(bytes::Bytes, bytes::Bytes)> {
        split_output(self.event.as_ref())
    }
}

impl StreamMessage for ConnectResponse {
    fn split_payload(&self) -> Option<(bytes::Bytes, bytes::Bytes)> {
        split_output(self.event.as_ref())
    }
}

/// Longest keepalive interval accepted in `Keepalive-Ping-Interval` (one day).
pub(crate) const MAX_KEEPALIVE_SECS: u64 = 86_400;

/// The process lifetime from `Connect-Timeout-Ms` (up to 10 digits of milliseconds, as the
/// Connect protocol allows), else `grpc-timeout` (up to 8 digits and a unit, as gRPC allows).
/// `None` = unlimited. Anything else is `invalid_argument`, never an overflow.
fn process_timeout(md: &tonic::metadata::MetadataMap) -> Result<Option<Duration>, Status> {
    fn digits(s: &str, max: usize) -> Option<u64> {
        (!s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    }
    if let Some(v) = md.get(e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS) {
        let s = v.to_str().unwrap_or("").trim();
        let ms = digits(s, 10).ok_or_else(|| {
            Status::invalid_argument(format!(
                "invalid Connect-Timeout-Ms header {s:?}: want 1 to 10 digits (milliseconds)"
            ))
        })?;
        return Ok((ms > 0).then(|| Duration::from_millis(ms)));
    }
    if let Some(v) = md.get("grpc-timeout") {
        let s = v.to_str().unwrap_or("").trim();
        let bad = || {
            Status::invalid_argument(format!(
                "invalid grpc-timeout header {s:?}: want 1 to 8 digits and a unit (H, M, S, m, u, n)"
            ))
        };
        if s.len() < 2 || !s.is_char_boundary(s.len() - 1) {
            return Err(bad());
        }
        let (digits_part, unit) = s.split_at(s.len() - 1);
        let n = digits(digits_part, 8).ok_or_else(bad)?;
        let d = match unit {
            "H" => Duration::from_secs(n * 3600),
            "M" => Duration::from_secs(n * 60),
            "S" => Duration::from_secs(n),
            "m" => Duration::from_millis(n),
            "u" => Duration::from_micros(n),
            "n" => Duration::from_nanos(n),
            _ => return Err(bad()),
        };
        return Ok((!d.is_zero()).then_some(d));
    }
    Ok(None)
}

/// `Keepalive-Ping-Interval` in seconds; absent, unparsable or `0` → the configured default
/// (envd); a number above one day → `invalid_argument`.
fn keepalive_interval(
    md: &tonic::metadata::MetadataMap,
    default: Duration,
) -> Result<Duration, Status> {
    let Some(n) = requested_keepalive_secs(md) else {
        return Ok(default);
    };
    if n > MAX_KEEPALIVE_SECS {
        return Err(Status::invalid_argument(format!(
            "invalid Keepalive-Ping-Interval {n}: want 1 to {MAX_KEEPALIVE_SECS} seconds"
        )));
    }
    Ok(Duration::from_secs(n))
}

/// The positive number of seconds in `Keepalive-Ping-Interval`; `None` when the header is
/// absent, unparsable or `0` (the caller's default then applies, as in envd).
pub(crate) fn requested_keepalive_secs(md: &tonic::metadata::MetadataMap) -> Option<u64> {
    md.get(e2b_envd_proto::wire::headers::KEEPALIVE_PING_INTERVAL)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
}

/// `now + d`, or `invalid_argument` if that instant cannot be represented.
fn deadline_after(d: Duration) -> Result<Instant, Status> {
    Instant::now()
        .checked_add(d)
        .ok_or_else(|| Status::invalid_argument(format!("timeout {d:?} is too far in the future")))
}

struct StreamState {
    entry: Arc<ProcEntry>,
    start_sent: bool,
    source: Option<Subscription>,
    keepalive: Duration,
    /// One timer, reset after each event (cheaper than a new timer per event).
    keepalive_timer: Pin<Box<tokio::time::Sleep>>,
    deadline: Option<Instant>,
}

/// `start{pid}`, then live events (with keepalives) until `end`; the lifetime deadline, when
/// reached, ends the stream with `deadline_exceeded` instead.
fn event_stream(
    entry: Arc<ProcEntry>,
    source: Subscription,
    keepalive: Duration,
    deadline: Option<Instant>,
) -> impl Stream<Item = Result<ProcessEvent, Status>> + Send + 'static {
    let keepalive_timer = Box::pin(tokio::time::sleep(keepalive));
    let st = StreamState {
        entry,
        start_sent: false,
        source: Some(source),
        keepalive,
        keepalive_timer,
        deadline,
    };
    futures::stream::unfold(st, |mut st| async move {
        if !st.start_sent {
            st.start_sent = true;
            let ev = ProcessEvent {
                event: Some(Event::Start(StartEvent { pid: st.entry.pid })),
            };
            return Some((Ok(ev), st));
        }
        let deadline_err = || {
            Status::deadline_exceeded(
                "the process ran past its timeout (Connect-Timeout-Ms) and was killed",
            )
        };
        let item = match st.source.as_mut()? {
            Subscription::Ended(end) => {
                let end = end.clone();
                st.source = None;
                Ok(ProcessEvent {
                    event: Some(Event::End(end)),
                })
            }
            Subscription::Live(rx) => {
                let sleep_deadline = async {
                    match st.deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    _ = sleep_deadline => {
                        st.source = None;
                        Err(deadline_err())
                    }
                    ev = rx.recv() => match ev {
                        Some(Event::End(end)) => {
                            st.source = None;
                            if st.deadline.is_some() && st.entry.timed_out() {
                                Err(deadline_err())
                            } else {
                                Ok(ProcessEvent { event: Some(Event::End(end)) })
                            }
                        }
                        Some(ev) => Ok(ProcessEvent { event: Some(ev) }),
                        None if rx.is_lagged() => {
                            st.source = None;
                            Err(Status::resource_exhausted(format!(
                                "this stream fell behind the process's output (its queue of {} events / {} MiB stayed full for {:?} while other streams kept up) and was dropped; the process goes on: read faster, or Connect again for live output",
                                subscriber::SUBSCRIBER_BUFFER,
                                subscriber::SUBSCRIBER_BYTE_BUDGET >> 20,
                                subscriber::subscriber_lag_timeout(),
                            )))
                        }
                        None => return None,
                    },
                    _ = st.keepalive_timer.as_mut() => Ok(ProcessEvent { event: Some(Event::Keepalive(KeepAlive {})) }),
                }
            }
        };
        if let Some(next) = Instant::now().checked_add(st.keepalive) {
            st.keepalive_timer.as_mut().reset(next);
        }
        Some((item, st))
    })
}

#[tonic::async_trait]
impl Process for ProcessService {
    async fn list(&self, _request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let processes = self
            .table
            .live()
            .into_iter()
            .map(|e| ProcessInfo {
                config: Some(e.config.clone()),
                pid: e.pid,
                tag: e.tag.clone(),
            })
            .collect();
        Ok(Response::new(ListResponse { processes }))
    }

    type ConnectStream = EventStream<ConnectResponse>;

    async fn connect(
        &self,
        request: Request<ConnectRequest>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let keepalive = keepalive_interval(request.metadata(), self.state.keepalive())?;
        let entry = self.table.find_any(request.get_ref().process.as_ref())?;
        let source = entry.subscribe();
        let stream = event_stream(entry, source, keepalive, None)
            .map(|r| r.map(|ev| ConnectResponse { event: Some(ev) }));
        Ok(Response::new(Box::pin(stream)))
    }

    type StartStream = EventStream<StartResponse>;

    async fn start(
        &self,
        request: Request<StartRequest>,
    ) -> Result<Response<Self::StartStream>, Status> {
        if self.table.is_closed() {
            return Err(Status::unavailable("envd is shutting down"));
        }
        let headers = request.metadata().clone().into_headers();
        let user = self
            .state
            .user_from_headers(&headers)
            .map_err(Status::unauthenticated)?;
        let timeout = process_timeout(request.metadata())?;
        let keepalive = keepalive_interval(request.metadata(), self.state.keepalive())?;
        let deadline = timeout.map(deadline_after).transpose()?;
        let req = request.into_inner();
        let spawned = spawn::spawn(&self.state, &user, &req, self.table.tracker()).await?;
        let config = req.process.clone().unwrap_or_default();
        let (entry, rx) = self.table.register(
            spawned,
            config,
            req.tag.clone(),
            deadline,
            self.state.exited_retention(),
        );
        let stream = event_stream(entry, Subscription::Live(rx), keepalive, deadline)
            .map(|r| r.map(|ev| StartResponse { event: Some(ev) }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn update(
        &self,
        request: Request<UpdateRequest>,
    ) -> Result<Response<UpdateResponse>, Status> {
        let req = request.into_inner();
        let entry = self.table.find_live(req.process.as_ref())?;
        if let Some(pty) = req.pty {
            let size = pty
                .size
                .ok_or_else(|| Status::invalid_argument("pty.size is required to resize a tty"))?;
            entry.resize(size.cols, size.rows)?;
        }
        Ok(Response::new(UpdateResponse {}))
    }

    async fn stream_input(
        &self,
        request: Request<tonic::Streaming<StreamInputRequest>>,
    ) -> Result<Response<StreamInputResponse>, Status> {
        let mut stream = request.into_inner();
        let mut entry: Option<Arc<ProcEntry>> = None;
        while let Some(msg) = stream.message().await? {
            match msg.event {
                Some(stream_input_request::Event::Start(start)) => {
                    entry = Some(self.table.find_live(start.process.as_ref())?);
                }
                Some(stream_input_request::Event::Data(data)) => {
                    let Some(e) = entry.as_ref() else {
                        return Err(Status::failed_precondition(
                            "StreamInput: the first message must be start{process}",
                        ));
                    };
                    write_input(e, data.input).await?;
                }
                Some(stream_input_request::Event::Keepalive(_)) | None => {}
            }
        }
        Ok(Response::new(StreamInputResponse {}))
    }

    async fn send_input(
        &self,
        request: Request<SendInputRequest>,
    ) -> Result<Response<SendInputResponse>, Status> {
        let req = request.into_inner();
        let entry = self.table.find_live(req.process.as_ref())?;
        write_input(&entry, req.input).await?;
        Ok(Response::new(SendInputResponse {}))
    }

    async fn send_signal(
        &self,
        request: Request<SendSignalRequest>,
    ) -> Result<Response<SendSignalResponse>, Status> {
        let req = request.into_inner();
        let signal = match Signal::try_from(req.signal) {
            Ok(Signal::Sigkill) => nix::sys::signal::Signal::SIGKILL,
            Ok(Signal::Sigterm) => nix::sys::signal::Signal::SIGTERM,
            _ => {
                return Err(Status::unimplemented(format!(
                    "invalid signal: {}",
                    req.signal
                )));
            }
        };
        let entry = self.table.find_live(req.process.as_ref())?;
        entry.signal(signal)?;
        Ok(Response::new(SendSignalResponse {}))
    }

    async fn close_stdin(
        &self,
        request: Request<CloseStdinRequest>,
    ) -> Result<Response<CloseStdinResponse>, Status> {
        let req = request.into_inner();
        let entry = self.table.find_live(req.process.as_ref())?;
        entry.close_stdin().await?;
        Ok(Response::new(CloseStdinResponse {}))
    }
}

async fn write_input(
    entry: &ProcEntry,
    input: Option<e2b_envd_proto::process::ProcessInput>,
) -> Result<(), Status> {
    match input.and_then(|i| i.input) {
        Some(process_input::Input::Stdin(data)) => entry.write_stdin(&data).await,
        Some(process_input::Input::Pty(data)) => entry.write_pty(&data).await,
        None => Err(Status::unimplemented(
            "invalid input type: the input is empty",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split encoding (prefix, then the chunk) is byte for byte what prost writes, for
    /// every output kind and for lengths around each varint boundary.
    #[test]
    fn split_output_matches_prost() {
        use e2b_envd_proto::process::process_event::{DataEvent, data_event::Output};
        use prost::Message as _;
        for len in [
            0usize, 1, 100, 127, 128, 16_381, 16_384, 2_097_152, 5_000_000,
        ] {
            let chunk = bytes::Bytes::from(vec![7u8; len]);
            for output in [
                Output::Stdout(chunk.clone()),
                Output::Stderr(chunk.clone()),
                Output::Pty(chunk.clone()),
            ] {
                let event = Some(ProcessEvent {
                    event: Some(Event::Data(DataEvent {
                        output: Some(output),
                    })),
                });
                let start = StartResponse {
                    event: event.clone(),
                };
                let connect = ConnectResponse { event };
                for (split, whole) in [
                    (start.split_payload(), start.encode_to_vec()),
                    (connect.split_payload(), connect.encode_to_vec()),
                ] {
                    let (head, payload) = split.expect("a data event splits");
                    assert_eq!(payload.len(), len);
                    assert_eq!([&head[..], &payload[..]].concat(), whole, "len {len}");
                }
            }
        }
        let start = StartResponse {
            event: Some(ProcessEvent {
                event: Some(Event::Start(StartEvent { pid: 1 })),
            }),
        };
        assert!(start.split_payload().is_none());
    }

    #[test]
    fn timeouts() {
        let mut md = tonic::metadata::MetadataMap::new();
        assert_eq!(process_timeout(&md).ok().flatten(), None);
        md.insert(
            "grpc-timeout",
            tonic::metadata::MetadataValue::from_static("5S"),
        );
        assert_eq!(
            process_timeout(&md).ok().flatten(),
            Some(Duration::from_secs(5))
        );
        md.insert(
            e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS,
            tonic::metadata::MetadataValue::from_static("1500"),
        );
        assert_eq!(
            process_timeout(&md).ok().flatten(),
            Some(Duration::from_millis(1500))
        );
        md.insert(
            e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS,
            tonic::metadata::MetadataValue::from_static("x"),
        );
        assert!(process_timeout(&md).is_err());
    }
}
