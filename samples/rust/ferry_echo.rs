// SPDX-License-Identifier: GPL-2.0

//! ferry_echo: an echo service and client over ferry, in Rust.
//!
//! Loaded, it offers the service `echo`: every message that arrives goes back
//! to its sender unchanged. Given `peer_ip4`, it also runs a client once at
//! load: it opens a session to `echo` (or, with `c_peer=1`, to the C sample's
//! `cecho`) at that address, sends `count` messages of every size class the
//! session allows, and checks every echo byte for byte; the load fails if one
//! is missing or wrong.
//!
//! Messages carry their own check (see samples/README.md): a sequence number,
//! the length, and an FNV-1a hash of the payload, which the service verifies
//! before echoing.
//!
//! Requests follow the C sample's protocol: the header names the operation,
//! the length and a seed; the service reads the requester's pages and checks
//! their pattern (a write), or writes the pattern into them (a read). With
//! `requests=N` the client sends N of them, by turns, after its messages.
//!
//! With `poll=1` the client opens a polled channel, sends on it and waits
//! by polling it ([`SessionRef::poll`]): the callbacks then mostly run in its
//! own thread.

#[path = "../../rust/ferry_api.rs"]
pub mod ferry_api;

use core::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering::Relaxed};
use ferry_api::{
    Data, Dir, Done, Handler, Incoming, Lent, Params, Peer, Registration, Request, Service,
    Session, SessionRef, Transfer, Transferred, Wait,
};
use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, CondVarTimeoutResult, Mutex, MutexGuard},
    time::msecs_to_jiffies,
};

module! {
    type: EchoModule,
    name: "ferry_echo",
    authors: ["The ferry authors"],
    description: "ferry sample: echo service and client in Rust",
    license: "GPL",
    imports_ns: ["FERRY"],
    params: {
        peer_ip4: u32 {
            default: 0,
            description: "Run the client against this IPv4 address (0x...; 0: no client)",
        },
        port: u16 {
            default: 4791,
            description: "The peer's ferry listener port",
        },
        count: u32 {
            default: 1000,
            description: "Messages the client sends",
        },
        c_peer: bool {
            default: false,
            description: "Talk to the C sample's service cecho instead of echo",
        },
        max_msg: u32 {
            default: 0,
            description: "The client session's largest message (0: ferry's default)",
        },
        requests: u32 {
            default: 0,
            description: "Requests with data the client sends after its messages",
        },
        poll: bool {
            default: false,
            description: "The client sends on a polled channel and waits by polling it",
        },
    },
}

/// Bytes of the check at the front of every message.
const CHECK_LEN: usize = 16;
/// Messages the client keeps in flight.
const WINDOW: u32 = 8;
/// How long the client waits for all echoes, in milliseconds.
const DRAIN_MS: u32 = 20_000;

/// The message sizes the client cycles through, capped at the session's limit.
const SIZE_CLASSES: [usize; 6] = [64, 256, 1024, 4096, 16384, 65536];

/// FNV-1a, 64 bits.
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Fills `msg` as message `seq`: check header, then a pattern from `seq`.
fn fill(msg: &mut [u8], seq: u32) {
    let mut x = u64::from(seq).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in msg[CHECK_LEN..].iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // CAST: the low byte is the point.
        *b = x as u8;
    }
    let hash = fnv1a(&msg[CHECK_LEN..]);
    // CAST: messages are far below 4 GiB.
    let len = msg.len() as u32;
    msg[0..4].copy_from_slice(&seq.to_le_bytes());
    msg[4..8].copy_from_slice(&len.to_le_bytes());
    msg[8..16].copy_from_slice(&hash.to_le_bytes());
}

/// Checks a message's own header: `Some(seq)` if length and hash agree.
fn verify(msg: &[u8]) -> Option<u32> {
    if msg.len() < CHECK_LEN {
        return None;
    }
    let seq = u32::from_le_bytes(msg[0..4].try_into().ok()?);
    let len = u32::from_le_bytes(msg[4..8].try_into().ok()?);
    let hash = u64::from_le_bytes(msg[8..16].try_into().ok()?);
    (len as usize == msg.len() && hash == fnv1a(&msg[CHECK_LEN..])).then_some(seq)
}

