use super::conn::Conn;
use super::flow::Flow;
use super::spares::{self, Spares};
use super::*;
use crate::metrics::{LimitLabels, Metrics};
use crate::pool::Pool;
use crate::sources::ActiveGuard;
use isthmus_config::KeepaliveConfig;
use prometheus_client::metrics::gauge::Gauge;
use std::net::Shutdown;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream as TokioStream};
use tokio_util::task::TaskTracker;

/// A connected client/server pair of tokio sockets.
async fn pair() -> (TokioStream, TokioStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TokioStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    c.set_nodelay(true).unwrap();
    s.set_nodelay(true).unwrap();
    (c, s)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Everything a test needs to hand a pair over and watch it close.
struct Rig {
    splicer: Splicer,
    metrics: Arc<Metrics>,
    pool: Arc<Pool>,
    active: Gauge,
    tracker: TaskTracker,
    to_up: Counter,
    to_down: Counter,
}

impl Rig {
    fn new() -> Rig {
        Rig::with_busy_poll(BusyPoll::Off)
    }

    fn with_busy_poll(busy_poll: BusyPoll) -> Rig {
        let metrics = Arc::new(Metrics::register(&mut Default::default()));
        let pool = Arc::new(Pool::new("u", Vec::new(), None, &metrics));
        Rig {
            splicer: Splicer::start(
                "splice-test".into(),
                Tuning::with_busy_poll(busy_poll),
                Default::default(),
            )
            .unwrap(),
            metrics,
            pool,
            active: Gauge::default(),
            tracker: TaskTracker::new(),
            to_up: Counter::default(),
            to_down: Counter::default(),
        }
    }

    /// Hands `down` (the proxy's accepted socket) and `up` (its upstream socket) over.
    fn adopt(&self, down: TokioStream, up: TokioStream, first: &[u8], limits: Limits) {
        self.adopt_kept_alive(down, up, first, limits, None);
    }

    /// [`Rig::adopt`], with the upstream's keepalive.
    fn adopt_kept_alive(
        &self,
        down: TokioStream,
        up: TokioStream,
        first: &[u8],
        limits: Limits,
        keepalive: Option<KeepaliveConfig>,
    ) {
        let pair = Pair {
            down: down.into_std().unwrap(),
            up: up.into_std().unwrap(),
            to_up: first.to_vec(),
            to_up_counter: self.to_up.clone(),
            to_down_counter: self.to_down.clone(),
            limits,
            guards: OpenGuards::new(
                ActiveGuard::new(self.active.clone()),
                self.pool.reserve(None).unwrap(),
                self.tracker.token(),
            ),
            metrics: self.metrics.clone(),
            upstream: "u".into(),
            span: tracing::Span::none(),
            keepalive,
        };
        self.splicer.adopt(pair).unwrap();
    }

    /// Waits until the splicer holds no connection and everything it kept is released.
    async fn closed(&self) {
        isthmus_testkit::wait_until("every connection released", Duration::from_secs(10), || {
            let done = self.splicer.len() == 0 && self.active.get() == 0 && self.tracker.is_empty();
            async move { done }
        })
        .await;
    }

    /// Waits until the splicer's thread is parked in `epoll_wait` (or about to be).
    async fn parked(&self) {
        let inner = self.splicer.inner.clone();
        isthmus_testkit::wait_until("the splicer parked", Duration::from_secs(10), || {
            let parked = inner.parked.load(Ordering::SeqCst);
            async move { parked }
        })
        .await;
    }

    /// Hand-overs that woke the splicer.
    fn wakes(&self) -> usize {
        self.splicer.inner.probe.wakes()
    }

    fn limit_closes(&self, limit: &'static str) -> u64 {
        self.metrics
            .closed_by_limit
            .get_or_create(&LimitLabels {
                upstream: "u".into(),
                limit,
            })
            .get()
    }
}

/// Megabytes both ways take the bulk (splice on Linux) path; every byte arrives in order, the
/// counters match (including the bytes handed over to go first), and each FIN is passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_both_ways_with_half_close() {
    let rig = Rig::new();
    let (mut client, down) = pair().await;
    let (up, mut server) = pair().await;
    let first = b"replayed hello".to_vec();
    let a = pattern(8 << 20, 1);
    let b = pattern(3 << 20, 7);
    let mut expected_up = first.clone();
    expected_up.extend_from_slice(&a);
    let server_side = tokio::spawn(async move {
        let (mut r, mut w) = server.split();
        let read = async {
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            got
        };
        let write = async {
            w.write_all(&b).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let (got, ()) = tokio::join!(read, write);
        assert!(
            got == expected_up,
            "upstream got {} bytes, wrong",
            got.len()
        );
    });
    rig.adopt(down, up, &first, Limits::default());
    let b = pattern(3 << 20, 7);
    let (mut r, mut w) = client.split();
    let write = async {
        w.write_all(&a).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let read = async {
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        got
    };
    let ((), got) = tokio::join!(write, read);
    assert!(got == b, "client got {} bytes, wrong", got.len());
    server_side.await.unwrap();
    rig.closed().await;
    assert_eq!(rig.to_up.get(), (8 << 20) + first.len() as u64);
    assert_eq!(rig.to_down.get(), 3 << 20);
}

/// Small messages back and forth (each read comes back short, so the splicer relies on the
/// next edge instead of reading until EAGAIN): nothing is lost or stalls.
#[tokio::test]
async fn many_small_round_trips() {
    for busy_poll in [
        BusyPoll::Off,
        BusyPoll::Fixed(Duration::from_micros(200)),
        BusyPoll::Adaptive(Duration::from_micros(200)),
    ] {
        let rig = Rig::with_busy_poll(busy_poll);
        let (mut client, down) = pair().await;
        let (up, mut server) = pair().await;
        rig.adopt(down, up, b"", Limits::default());
        let echo = tokio::spawn(async move {
            let (mut r, mut w) = server.split();
            tokio::io::copy(&mut r, &mut w).await.unwrap();
        });
        for i in 0..2000u32 {
            let msg = pattern(1 + (i as usize * 7) % 3000, i as u8);
            client.write_all(&msg).await.unwrap();
            let mut back = vec![0u8; msg.len()];
            client.read_exact(&mut back).await.unwrap();
            assert!(back == msg, "round trip {i} came back wrong");
        }
        drop(client);
        echo.await.unwrap();
        rig.closed().await;
    }
}

/// Data and FIN in one flight (one readable edge that already carries the FIN): the data is
/// delivered and the FIN passed on, the answer still flows back through the half-closed
/// connection.
#[tokio::test]
async fn data_and_fin_in_one_flight_then_the_answer_flows_back() {
    let rig = Rig::new();
    let (client, down) = pair().await;
    let (up, mut server) = pair().await;
    let client = client.into_std().unwrap();
    client.set_nonblocking(false).unwrap();
    // Both leave before the pair is handed over, so the first edge has data and FIN together.
    std::io::Write::write_all(&mut &client, b"request").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    rig.adopt(down, up, b"", Limits::default());
    let mut got = Vec::new();
    server.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"request");
    server.write_all(b"answer").await.unwrap();
    server.shutdown().await.unwrap();
    let mut client = TokioStream::from_std({
        client.set_nonblocking(true).unwrap();
        client
    })
    .unwrap();
    let mut back = Vec::new();
    client.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"answer");
    rig.closed().await;
}

