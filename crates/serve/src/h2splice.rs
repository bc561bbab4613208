//! The edge's fast path for h2c: once the first request of an HTTP/2 (prior knowledge)
//! connection names a running sandbox, the connection is bound to that sandbox's envd and its
//! bytes are relayed without a second HTTP/2 session.
//!
//! - envd → client (the bulk direction: stdout, downloads) is copied as it comes, in large
//!   reads; the relay only walks the 9-byte frame headers so that it can put a frame of its own
//!   between two of envd's.
//! - client → envd is read frame by frame. Every header block is HPACK-decoded (the relay
//!   must see which sandbox each new stream names) and sent on re-encoded as literals that
//!   never touch envd's dynamic table, so the relay may drop a block without the two tables
//!   drifting apart. DATA and control frames pass unchanged.
//! - A later stream that names another sandbox (or a port other than envd's, or a sandbox that
//!   is no longer running) never reaches envd: the client gets E2B's 502 answer on that stream
//!   from the relay, its frames are dropped, and the flow-control windows are kept balanced
//!   (the bytes of dropped DATA are handed back to the client with a WINDOW_UPDATE; the bytes
//!   of the relay's own answers are taken out of the client's next connection WINDOW_UPDATE).
//!
//! The clients that speak h2c to the edge (our Rust client, gRPC tools) open one connection
//! per sandbox; a client that multiplexes sandboxes over one connection gets the 502 for the
//! others and must open a connection per sandbox (documented in docs/control-plane.md).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

use crate::sandboxes::{Registry, Route};

/// The client connection preface of HTTP/2.
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const FRAME_HEADER: usize = 9;
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

/// The largest header block (HEADERS + CONTINUATION) the relay collects.
const MAX_HEADER_BLOCK: usize = 256 * 1024;
/// HPACK dynamic table the relay's decoder allows (envd advertises 4 KiB).
const MAX_HPACK_TABLE: usize = 64 * 1024;
/// Frame payload the relay writes (the minimum every peer accepts).
const OUT_FRAME: usize = 16 * 1024;
/// Streams refused on one connection and still open; more closes the connection.
const MAX_REFUSED: usize = 1024;
/// The most requests one connection may have refused in all (each id is remembered so that a
/// later header block on it, which envd would take for a new request, is never forwarded).
const MAX_REFUSED_TOTAL: usize = 16 * 1024;
/// Read size of the bulk direction.
const DOWN_BUF: usize = 512 * 1024;
const UP_BUF: usize = 64 * 1024;

/// The header list of one request, names lower-case as HTTP/2 sends them.
pub(crate) type HeaderList = Vec<(Vec<u8>, Vec<u8>)>;

/// What the first bytes of a connection say.
#[derive(Debug)]
pub(crate) enum Peeked {
    /// Not HTTP/2 prior knowledge (HTTP/1.1).
    NotH2,
    /// An h2c connection whose first request is not complete in these bytes yet.
    NeedMore,
    /// The first request's headers.
    First(HeaderList),
    /// An h2c connection the relay cannot read (bad frame or HPACK): left to the HTTP/2 server.
    Unreadable,
}

fn frame_header(b: &[u8]) -> (usize, u8, u8, u32) {
    let len = (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]);
    let stream = u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff;
    (len, b[3], b[4], stream)
}

/// The header block fragment of a HEADERS payload (padding and priority removed).
fn headers_fragment(flags: u8, payload: &[u8]) -> Option<&[u8]> {
    let mut p = payload;
    let mut pad = 0usize;
    if flags & PADDED != 0 {
        pad = usize::from(*p.first()?);
        p = &p[1..];
    }
    if flags & PRIORITY_FLAG != 0 {
        p = p.get(5..)?;
    }
    if pad > p.len() {
        return None;
    }
    Some(&p[..p.len() - pad])
}

fn new_decoder() -> loona_hpack::Decoder<'static> {
    let mut d = loona_hpack::Decoder::new();
    d.set_max_allowed_table_size(MAX_HPACK_TABLE);
    d
}