/// A request's header: what to do with how much data, and the pattern's
/// seed (`struct data_hdr` of the C sample), little-endian.
struct DataHdr {
    op: u32,
    len: u32,
    seed: u64,
}

/// The service reads the requester's pages and checks them.
const DATA_WRITE: u32 = 1;
/// The service writes the pattern into the requester's pages.
const DATA_READ: u32 = 2;
/// Request data sizes the client cycles through.
const DATA_CLASSES: [u32; 4] = [4096, 65536, 1 << 20, 4 << 20];
/// Requests the client keeps in flight.
const RQ_WINDOW: u32 = 8;

impl DataHdr {
    const LEN: usize = 16;

    fn parse(h: &[u8]) -> Option<Self> {
        if h.len() != Self::LEN {
            return None;
        }
        Some(Self {
            op: u32::from_le_bytes(h.get(0..4)?.try_into().ok()?),
            len: u32::from_le_bytes(h.get(4..8)?.try_into().ok()?),
            seed: u64::from_le_bytes(h.get(8..16)?.try_into().ok()?),
        })
    }

    fn bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.op.to_le_bytes());
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.seed.to_le_bytes());
        b
    }
}

/// The pattern of a seed: 64-bit xorshift words in native byte order, as
/// the C sample writes them.
struct Pattern(u64);

impl Pattern {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next `b.len() / 8` words (a multiple of 8 bytes but at the end).
    fn fill(&mut self, b: &mut [u8]) {
        for w in b.chunks_exact_mut(8) {
            let x = &mut self.0;
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            w.copy_from_slice(&x.to_ne_bytes());
        }
    }
}

/// Writes the pattern of `seed` into `data`, or (with `check`) says whether
/// `data` holds it (whole words only, as the C sample checks).
fn pattern(data: &mut Data, seed: u64, check: bool) -> Result<bool> {
    const CHUNK: usize = 4096;
    let mut want = KVec::from_elem(0u8, CHUNK, GFP_KERNEL)?;
    let mut got = KVec::from_elem(0u8, if check { CHUNK } else { 0 }, GFP_KERNEL)?;
    let mut x = Pattern::new(seed);
    let mut off = 0;
    while off < data.len() {
        let n = CHUNK.min(data.len() - off);
        let want = want.get_mut(..n).ok_or(EINVAL)?;
        x.fill(want);
        if check {
            let got = got.get_mut(..n).ok_or(EINVAL)?;
            data.read(off, got)?;
            // (Whole words only, as the C sample checks.)
            let words = n / 8 * 8;
            if got.get(..words) != want.get(..words) {
                return Ok(false);
            }
        } else {
            data.write(off, want)?;
        }
        off += n;
    }
    Ok(true)
}

/// A request the service is serving: what to check once the data is in.
struct Serving {
    op: u32,
    seed: u64,
}

impl Transferred for Serving {
    fn transferred(t: KBox<Transfer<Self>>, req: Incoming, status: Result) {
        let Transfer { mut data, ctx } = KBox::into_inner(t);
        let status = status.and_then(|()| {
            if ctx.op == DATA_WRITE && !pattern(&mut data, ctx.seed, true)? {
                pr_warn!("a write's data failed its check\n");
                return Err(EIO);
            }
            Ok(())
        });
        // Nothing to do if it fails: the requester sees the connection's end.
        let _ = req.respond(status, &[]);
    }
}

/// One session of the echo service.
#[pin_data]
struct EchoSession {
    /// Echoes that found no credit, sent when credits return.
    #[pin]
    pending: Mutex<KVec<KVec<u8>>>,
    echoed: AtomicU64,
    bad: AtomicU64,
    /// Echoes that had to wait for credits.
    deferred: AtomicU64,
}