/// A reset from the upstream ends the connection: the client does not hang, and everything
/// the connection held is released.
#[tokio::test]
async fn an_upstream_reset_closes_the_client() {
    let rig = Rig::new();
    let (mut client, down) = pair().await;
    let (up, server) = pair().await;
    rig.adopt(down, up, b"", Limits::default());
    client.write_all(b"x").await.unwrap();
    let server = server.into_std().unwrap();
    socket2::SockRef::from(&server)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(server);
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf))
        .await
        .expect("client still open after the upstream reset");
    assert!(matches!(r, Ok(0) | Err(_)), "client read {r:?}");
    rig.closed().await;
}

/// The limits close an idle connection and an old one, and are counted by reason.
#[tokio::test]
async fn limits_close_and_are_counted() {
    let rig = Rig::new();
    let (_client, down) = pair().await;
    let (up, _server) = pair().await;
    let idle = Limits {
        idle_timeout: Some(Duration::from_millis(50)),
        max_duration: None,
    };
    rig.adopt(down, up, b"", idle);
    rig.closed().await;
    assert_eq!(rig.limit_closes("idle_timeout"), 1);

    let (mut client, down) = pair().await;
    let (up, mut server) = pair().await;
    let max = Limits {
        idle_timeout: Some(Duration::from_secs(60)),
        max_duration: Some(Duration::from_millis(300)),
    };
    rig.adopt(down, up, b"", max);
    // Busy, so only the duration can end it.
    let busy = async {
        let mut buf = [0u8; 1];
        loop {
            if client.write_all(b"z").await.is_err() {
                break;
            }
            match server.read(&mut buf).await {
                Ok(1) => {}
                _ => break,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), busy)
        .await
        .expect("max_connection_duration did not close the busy connection");
    rig.closed().await;
    assert_eq!(rig.limit_closes("max_connection_duration"), 1);
    assert_eq!(rig.limit_closes("idle_timeout"), 1);
}

/// A closed connection takes its timer with it: after connections with the limits the
/// controller renders (`idle_timeout: 3h`) have come and gone, round after round, the splicer
/// holds no timer entry (a heap popped only when due kept one per connection closed in the
/// last three hours: +15.9 MiB per 500,000 connections, issue 47).
#[tokio::test]
async fn closed_connections_leave_no_timer_behind() {
    let rig = Rig::new();
    let rendered = Limits {
        idle_timeout: Some(Duration::from_secs(3 * 3600)),
        max_duration: None,
    };
    // One connection stays open throughout: its entry stays, the closed ones' go.
    let (mut client, down) = pair().await;
    let (up, mut server) = pair().await;
    rig.adopt(down, up, b"", rendered);
    client.write_all(b"x").await.unwrap();
    server.read_exact(&mut [0u8; 1]).await.unwrap();
    for _ in 0..4 {
        let mut open = Vec::new();
        for _ in 0..50 {
            let (mut client, down) = pair().await;
            let (up, mut server) = pair().await;
            rig.adopt(down, up, b"", rendered);
            // A byte through: the splicer has taken the pair in.
            client.write_all(b"x").await.unwrap();
            server.read_exact(&mut [0u8; 1]).await.unwrap();
            open.push((client, server));
        }
        timers_held(&rig.splicer, 51).await;
        drop(open);
        timers_held(&rig.splicer, 1).await;
    }
    assert_eq!(rig.splicer.len(), 1);
}

/// Waits until the splicer holds `n` timer entries.
async fn timers_held(splicer: &Splicer, n: usize) {
    let what = format!(
        "{n} timer entries ({} when the wait began)",
        splicer.timers()
    );
    isthmus_testkit::wait_until(&what, Duration::from_secs(10), || {
        let held = splicer.timers();
        async move { held == n }
    })
    .await;
}

/// A pair handed over to a parked splicer wakes it through its own sockets' events, not through
/// the hand-over; only a pair with a timer (a limit, or its keepalive) due before the splicer
/// wakes by itself wakes it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_pair_that_cannot_wait_wakes_a_parked_splicer() {
    let rig = Rig::new();
    let minute = Limits {
        idle_timeout: Some(Duration::from_secs(60)),
        max_duration: None,
    };
    rig.parked().await;
    let (mut client, down) = pair().await;
    let (up, mut server) = pair().await;
    // Nothing to write at once: the sockets have no event until the client writes.
    rig.adopt(down, up, b"", Limits::default());
    client.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    server.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
    server.write_all(b"pong").await.unwrap();
    client.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"pong");
    assert_eq!(rig.wakes(), 0, "a pair without timers woke the splicer");

    // Nothing is due: the parked splicer sleeps until an event, which a limit cannot wait for.
    rig.parked().await;
    let (_client2, down) = pair().await;
    let (up, _server2) = pair().await;
    rig.adopt(down, up, b"", minute);
    assert_eq!(rig.wakes(), 1, "a limit due first did not wake the splicer");

    // The limit above is due in a minute: later than a deferred keepalive.
    rig.parked().await;
    let (_client3, down) = pair().await;
    let (up, _server3) = pair().await;
    let keepalive = KeepaliveConfig::default();
    assert!(keepalive::deferred(&keepalive));
    rig.adopt_kept_alive(down, up, b"", Limits::default(), Some(keepalive));
    assert_eq!(
        rig.wakes(),
        2,
        "a keepalive due first did not wake the splicer"
    );

    // Now the keepalive is due within about a second: a minute's limit can wait for it.
    rig.parked().await;
    let (_client4, down) = pair().await;
    let (up, _server4) = pair().await;
    rig.adopt(down, up, b"", minute);
    assert_eq!(
        rig.wakes(),
        2,
        "a limit due after the splicer's own wake-up woke it"
    );
}