/// Reads the first request of an h2c connection from its first bytes (`MSG_PEEK`ed).
pub(crate) fn peek_first(buf: &[u8]) -> Peeked {
    let n = buf.len().min(PREFACE.len());
    if buf[..n] != PREFACE[..n] {
        return Peeked::NotH2;
    }
    if buf.len() < PREFACE.len() {
        return Peeked::NeedMore;
    }
    let mut at = PREFACE.len();
    let mut block: Option<Vec<u8>> = None;
    loop {
        let Some(h) = buf.get(at..at + FRAME_HEADER) else {
            return Peeked::NeedMore;
        };
        let (len, kind, flags, _) = frame_header(h);
        let Some(payload) = buf.get(at + FRAME_HEADER..at + FRAME_HEADER + len) else {
            return if len > MAX_HEADER_BLOCK {
                Peeked::Unreadable
            } else {
                Peeked::NeedMore
            };
        };
        at += FRAME_HEADER + len;
        let done = match (kind, &mut block) {
            (HEADERS, None) => {
                let Some(frag) = headers_fragment(flags, payload) else {
                    return Peeked::Unreadable;
                };
                block = Some(frag.to_vec());
                flags & END_HEADERS != 0
            }
            (CONTINUATION, Some(b)) => {
                b.extend_from_slice(payload);
                flags & END_HEADERS != 0
            }
            (_, Some(_)) | (CONTINUATION, None) => return Peeked::Unreadable,
            _ => false,
        };
        if done {
            let b = block.unwrap_or_default();
            return match new_decoder().decode(&b) {
                Ok(list) => Peeked::First(list),
                Err(_) => Peeked::Unreadable,
            };
        }
    }
}

/// The value of header `name` in `list`.
pub(crate) fn header<'a>(list: &'a HeaderList, name: &str) -> Option<&'a str> {
    list.iter()
        .find(|(n, _)| n.as_slice() == name.as_bytes())
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
}

/// Decides, for each new stream, whether it may go to the bound sandbox.
pub(crate) type Admit = Arc<dyn Fn(&HeaderList) -> Result<(), String> + Send + Sync>;

/// Relays `client` (its first bytes not yet read) to the envd at `addr` until either side
/// closes. `admit` checks each new stream's headers (the sandbox they name must be the bound
/// one and still running).
pub(crate) async fn relay(client: TcpStream, envd: TcpStream, sandbox_id: String, admit: Admit) {
    let _ = envd.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (er, ew) = envd.into_split();
    let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
    let down = tokio::spawn(downstream(er, cw, rx));
    let mut up = Upstream {
        decoder: new_decoder(),
        refused: HashSet::new(),
        refused_ever: HashSet::new(),
        envd_max: 0,
        debt: 0,
        sandbox_id,
        admit,
        tx,
    };
    let r = up.run(cr, ew).await;
    if let Err(e) = r {
        tracing::debug!(sandbox = %up.sandbox_id, "edge h2 relay: {e}");
        down.abort();
        return;
    }
    // The client finished sending; envd closes after it has answered.
    drop(up);
    let _ = down.await;
}