impl EchoSession {
    /// Sends what waits, in order, while credits last.
    fn flush(&self, s: &SessionRef) {
        let mut pending = self.pending.lock();
        while let Some(msg) = pending.first() {
            match s.send(msg, Wait::No) {
                Ok(()) => {
                    pending.remove(0).ok();
                    self.echoed.fetch_add(1, Relaxed);
                }
                // `writable` comes back when credits do.
                Err(e) if e == EAGAIN => return,
                Err(e) => {
                    pr_warn!("session {}: echo failed: {:?}\n", s.id(), e);
                    pending.clear();
                    return;
                }
            }
        }
    }
}

impl Handler for EchoSession {
    fn message(&self, s: &SessionRef, data: &[u8]) {
        if verify(data).is_none() {
            self.bad.fetch_add(1, Relaxed);
            pr_warn!("session {}: a message failed its check\n", s.id());
        }
        // Echoes leave in arrival order: behind any that wait.
        let mut pending = self.pending.lock();
        if pending.is_empty() {
            match s.send(data, Wait::No) {
                Ok(()) => {
                    self.echoed.fetch_add(1, Relaxed);
                    return;
                }
                Err(e) if e == EAGAIN => {}
                Err(e) => {
                    pr_warn!("session {}: echo failed: {:?}\n", s.id(), e);
                    return;
                }
            }
        }
        let mut copy = KVec::new();
        if copy.extend_from_slice(data, GFP_KERNEL).is_err()
            || pending.push(copy, GFP_KERNEL).is_err()
        {
            pr_warn!("session {}: out of memory, an echo is lost\n", s.id());
            return;
        }
        self.deferred.fetch_add(1, Relaxed);
    }

    fn writable(&self, s: &SessionRef, _qid: u16) {
        self.flush(s);
    }

    fn request(&self, _s: &SessionRef, req: Incoming) {
        let hdr = match DataHdr::parse(req.header()) {
            Some(h) if h.len == req.data_len() => h,
            _ => {
                let _ = req.respond(Err(EINVAL), &[]);
                return;
            }
        };
        let mut data = match Data::new(hdr.len as usize) {
            Ok(d) => d,
            Err(e) => {
                let _ = req.respond(Err(e), &[]);
                return;
            }
        };
        let serving = Serving {
            op: hdr.op,
            seed: hdr.seed,
        };
        let filled = match (hdr.op, req.dir()) {
            (DATA_WRITE, Dir::ToPeer) => Ok(()),
            (DATA_READ, Dir::FromPeer) => pattern(&mut data, hdr.seed, false).map(|_| ()),
            _ => Err(EINVAL),
        };
        // One box per request here; a consumer that keeps its transfers
        // (one per request it may hold) allocates none.
        match filled.and_then(|()| Transfer::new(data, serving, GFP_KERNEL)) {
            Ok(t) if req.dir() == Dir::ToPeer => req.read(t),
            Ok(t) => req.write(t),
            Err(e) => {
                let _ = req.respond(Err(e), &[]);
            }
        }
    }

    fn gone(&self, s: &SessionRef, err: Option<Error>) {
        pr_info!(
            "session {} gone ({:?}): {} echoed, {} failed their check, {} waited for credits\n",
            s.id(),
            err,
            self.echoed.load(Relaxed),
            self.bad.load(Relaxed),
            self.deferred.load(Relaxed)
        );
    }
}

/// The `echo` service.
struct Echo;

impl Service for Echo {
    type Session = EchoSession;

    fn accept(&self, s: &SessionRef) -> Result<Arc<EchoSession>> {
        pr_info!("session {}: accepted\n", s.id());
        Arc::pin_init(
            pin_init!(EchoSession {
                pending <- new_mutex!(KVec::new()),
                echoed: AtomicU64::new(0),
                bad: AtomicU64::new(0),
                deferred: AtomicU64::new(0),
            }),
            GFP_KERNEL,
        )
    }
}

