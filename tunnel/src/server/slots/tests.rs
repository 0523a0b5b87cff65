use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn stranger(i: u32) -> IpAddr {
    IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i))
}

/// Makes `source` known: one of its handshakes completes.
fn complete(t: &Arc<Slots>, source: &str) {
    t.admit(ip(source)).0.completed();
}

#[test]
fn a_source_at_its_share_loses_its_own_oldest() {
    let t = Slots::new(10, 2);
    let (_a1, mut r1) = t.admit(ip("10.0.0.1"));
    let (_a2, mut r2) = t.admit(ip("::ffff:10.0.0.1"));
    let (_b, mut rb) = t.admit(ip("10.0.0.2"));
    let (_a3, mut r3) = t.admit(ip("10.0.0.1"));
    assert!(r1.try_recv().is_ok());
    assert!(r2.try_recv().is_err() && r3.try_recv().is_err() && rb.try_recv().is_err());
    assert_eq!(t.len(), 3);
    // One /64 is one source.
    let (_c1, mut rc1) = t.admit(ip("2001:db8::1"));
    let (_c2, _) = t.admit(ip("2001:db8::ffff:1"));
    let (_c3, _) = t.admit(ip("2001:db8::2"));
    assert!(rc1.try_recv().is_ok());
}

#[test]
fn a_full_table_loses_a_handshake_of_the_heaviest_stranger() {
    let t = Slots::new(4, 3);
    let (_a, mut a) = t.admit(ip("192.0.2.1"));
    let (_f1, mut f1) = t.admit(ip("10.0.0.1"));
    let (_f2, mut f2) = t.admit(ip("10.0.0.1"));
    let (_g1, mut g1) = t.admit(ip("10.0.0.2"));
    // Full: 10.0.0.1 holds the most, its oldest goes.
    let (_g2, mut g2) = t.admit(ip("10.0.0.2"));
    assert!(f1.try_recv().is_ok());
    // Now 10.0.0.2 holds the most.
    let (_h, mut h) = t.admit(ip("10.0.0.3"));
    assert!(g1.try_recv().is_ok());
    // Every source holds one: one of them goes, not necessarily the oldest.
    let (_i, _) = t.admit(ip("10.0.0.4"));
    let closed = [&mut a, &mut f2, &mut g2, &mut h]
        .into_iter()
        .map(|r| r.try_recv().is_ok())
        .filter(|closed| *closed)
        .count();
    assert_eq!(closed, 1);
    assert_eq!(t.len(), 4);
}

#[test]
fn strangers_never_close_a_known_sources_handshake() {
    let t = Slots::new(8, 2);
    complete(&t, "192.0.2.1");
    let (_agent, mut agent) = t.admit(ip("192.0.2.1"));
    let mut held = Vec::new();
    for i in 0..1000 {
        held.push(t.admit(stranger(i)));
    }
    assert!(agent.try_recv().is_err());
    assert_eq!(t.len(), 8);
    // Its own newer handshakes still replace it at its share.
    let (_a2, _) = t.admit(ip("192.0.2.1"));
    let (_a3, _) = t.admit(ip("192.0.2.1"));
    assert!(agent.try_recv().is_ok());
}

#[test]
fn known_sources_take_from_strangers_up_to_the_reserve() {
    // 8 slots: a reserve of 2.
    let t = Slots::new(8, 8);
    for k in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        complete(&t, k);
    }
    let mut strangers: Vec<_> = (0..8).map(|i| t.admit(stranger(i))).collect();
    let (_a, mut a) = t.admit(ip("192.0.2.1"));
    let (_b, mut b) = t.admit(ip("192.0.2.2"));
    let closed = |s: &mut Vec<(Slot, oneshot::Receiver<()>)>| {
        s.iter_mut()
            .map(|(_, r)| r.try_recv().is_ok())
            .filter(|closed| *closed)
            .count()
    };
    assert_eq!(closed(&mut strangers), 2);
    // The reserve is full: a third known source takes from the known.
    let (_c, mut c) = t.admit(ip("192.0.2.3"));
    assert_eq!(closed(&mut strangers), 0);
    let known_closed = [&mut a, &mut b]
        .into_iter()
        .map(|r| r.try_recv().is_ok())
        .filter(|closed| *closed)
        .count();
    assert_eq!(known_closed, 1);
    assert!(c.try_recv().is_err());
    assert_eq!(t.len(), 8);
}

#[test]
fn finished_handshakes_free_their_slots() {
    let t = Slots::new(2, 2);
    let (a, _) = t.admit(ip("10.0.0.1"));
    let (b, mut rb) = t.admit(ip("10.0.0.1"));
    drop(a);
    let (_c, _) = t.admit(ip("10.0.0.2"));
    assert!(rb.try_recv().is_err());
    b.completed();
    assert_eq!(t.len(), 1);
    assert_eq!(t.lock().by_source.len(), 1);
}

#[test]
fn the_known_sources_are_bounded_and_the_stalest_goes() {
    let t = Slots::new(4, 1);
    for i in 0..=KNOWN_MAX as u32 {
        t.admit(stranger(i)).0.completed();
    }
    let st = t.lock();
    assert_eq!(st.known.len(), KNOWN_MAX);
    assert!(!st.known.contains_key(&stranger(0)));
    assert!(st.known.contains_key(&stranger(KNOWN_MAX as u32)));
}