/// An open connection costs its table entry: printed for the benchmarks' memory analysis; the
/// bound catches a regression (an unboxed buffer or timer in the entry).
#[test]
fn an_open_connection_is_a_small_table_entry() {
    let size = std::mem::size_of::<Conn>();
    eprintln!("open connection entry: {size} bytes");
    assert!(size <= 128, "connection entry grew to {size} bytes");
}

/// A TCP pair on loopback with 4 MiB socket buffers, blocking: what one end writes waits
/// whole in the other's receive queue.
fn roomy_pair() -> (std::net::TcpStream, std::net::TcpStream) {
    use socket2::{Domain, SockRef, Socket, Type};
    let l = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    l.set_recv_buffer_size(4 << 20).unwrap();
    l.set_send_buffer_size(4 << 20).unwrap();
    l.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    l.listen(1).unwrap();
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    let near = std::net::TcpStream::connect(addr).unwrap();
    SockRef::from(&near).set_send_buffer_size(4 << 20).unwrap();
    SockRef::from(&near).set_recv_buffer_size(4 << 20).unwrap();
    let (far, _) = l.accept().unwrap();
    (near, far.into())
}

/// One turn moves a direction's budget, not all its source holds: it stops and says there is
/// more (`Flow::more`), and the next turns move the rest, in order. Before, a direction was
/// driven until its source would block, while the worker's other connections waited.
#[test]
fn a_turn_stops_at_its_budget_and_the_next_turns_move_the_rest() {
    let (mut writer, from) = roomy_pair();
    let (to, mut reader) = roomy_pair();
    let sent = pattern(512 << 10, 3);
    std::io::Write::write_all(&mut writer, &sent).unwrap();
    from.set_nonblocking(true).unwrap();
    to.set_nonblocking(true).unwrap();
    let (from, to) = (TcpStream::from_std(from), TcpStream::from_std(to));
    let mut spares = Spares::default();
    let mut flow = Flow::new(Counter::default(), Vec::new());
    flow.readable(false);
    // A budget of one byte: one read (a copy buffer at most) and its write.
    let first = flow.drive(&from, &to, &mut spares, false, 1).unwrap();
    assert!(
        first > 0 && first <= spares::BUF_SIZE as u64,
        "one turn moved {first} bytes"
    );
    assert!(
        flow.more(),
        "a turn at its budget did not say there is more"
    );
    let mut moved = first;
    let deadline = Instant::now() + Duration::from_secs(10);
    while moved < sent.len() as u64 {
        assert!(Instant::now() < deadline, "{moved} bytes moved");
        flow.readable(false);
        moved += flow.drive(&from, &to, &mut spares, false, 1).unwrap();
    }
    let mut got = vec![0u8; sent.len()];
    std::io::Read::read_exact(&mut reader, &mut got).unwrap();
    assert!(got == sent, "the bytes came out of order");
}