/// The client's count of echoes and requests.
#[derive(Default)]
struct Tally {
    /// Echoes back so far.
    received: u32,
    /// Echoes that were not what was sent.
    wrong: u32,
    /// Requests done so far.
    rq_done: u32,
    /// Requests whose data was not what was sent.
    rq_wrong: u32,
    /// Requests that failed.
    rq_failed: u32,
}

/// The client's side of its session.
#[pin_data]
struct Client {
    #[pin]
    tally: Mutex<Tally>,
    #[pin]
    changed: CondVar,
    /// The session's largest payload, once open.
    max: AtomicUsize,
    /// Whether it sends on a polled channel and waits by polling it.
    poll: bool,
    /// That channel, once the session is open.
    poll_qid: AtomicU16,
    /// Completions its polls processed.
    polled: AtomicU64,
}

impl Client {
    /// Waits until `done` holds for the tally, at most `DRAIN_MS` between two
    /// changes; returns the tally, or `None` on a timeout or a signal.
    ///
    /// Polling, it runs `s`'s callbacks here (they take the tally's lock,
    /// which it does not hold while it polls), and sleeps a tick only when
    /// none was waiting; the completion work handles what comes meanwhile.
    fn wait_until(
        &self,
        s: &SessionRef,
        done: impl Fn(&Tally) -> bool,
    ) -> Option<MutexGuard<'_, Tally>> {
        // Asleep: the whole wait at once. Polling: a tick at a time.
        let drain = msecs_to_jiffies(DRAIN_MS);
        let (nap, naps) = if self.poll { (1, drain) } else { (drain, 1) };
        let mut t = self.tally.lock();
        let mut idle = 0;
        while !done(&t) {
            if self.poll {
                drop(t);
                let n = s.poll();
                self.polled.fetch_add(n.into(), Relaxed);
                t = self.tally.lock();
                if n != 0 {
                    idle = 0;
                    continue;
                }
            }
            match self.changed.wait_interruptible_timeout(&mut t, nap) {
                CondVarTimeoutResult::Signal { .. } => return None,
                CondVarTimeoutResult::Woken { .. } => idle = 0,
                CondVarTimeoutResult::Timeout => {
                    idle += 1;
                    if idle >= naps {
                        return None;
                    }
                }
            }
        }
        Some(t)
    }

    /// The size of message `seq`.
    fn size_of(&self, seq: u32) -> usize {
        SIZE_CLASSES[seq as usize % SIZE_CLASSES.len()].min(self.max.load(Relaxed))
    }
}

impl Handler for Client {
    fn message(&self, _s: &SessionRef, data: &[u8]) {
        let ok = verify(data).is_some_and(|seq| {
            // Regenerate what was sent and compare every byte.
            let mut want = KVec::from_elem(0u8, self.size_of(seq), GFP_KERNEL);
            want.as_mut().is_ok_and(|w| {
                fill(w, seq);
                w[..] == data[..]
            })
        });
        let mut t = self.tally.lock();
        t.received += 1;
        if !ok {
            t.wrong += 1;
        }
        self.changed.notify_all();
    }

    fn down(&self, s: &SessionRef, err: Error) {
        pr_info!("client session {}: down ({:?})\n", s.id(), err);
    }
}

/// One of the client's requests: what to check when it is done.
struct Sent {
    client: Arc<Client>,
    op: u32,
    seed: u64,
}

impl Sent {
    /// The request is done (`failed`) and, if it was a read, `read_ok`
    /// says whether its data is right; its pages are back.
    fn count(self, failed: bool, read_ok: impl FnOnce(u64) -> bool) {
        let ok = failed || self.op != DATA_READ || read_ok(self.seed);
        let mut t = self.client.tally.lock();
        t.rq_done += 1;
        t.rq_failed += u32::from(failed);
        t.rq_wrong += u32::from(!ok);
        self.client.changed.notify_all();
    }
}

/// Logs a failed request's status; returns whether it failed.
fn failed<T: Done<P>, P: ferry_api::Pages>(req: &Request<T, P>) -> bool {
    if let Err(e) = req.status() {
        pr_warn!("client: request failed: {:?}\n", e);
        return true;
    }
    false
}