/// Copies envd's bytes to the client, putting the relay's own frames between envd's frames.
async fn downstream(
    mut er: OwnedReadHalf,
    mut cw: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Vec<u8>>,
) {
    let mut buf = vec![0u8; DOWN_BUF];
    let mut walk = Walker::default();
    let mut open = true;
    loop {
        tokio::select! {
            biased;
            inj = rx.recv(), if open && walk.at_boundary() => match inj {
                Some(frames) => {
                    if cw.write_all(&frames).await.is_err() {
                        return;
                    }
                }
                None => open = false,
            },
            n = er.read(&mut buf) => {
                let n = match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                if rx.is_empty() {
                    walk.skip(chunk);
                    if cw.write_all(chunk).await.is_err() {
                        return;
                    }
                    continue;
                }
                // Something to put in: write up to each frame boundary and slot it there.
                let mut off = 0;
                while off < n {
                    let k = walk.through_boundary(&chunk[off..]);
                    if cw.write_all(&chunk[off..off + k]).await.is_err() {
                        return;
                    }
                    off += k;
                    if walk.at_boundary() {
                        while let Ok(frames) = rx.try_recv() {
                            if cw.write_all(&frames).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
    let _ = cw.shutdown().await;
}

/// Tracks frame boundaries in a byte stream.
#[derive(Default)]
struct Walker {
    /// Bytes of the current frame's header seen so far (0 = at a boundary or in a payload).
    hdr: [u8; FRAME_HEADER],
    hdr_len: usize,
    /// Payload bytes of the current frame still to come.
    left: usize,
}

impl Walker {
    fn at_boundary(&self) -> bool {
        self.hdr_len == 0 && self.left == 0
    }

    /// Consumes `data` up to and including the end of the current frame (or all of it).
    fn through_boundary(&mut self, data: &[u8]) -> usize {
        let mut off = 0;
        loop {
            if self.left > 0 {
                let k = self.left.min(data.len() - off);
                self.left -= k;
                off += k;
                return off;
            }
            if off == data.len() {
                return off;
            }
            let k = (FRAME_HEADER - self.hdr_len).min(data.len() - off);
            self.hdr[self.hdr_len..self.hdr_len + k].copy_from_slice(&data[off..off + k]);
            self.hdr_len += k;
            off += k;
            if self.hdr_len < FRAME_HEADER {
                return off;
            }
            self.hdr_len = 0;
            self.left = frame_header(&self.hdr).0;
            if self.left == 0 {
                return off;
            }
        }
    }

    fn skip(&mut self, data: &[u8]) {
        let mut off = 0;
        while off < data.len() {
            off += self.through_boundary(&data[off..]);
        }
    }
}

struct Upstream {
    decoder: loona_hpack::Decoder<'static>,
    /// Streams answered by the relay whose request the client has not finished.
    refused: HashSet<u32>,
    /// Every stream the relay answered itself: envd never saw them open, so a later header
    /// block on one (a repeated HEADERS, "trailers") would be a new request to envd.
    refused_ever: HashSet<u32>,
    /// The highest stream id forwarded to envd. A header block on a higher id opens a request
    /// at envd (HTTP/2 stream ids only grow), whatever the client opened before: only such a
    /// block is checked with `admit`; one on a lower id is trailers of an open stream (or a
    /// protocol error envd answers as one).
    envd_max: u32,
    /// Bytes of the relay's own DATA the client will credit back to envd: taken out of the
    /// client's connection WINDOW_UPDATEs, since envd never sent them.
    debt: u64,
    sandbox_id: String,
    admit: Admit,
    tx: mpsc::Sender<Vec<u8>>,
}

/// A frame header plus what the relay does with its payload.
enum Frame {
    /// Payload forwarded as it arrives.
    Pass(usize),
    /// Payload dropped; `credit` = DATA bytes to hand back to the client.
    Drop { left: usize, credit: bool },
    /// Payload collected (HEADERS, CONTINUATION, WINDOW_UPDATE, RST_STREAM, PRIORITY).
    Collect {
        kind: u8,
        flags: u8,
        stream: u32,
        len: usize,
    },
}

impl Upstream {
    async fn run(&mut self, mut cr: OwnedReadHalf, mut ew: OwnedWriteHalf) -> Result<(), String> {
        let mut buf = vec![0u8; UP_BUF];
        let mut out: Vec<u8> = Vec::with_capacity(UP_BUF);
        let mut preface = 0usize;
        let mut hdr = [0u8; FRAME_HEADER];
        let mut hdr_len = 0usize;
        let mut cur: Option<Frame> = None;
        let mut collect: Vec<u8> = Vec::new();
        // A header block split into HEADERS + CONTINUATION: (stream, flags of HEADERS, bytes).
        let mut block: Option<(u32, u8, Vec<u8>)> = None;
        loop {
            let n = cr
                .read(&mut buf)
                .await
                .map_err(|e| format!("read from client: {e}"))?;
            if n == 0 {
                let _ = ew.shutdown().await;
                return Ok(());
            }
            let mut data = &buf[..n];
            if preface < PREFACE.len() {
                let k = (PREFACE.len() - preface).min(data.len());
                out.extend_from_slice(&data[..k]);
                preface += k;
                data = &data[k..];
            }
            loop {
                // A collected frame complete (a zero-length one completes with its header)?
                if let Some(Frame::Collect {
                    kind,
                    flags,
                    stream,
                    len,
                }) = cur
                    && collect.len() == len
                {
                    cur = None;
                    let payload = std::mem::take(&mut collect);
                    self.collected(kind, flags, stream, payload, &mut block, &mut out)
                        .await?;
                    continue;
                }
                if data.is_empty() {
                    break;
                }
                match cur.take() {
                    None => {
                        let k = (FRAME_HEADER - hdr_len).min(data.len());
                        hdr[hdr_len..hdr_len + k].copy_from_slice(&data[..k]);
                        hdr_len += k;
                        data = &data[k..];
                        if hdr_len == FRAME_HEADER {
                            hdr_len = 0;
                            let f = self.classify(&hdr, block.is_some())?;
                            match f {
                                Frame::Pass(0) => out.extend_from_slice(&hdr),
                                Frame::Pass(_) => {
                                    out.extend_from_slice(&hdr);
                                    cur = Some(f);
                                }
                                Frame::Drop { left: 0, .. } => {}
                                _ => cur = Some(f),
                            }
                        }
                    }
                    Some(Frame::Pass(left)) => {
                        let k = left.min(data.len());
                        out.extend_from_slice(&data[..k]);
                        data = &data[k..];
                        if left > k {
                            cur = Some(Frame::Pass(left - k));
                        }
                    }
                    Some(Frame::Drop { left, credit }) => {
                        let k = left.min(data.len());
                        data = &data[k..];
                        if credit && k > 0 {
                            self.credit(k).await?;
                        }
                        if left > k {
                            cur = Some(Frame::Drop {
                                left: left - k,
                                credit,
                            });
                        }
                    }
                    Some(Frame::Collect {
                        kind,
                        flags,
                        stream,
                        len,
                    }) => {
                        let k = (len - collect.len()).min(data.len());
                        collect.extend_from_slice(&data[..k]);
                        data = &data[k..];
                        cur = Some(Frame::Collect {
                            kind,
                            flags,
                            stream,
                            len,
                        });
                    }
                }
            }
            if !out.is_empty() {
                ew.write_all(&out)
                    .await
                    .map_err(|e| format!("write to envd: {e}"))?;
                out.clear();
            }
        }
    }

    fn classify(&mut self, hdr: &[u8; FRAME_HEADER], in_block: bool) -> Result<Frame, String> {
        let (len, kind, flags, stream) = frame_header(hdr);
        if in_block && kind != CONTINUATION {
            return Err("a frame inside a header block (protocol error)".into());
        }
        let refused = self.refused.contains(&stream);
        Ok(match kind {
            HEADERS | CONTINUATION => {
                if len > MAX_HEADER_BLOCK {
                    return Err(format!("a header block over {MAX_HEADER_BLOCK} bytes"));
                }
                Frame::Collect {
                    kind,
                    flags,
                    stream,
                    len,
                }
            }
            DATA if refused => {
                if flags & END_STREAM != 0 {
                    self.refused.remove(&stream);
                }
                Frame::Drop {
                    left: len,
                    credit: true,
                }
            }
            WINDOW_UPDATE if stream == 0 && self.debt > 0 && len == 4 => Frame::Collect {
                kind,
                flags,
                stream,
                len,
            },
            PRIORITY | RST_STREAM | WINDOW_UPDATE if refused => {
                if kind == RST_STREAM {
                    self.refused.remove(&stream);
                }
                Frame::Drop {
                    left: len,
                    credit: false,
                }
            }
            _ => Frame::Pass(len),
        })
    }

    async fn collected(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: Vec<u8>,
        block: &mut Option<(u32, u8, Vec<u8>)>,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        match kind {
            WINDOW_UPDATE => {
                // The client's connection credit, less what the relay's own answers used.
                let inc = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & 0x7fff_ffff;
                let take = self.debt.min(u64::from(inc));
                self.debt -= take;
                let rest = inc - take as u32;
                if rest > 0 {
                    push_frame(out, WINDOW_UPDATE, 0, 0, &rest.to_be_bytes());
                }
                Ok(())
            }
            HEADERS => {
                let frag = headers_fragment(flags, &payload)
                    .ok_or("a malformed HEADERS frame")?
                    .to_vec();
                *block = Some((stream, flags, frag));
                if flags & END_HEADERS != 0 {
                    self.finish_block(block, out).await
                } else {
                    Ok(())
                }
            }
            CONTINUATION => {
                let Some((s, _, b)) = block.as_mut() else {
                    return Err("CONTINUATION without HEADERS".into());
                };
                if *s != stream {
                    return Err("CONTINUATION on another stream".into());
                }
                if b.len() + payload.len() > MAX_HEADER_BLOCK {
                    return Err(format!("a header block over {MAX_HEADER_BLOCK} bytes"));
                }
                b.extend_from_slice(&payload);
                if flags & END_HEADERS != 0 {
                    self.finish_block(block, out).await
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    async fn finish_block(
        &mut self,
        block: &mut Option<(u32, u8, Vec<u8>)>,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let Some((stream, flags, bytes)) = block.take() else {
            return Ok(());
        };
        let list = self
            .decoder
            .decode(&bytes)
            .map_err(|e| format!("HPACK: {e}"))?;
        let end_stream = flags & END_STREAM != 0;
        if self.refused_ever.contains(&stream) {
            // Never opened at envd: forwarding it would open it there, unchecked.
            if end_stream {
                self.refused.remove(&stream);
            }
            return Ok(());
        }
        if stream > self.envd_max {
            if let Err(message) = (self.admit)(&list) {
                return self.refuse(stream, end_stream, &message).await;
            }
            self.envd_max = stream;
        }
        encode_headers(out, stream, end_stream, &list);
        Ok(())
    }

    /// Hands `n` bytes of dropped DATA back to the client (connection window).
    async fn credit(&mut self, n: usize) -> Result<(), String> {
        let mut frame = Vec::with_capacity(FRAME_HEADER + 4);
        push_frame(&mut frame, WINDOW_UPDATE, 0, 0, &(n as u32).to_be_bytes());
        self.tx
            .send(frame)
            .await
            .map_err(|_| "the client side closed".to_string())
    }

    /// Answers `stream` with E2B's 502 instead of sending it to envd.
    async fn refuse(&mut self, stream: u32, end_stream: bool, message: &str) -> Result<(), String> {
        tracing::debug!(sandbox = %self.sandbox_id, stream, "edge h2 relay: refused: {message}");
        let body = serde_json::json!({
            "sandboxId": self.sandbox_id,
            "message": message,
            "code": 502,
        })
        .to_string();
        let list: HeaderList = vec![
            (b":status".to_vec(), b"502".to_vec()),
            (b"content-type".to_vec(), b"application/json".to_vec()),
            (
                b"content-length".to_vec(),
                body.len().to_string().into_bytes(),
            ),
        ];
        if self.refused_ever.len() >= MAX_REFUSED_TOTAL {
            return Err("too many refused requests on one connection".into());
        }
        self.refused_ever.insert(stream);
        let mut frames = Vec::new();
        encode_headers(&mut frames, stream, false, &list);
        push_frame(&mut frames, DATA, END_STREAM, stream, body.as_bytes());
        if !end_stream {
            if self.refused.len() >= MAX_REFUSED {
                return Err("too many refused streams".into());
            }
            self.refused.insert(stream);
            // NO_ERROR: the answer is complete, the rest of the request is not wanted.
            push_frame(&mut frames, RST_STREAM, 0, stream, &0u32.to_be_bytes());
        }
        self.debt += body.len() as u64;
        self.tx
            .send(frames)
            .await
            .map_err(|_| "the client side closed".to_string())
    }
}

fn push_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len();
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

/// HPACK integer with an `n`-bit prefix whose high bits are `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A header list as HEADERS (+ CONTINUATION) frames, every field a literal without indexing
/// (envd's dynamic table stays empty), strings not Huffman-coded.
fn encode_headers(out: &mut Vec<u8>, stream: u32, end_stream: bool, list: &HeaderList) {
    let mut block = Vec::new();
    for (name, value) in list {
        block.push(0x00);
        hpack_int(&mut block, 0, 7, name.len());
        block.extend_from_slice(name);
        hpack_int(&mut block, 0, 7, value.len());
        block.extend_from_slice(value);
    }
    let mut chunks = block.chunks(OUT_FRAME).peekable();
    let mut first = true;
    if block.is_empty() {
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        push_frame(out, HEADERS, flags, stream, &[]);
        return;
    }
    while let Some(c) = chunks.next() {
        let last = chunks.peek().is_none();
        let mut flags = if last { END_HEADERS } else { 0 };
        let kind = if first {
            if end_stream {
                flags |= END_STREAM;
            }
            HEADERS
        } else {
            CONTINUATION
        };
        push_frame(out, kind, flags, stream, c);
        first = false;
    }
}

/// How long the edge waits for an h2c connection's first request before leaving the
/// connection to the HTTP/2 server.
pub(crate) const PEEK_DEADLINE: Duration = Duration::from_secs(2);

/// `MSG_PEEK`s the connection until its first request is complete (or it is not h2c).
///
/// Peeked bytes stay in the socket, so the socket stays readable and waiting for readiness
/// alone would spin. Each peek that finds nothing new therefore clears tokio's readiness (inside
/// `try_io`, which clears it only if no new event came in meanwhile) and waits for the next
/// one: the first request is seen as soon as its last byte arrives, with no polling delay (a
/// client's preface and its first HEADERS often come in two writes).
pub(crate) async fn peek(stream: &TcpStream) -> Peeked {
    use std::os::fd::AsRawFd as _;
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + PEEK_DEADLINE;
    let fd = stream.as_raw_fd();
    let mut last = 0usize;
    loop {
        if tokio::time::timeout_at(deadline, stream.readable())
            .await
            .is_err()
        {
            return Peeked::NeedMore;
        }
        let peeked = stream.try_io(tokio::io::Interest::READABLE, || {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes and `fd` is the open,
            // non-blocking socket `stream` owns for the whole call.
            let n = unsafe {
                libc::recv(
                    fd,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_PEEK | libc::MSG_DONTWAIT,
                )
            };
            match usize::try_from(n) {
                Err(_) => Err(std::io::Error::last_os_error()),
                // Nothing new since the last look: clear the readiness and wait for more.
                Ok(n) if n == last && n > 0 => Err(std::io::ErrorKind::WouldBlock.into()),
                Ok(n) => Ok(n),
            }
        });
        let n = match peeked {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Peeked::NeedMore,
        };
        if n == 0 {
            return Peeked::NotH2;
        }
        last = n;
        match peek_first(&buf[..n]) {
            Peeked::NeedMore if n == buf.len() => return Peeked::Unreadable,
            Peeked::NeedMore => {}
            other => return other,
        }
    }
}

/// The registry lookup every new stream goes through.
pub(crate) fn route_is(registry: &Registry, id: &str, addr: SocketAddr) -> bool {
    matches!(registry.route(id), Route::Envd(a) if a == addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walker_finds_boundaries_across_reads() {
        let mut s = Vec::new();
        push_frame(&mut s, DATA, 0, 1, &[7u8; 100]);
        push_frame(&mut s, DATA, 0, 1, &[]);
        push_frame(&mut s, HEADERS, 4, 1, &[1, 2, 3]);
        for split in 0..s.len() {
            let mut w = Walker::default();
            let mut boundaries = Vec::new();
            let mut off = 0;
            for part in [&s[..split], &s[split..]] {
                let mut o = 0;
                while o < part.len() {
                    o += w.through_boundary(&part[o..]);
                    if w.at_boundary() {
                        boundaries.push(off + o);
                    }
                }
                off += part.len();
            }
            boundaries.dedup();
            assert_eq!(boundaries, vec![109, 118, 130], "split at {split}");
        }
    }

    #[test]
    fn headers_round_trip_through_the_relay_encoding() {
        let list: HeaderList = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (
                e2b_envd_proto::wire::headers::SANDBOX_ID
                    .as_bytes()
                    .to_vec(),
                b"abc".to_vec(),
            ),
            (b"x-long".to_vec(), vec![b'v'; 40_000]),
        ];
        let mut out = Vec::new();
        encode_headers(&mut out, 3, true, &list);
        let mut bytes = PREFACE.to_vec();
        bytes.extend_from_slice(&out);
        match peek_first(&bytes) {
            Peeked::First(got) => assert_eq!(got, list),
            other => panic!("expected the header list, got {other:?}"),
        }
        let (_, kind, flags, stream) = frame_header(&out);
        assert_eq!((kind, flags, stream), (HEADERS, END_STREAM, 3));
    }

    /// One frame a hostile client may send: any kind, flags and stream, a short payload, or a
    /// well-formed request for the bound sandbox or another one.
    #[derive(Debug, Clone)]
    enum Wild {
        Raw(u8, u8, u32, Vec<u8>),
        Request { stream: u32, other: bool },
    }

    fn wild() -> impl proptest::strategy::Strategy<Value = Wild> {
        use proptest::prelude::*;
        prop_oneof![
            (
                0u8..12,
                any::<u8>(),
                0u32..8,
                proptest::collection::vec(any::<u8>(), 0..48)
            )
                .prop_map(|(k, f, s, p)| Wild::Raw(k, f, s, p)),
            (1u32..12, any::<bool>()).prop_map(|(s, o)| Wild::Request {
                stream: s * 2 + 1,
                other: o
            }),
        ]
    }

    fn request(stream: u32, sandbox: &str) -> Vec<u8> {
        let list: HeaderList = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":path".to_vec(), b"/process.Process/List".to_vec()),
            (
                e2b_envd_proto::wire::headers::SANDBOX_ID
                    .as_bytes()
                    .to_vec(),
                sandbox.as_bytes().to_vec(),
            ),
        ];
        let mut out = Vec::new();
        encode_headers(&mut out, stream, true, &list);
        out
    }

    /// Every request envd could see in what the relay sent it: the header blocks that open a new
    /// stream (ids only grow in HTTP/2; a later block on an open stream is its trailers), HPACK
    /// decoded in order as envd's own HTTP/2 server would, until the first undecodable block.
    fn requests_seen_by_envd(bytes: &[u8]) -> Vec<HeaderList> {
        let mut out = Vec::new();
        let Some(mut rest) = bytes.strip_prefix(PREFACE.as_slice()) else {
            return out;
        };
        let mut decoder = new_decoder();
        let mut block: Option<Vec<u8>> = None;
        let mut opens = false;
        let mut max_stream = 0u32;
        while rest.len() >= FRAME_HEADER {
            let (len, kind, flags, stream) = frame_header(rest);
            let Some(payload) = rest.get(FRAME_HEADER..FRAME_HEADER + len) else {
                break;
            };
            rest = &rest[FRAME_HEADER + len..];
            match kind {
                HEADERS => match headers_fragment(flags, payload) {
                    Some(f) => {
                        block = Some(f.to_vec());
                        opens = stream > max_stream;
                        max_stream = max_stream.max(stream);
                    }
                    None => break,
                },
                CONTINUATION => match &mut block {
                    Some(b) => b.extend_from_slice(payload),
                    None => break,
                },
                _ => continue,
            }
            if flags & END_HEADERS != 0
                && let Some(b) = block.take()
            {
                match decoder.decode(&b) {
                    Ok(list) if opens => out.push(list),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
        out
    }

    /// Sends `bytes` as a client through the relay bound to sandbox `bound` (an `admit` that
    /// takes only it) to a fake envd, closes, and returns every byte envd received.
    fn through_the_relay(bytes: Vec<u8>) -> Vec<u8> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let envd_l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let client_l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let envd_addr = envd_l.local_addr().unwrap();
            let client_addr = client_l.local_addr().unwrap();
            // envd: keeps every byte, closes once the relay has finished sending.
            let envd = tokio::spawn(async move {
                let (mut s, _) = envd_l.accept().await.unwrap();
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got).await;
                got
            });
            let mut client = TcpStream::connect(client_addr).await.unwrap();
            let (served, _) = client_l.accept().await.unwrap();
            let to_envd = TcpStream::connect(envd_addr).await.unwrap();
            let admit: Admit = Arc::new(|list: &HeaderList| {
                match header(list, e2b_envd_proto::wire::headers::SANDBOX_ID) {
                    Some("bound") => Ok(()),
                    other => Err(format!("not this connection's sandbox: {other:?}")),
                }
            });
            let relay = tokio::spawn(relay(served, to_envd, "bound".into(), admit));
            let _ = client.write_all(&bytes).await;
            let _ = client.shutdown().await;
            let drain = async {
                let mut sink = Vec::new();
                let _ = client.read_to_end(&mut sink).await;
            };
            tokio::time::timeout(Duration::from_secs(20), async {
                drain.await;
                relay.await.expect("the relay task panicked");
            })
            .await
            .expect("the relay did not end after the client closed");
            tokio::time::timeout(Duration::from_secs(20), envd)
                .await
                .expect("envd's side was not closed")
                .unwrap()
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// The peek never panics, whatever follows the preface.
        #[test]
        fn peek_first_survives_any_bytes(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut bytes = PREFACE.to_vec();
            bytes.extend_from_slice(&tail);
            let _ = peek_first(&bytes);
            let _ = peek_first(&tail);
        }

        /// A hostile client's frames (any kind, flags, stream and payload, mixed with requests for
        /// the bound sandbox and for another one) never panic the relay, the relay ends when the
        /// client closes, and envd never decodes a request naming another sandbox.
        #[test]
        fn relay_survives_hostile_frames_and_never_forwards_another_sandbox(frames in proptest::collection::vec(wild(), 0..24)) {
            let mut bytes = PREFACE.to_vec();
            for f in &frames {
                match f {
                    Wild::Raw(k, fl, st, p) => push_frame(&mut bytes, *k, *fl, *st, p),
                    Wild::Request { stream, other } => {
                        bytes.extend(request(*stream, if *other { "other" } else { "bound" }))
                    }
                }
            }
            let seen = through_the_relay(bytes);
            for list in requests_seen_by_envd(&seen) {
                proptest::prop_assert_ne!(
                    header(&list, e2b_envd_proto::wire::headers::SANDBOX_ID),
                    Some("other"),
                    "a request for another sandbox reached envd"
                );
            }
        }
    }

    /// Regressions found by the property test: a repeated header block on a refused stream, and
    /// a block on a lower id than a refused one, each opened a request at envd unchecked.
    #[test]
    fn only_admitted_requests_open_streams_at_envd() {
        type Case<'a> = (&'a [(u32, &'a str)], &'a [&'a str]);
        let cases: [Case<'_>; 4] = [
            (
                &[(1, "bound"), (3, "other"), (5, "bound")],
                &["bound", "bound"],
            ),
            (&[(3, "other"), (3, "other")], &[]),
            (&[(19, "other"), (3, "other")], &[]),
            (&[(19, "other"), (3, "bound"), (21, "other")], &["bound"]),
        ];
        for (requests, want) in cases {
            let mut bytes = PREFACE.to_vec();
            for (stream, sandbox) in requests {
                bytes.extend(request(*stream, sandbox));
            }
            let seen: Vec<String> = requests_seen_by_envd(&through_the_relay(bytes))
                .iter()
                .map(|l| {
                    header(l, e2b_envd_proto::wire::headers::SANDBOX_ID)
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect();
            assert_eq!(seen, want, "requests {requests:?}");
        }
    }

    /// A first request whose preface and HEADERS come in two writes, the second after a
    /// pause, is read as soon as the HEADERS arrive: the peek waits for the socket's next
    /// readiness, never for the deadline.
    #[tokio::test]
    async fn peek_sees_a_request_written_in_two_parts_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            // The preface and an empty SETTINGS frame, then the request 300 ms later.
            let mut head = PREFACE.to_vec();
            push_frame(&mut head, 0x4, 0, 0, &[]);
            c.write_all(&head).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.write_all(&request(1, "sbx")).await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(c);
        });
        let (server, _) = listener.accept().await.unwrap();
        let t = std::time::Instant::now();
        let first = peek(&server).await;
        let waited = t.elapsed();
        let Peeked::First(list) = first else {
            panic!("expected the first request, got {first:?} after {waited:?}");
        };
        assert_eq!(
            header(&list, e2b_envd_proto::wire::headers::SANDBOX_ID),
            Some("sbx")
        );
        assert!(
            waited < Duration::from_millis(1500),
            "the peek waited {waited:?}: it missed the second write"
        );
        // Nothing was consumed: the relay still reads the whole request.
        let mut all = vec![0u8; 4096];
        let n = server.try_read(&mut all).unwrap();
        assert!(all[..n].starts_with(PREFACE));
        writer.abort();
    }

    #[test]
    fn http1_and_partial_prefaces() {
        assert!(matches!(peek_first(b"GET / HTTP/1.1\r\n"), Peeked::NotH2));
        assert!(matches!(peek_first(b"PRI * HTTP/2"), Peeked::NeedMore));
        assert!(matches!(peek_first(PREFACE), Peeked::NeedMore));
    }
}