/// While one connection streams as fast as its reader takes it, another one's round trips
/// go on (the budget makes the streaming one wait its turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_makes_progress_while_another_streams() {
    let rig = Rig::new();
    let (mut bulk_client, down) = pair().await;
    let (up, mut bulk_server) = pair().await;
    rig.adopt(down, up, b"", Limits::default());
    let streaming = tokio::spawn(async move {
        let chunk = pattern(1 << 20, 5);
        while bulk_server.write_all(&chunk).await.is_ok() {}
    });
    let received = Arc::new(AtomicU64::new(0));
    let seen = received.clone();
    let reading = tokio::spawn(async move {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n @ 1..) = bulk_client.read(&mut buf).await {
            seen.fetch_add(n as u64, Ordering::Relaxed);
        }
    });
    let (mut client, down) = pair().await;
    let (up, mut server) = pair().await;
    rig.adopt(down, up, b"", Limits::default());
    let echo = tokio::spawn(async move {
        let (mut r, mut w) = server.split();
        tokio::io::copy(&mut r, &mut w).await.unwrap();
    });
    let flowing = received.clone();
    isthmus_testkit::wait_until("the stream flowing", Duration::from_secs(10), || {
        let n = flowing.load(Ordering::Relaxed);
        async move { n > 0 }
    })
    .await;
    let before = received.load(Ordering::Relaxed);
    for i in 0..200u32 {
        let msg = pattern(100, i as u8);
        client.write_all(&msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut back))
            .await
            .unwrap_or_else(|_| panic!("round trip {i} stalled behind the stream"))
            .unwrap();
        assert!(back == msg);
    }
    assert!(
        received.load(Ordering::Relaxed) > before,
        "the stream did not move meanwhile"
    );
    drop(client);
    echo.await.unwrap();
    reading.abort();
    streaming.abort();
    rig.closed().await;
}