// Pages the wrapper allocated.
impl Done for Sent {
    fn done(mut req: KBox<Request<Self>>) {
        let failed = failed(&req);
        let moved = req.moved() as usize;
        let data = req.take_data();
        let ctx = KBox::into_inner(req).ctx;
        ctx.count(failed, |seed| {
            data.is_some_and(|mut d| {
                moved == d.len() && pattern(&mut d, seed, true).unwrap_or(false)
            })
        });
    }
}

// The client's own buffer, lent as it is.
impl Done<Lent> for Sent {
    fn done(mut req: KBox<Request<Self, Lent>>) {
        let failed = failed(&req);
        let moved = req.moved() as usize;
        let data = req.take_data();
        let ctx = KBox::into_inner(req).ctx;
        ctx.count(failed, |seed| {
            data.is_some_and(|d| {
                let buf = d.into_inner();
                let mut want = match KVec::from_elem(0u8, buf.len(), GFP_KERNEL) {
                    Ok(w) => w,
                    Err(_) => return false,
                };
                Pattern::new(seed).fill(&mut want);
                let words = buf.len() / 8 * 8;
                moved == buf.len() && buf.get(..words) == want.get(..words)
            })
        });
    }
}

/// Submits `req` on the client's polled channel, or any.
fn submit<P: ferry_api::Pages>(
    client: &Client,
    s: &SessionRef,
    req: KBox<Request<Sent, P>>,
) -> core::result::Result<(), (Error, KBox<Request<Sent, P>>)>
where
    Sent: Done<P>,
{
    if client.poll {
        s.submit_on(client.poll_qid.load(Relaxed), req, Wait::Yes)
    } else {
        s.submit(req, Wait::Yes)
    }
}

/// Sends `n` requests with data, `RQ_WINDOW` at a time, writes and reads by
/// turns, and checks every byte.
fn run_requests(s: &SessionRef, client: &Arc<Client>, n: u32) -> Result {
    let mut bytes = 0u64;
    for i in 0..n {
        if client
            .wait_until(s, |t| i - t.rq_done < RQ_WINDOW)
            .is_none()
        {
            pr_err!("client: no request done for {} ms\n", DRAIN_MS);
            return Err(ETIMEDOUT);
        }
        let hdr = DataHdr {
            op: if i % 2 == 0 { DATA_WRITE } else { DATA_READ },
            len: DATA_CLASSES[(i / 2) as usize % DATA_CLASSES.len()],
            seed: 0x5eed_0000 + u64::from(i),
        };
        let dir = if hdr.op == DATA_WRITE {
            Dir::ToPeer
        } else {
            Dir::FromPeer
        };
        let ctx = Sent {
            client: client.clone(),
            op: hdr.op,
            seed: hdr.seed,
        };
        // Every other pair of requests lends a buffer of the client's own
        // (`Lent`) instead of pages the wrapper allocates (`Data`).
        let res = if (i / 2) % 2 == 1 {
            let mut buf = VVec::from_elem(0u8, hdr.len as usize, GFP_KERNEL)?;
            if dir == Dir::ToPeer {
                Pattern::new(hdr.seed).fill(&mut buf);
            }
            let data = Lent::new(buf, hdr.len as usize).map_err(|(e, _)| e)?;
            let mut req = Request::<Sent, Lent>::new(&hdr.bytes(), 0, ctx, GFP_KERNEL)?;
            req.set_data(dir, data);
            submit(client, s, req).map_err(|(e, _)| e)
        } else {
            let mut data = Data::new(hdr.len as usize)?;
            if dir == Dir::ToPeer {
                pattern(&mut data, hdr.seed, false)?;
            }
            let mut req = Request::<Sent>::new(&hdr.bytes(), 0, ctx, GFP_KERNEL)?;
            req.set_data(dir, data);
            submit(client, s, req).map_err(|(e, _)| e)
        };
        res.inspect_err(|e| pr_err!("client: submit {} failed: {:?}\n", i, e))?;
        bytes += u64::from(hdr.len);
    }
    // On a timeout, the summary says what is missing.
    let t = client
        .wait_until(s, |t| t.rq_done >= n)
        .unwrap_or_else(|| client.tally.lock());
    pr_info!(
        "client: {} requests, {} done, {} wrong, {} failed, {} bytes\n",
        n,
        t.rq_done,
        t.rq_wrong,
        t.rq_failed,
        bytes
    );
    if t.rq_done != n || t.rq_wrong != 0 || t.rq_failed != 0 {
        return Err(EIO);
    }
    Ok(())
}

/// Runs the client: `count` messages through the peer's echo service, then
/// `requests` requests with data.
fn run_client(
    peer: Peer,
    service: &CStr,
    count: u32,
    max_msg: u32,
    requests: u32,
    poll: bool,
) -> Result {
    let mut p = Params::new(peer, service);
    p.max_msg = max_msg;
    // Polling, the client sends on a polled channel after the others.
    p.poll_channels = u16::from(poll);
    let client = Arc::pin_init(
        pin_init!(Client {
            tally <- new_mutex!(Tally::default()),
            changed <- new_condvar!(),
            // No echo comes before the first send.
            max: AtomicUsize::new(CHECK_LEN),
            poll,
            poll_qid: AtomicU16::new(0),
            polled: AtomicU64::new(0),
        }),
        GFP_KERNEL,
    )?;
    let s = Session::open(&p, client.clone())?;
    let limits = s.limits()?;
    let qid = poll.then(|| limits.channels - limits.poll_channels);
    client.poll_qid.store(qid.unwrap_or(0), Relaxed);
    let max = limits.max_payload as usize;
    client.max.store(max, Relaxed);
    let mut buf = KVec::from_elem(0u8, max, GFP_KERNEL)?;
    for seq in 0..count {
        // Keep `WINDOW` in flight.
        if client
            .wait_until(&s, |t| seq - t.received < WINDOW)
            .is_none()
        {
            pr_err!("client: no echo for {} ms\n", DRAIN_MS);
            return Err(ETIMEDOUT);
        }
        // (`get_mut`, not indexing: no panic path in module init.)
        let msg = buf.get_mut(..client.size_of(seq)).ok_or(EINVAL)?;
        fill(msg, seq);
        match qid {
            Some(q) => s.send_on(q, msg, Wait::Yes)?,
            None => s.send(msg, Wait::Yes)?,
        }
    }
    let t = client
        .wait_until(&s, |t| t.received >= count)
        .unwrap_or_else(|| client.tally.lock());
    let (received, wrong) = (t.received, t.wrong);
    drop(t);
    pr_info!(
        "client: {} sent, {} echoed, {} wrong, sizes 64..{} bytes, {} channels\n",
        count,
        received,
        wrong,
        max.min(65536),
        limits.channels
    );
    if received != count || wrong != 0 {
        return Err(EIO);
    }
    if requests > 0 {
        run_requests(&s, &client, requests)?;
    }
    if poll {
        pr_info!(
            "client: {} completions polled\n",
            client.polled.load(Relaxed)
        );
    }
    Ok(())
}

struct EchoModule {
    _service: Registration<Echo>,
}

impl kernel::Module for EchoModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let service = Registration::new(c"echo", Arc::new(Echo, GFP_KERNEL)?)?;
        let ip = module_parameters::peer_ip4.value();
        if ip != 0 {
            let target = if module_parameters::c_peer.value() {
                c"cecho"
            } else {
                c"echo"
            };
            run_client(
                Peer::V4(ip.to_be_bytes(), module_parameters::port.value()),
                target,
                module_parameters::count.value(),
                module_parameters::max_msg.value(),
                module_parameters::requests.value(),
                module_parameters::poll.value(),
            )?;
        }
        Ok(Self { _service: service })
    }
}
