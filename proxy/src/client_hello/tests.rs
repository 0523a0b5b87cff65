//! Unit tests over ClientHellos built field by field, so each verdict and each `Malformed`
//! reason is reached by changing exactly one thing in an otherwise valid hello.

use super::{hello_len, parse, Malformed, Parsed};

const EXT_SERVER_NAME: u16 = 0;
const EXT_SUPPORTED_GROUPS: u16 = 10;

/// The fields of a ClientHello body that the parser looks at.
#[derive(Clone)]
struct Hello {
    session_id: Vec<u8>,
    suites: Vec<u8>,
    compression: Vec<u8>,
    /// `None` leaves the extensions block out entirely, as pre-TLS-1.0-extension clients did.
    extensions: Option<Vec<(u16, Vec<u8>)>>,
}

impl Hello {
    fn with_sni(name: &[u8]) -> Self {
        Hello::with_ext(vec![
            (EXT_SUPPORTED_GROUPS, vec![0, 2, 0, 0x1d]),
            (EXT_SERVER_NAME, sni_data(&[(0, name)])),
        ])
    }

    fn with_ext(extensions: Vec<(u16, Vec<u8>)>) -> Self {
        Hello {
            session_id: vec![7; 32],
            suites: vec![0x13, 0x01, 0x13, 0x02],
            compression: vec![0],
            extensions: Some(extensions),
        }
    }

    fn body(&self) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend([0xab; 32]);
        push_u8_prefixed(&mut b, &self.session_id);
        push_u16_prefixed(&mut b, &self.suites);
        push_u8_prefixed(&mut b, &self.compression);
        if let Some(exts) = &self.extensions {
            let mut e = Vec::new();
            for (t, data) in exts {
                e.extend(t.to_be_bytes());
                push_u16_prefixed(&mut e, data);
            }
            push_u16_prefixed(&mut b, &e);
        }
        b
    }

    /// The whole hello in one record.
    fn bytes(&self) -> Vec<u8> {
        records(&handshake(1, &self.body()), usize::MAX)
    }
}

fn push_u8_prefixed(out: &mut Vec<u8>, data: &[u8]) {
    out.push(u8::try_from(data.len()).unwrap());
    out.extend(data);
}

fn push_u16_prefixed(out: &mut Vec<u8>, data: &[u8]) {
    out.extend(u16::try_from(data.len()).unwrap().to_be_bytes());
    out.extend(data);
}

/// server_name extension data with these (name_type, name) entries.
fn sni_data(entries: &[(u8, &[u8])]) -> Vec<u8> {
    let mut list = Vec::new();
    for (name_type, name) in entries {
        list.push(*name_type);
        push_u16_prefixed(&mut list, name);
    }
    let mut data = Vec::new();
    push_u16_prefixed(&mut data, &list);
    data
}

fn handshake(msg_type: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![msg_type];
    m.extend(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
    m.extend(body);
    m
}

/// Frames a handshake message into handshake records of at most `chunk` bytes.
fn records(message: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for fragment in message.chunks(chunk.min(1 << 14)) {
        out.extend([22, 3, 1]);
        push_u16_prefixed(&mut out, fragment);
    }
    out
}

fn malformed(buf: &[u8]) -> Malformed {
    match parse(buf) {
        Parsed::Malformed(m) => m,
        other => panic!("expected Malformed, got {other:?}"),
    }
}

/// Asserts `NeedMore` on every strict prefix and `want` on the whole buffer.
fn assert_incremental(buf: &[u8], want: &Parsed) {
    for n in 0..buf.len() {
        assert_eq!(parse(&buf[..n]), Parsed::NeedMore, "prefix of {n} bytes");
    }
    assert_eq!(&parse(buf), want);
}

#[test]
fn sni_exactly_as_sent() {
    let buf = Hello::with_sni(b"Etcd-Main-0.Shoot--X.example.test").bytes();
    let want = Parsed::Sni("Etcd-Main-0.Shoot--X.example.test".into());
    assert_incremental(&buf, &want);
    assert_eq!(hello_len(&buf), Some(buf.len()));
}

#[test]
fn no_sni() {
    let mut no_extensions = Hello::with_sni(b"x");
    no_extensions.extensions = None;
    assert_incremental(&no_extensions.bytes(), &Parsed::NoSni);
    let no_server_name = Hello::with_ext(vec![(EXT_SUPPORTED_GROUPS, vec![0, 2, 0, 0x1d])]);
    assert_incremental(&no_server_name.bytes(), &Parsed::NoSni);
    assert_incremental(&Hello::with_ext(vec![]).bytes(), &Parsed::NoSni);
    let other_name_type = Hello::with_ext(vec![(EXT_SERVER_NAME, sni_data(&[(9, b"x")]))]);
    assert_incremental(&other_name_type.bytes(), &Parsed::NoSni);
}

#[test]
fn host_name_next_to_other_name_types() {
    let data = sni_data(&[(9, b"opaque"), (0, b"a.example"), (9, b"")]);
    let buf = Hello::with_ext(vec![(EXT_SERVER_NAME, data)]).bytes();
    assert_eq!(parse(&buf), Parsed::Sni("a.example".into()));
}

#[test]
fn not_tls() {
    for buf in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"CONNECT vpn-seed-server:1194 HTTP/1.1\r\n",
        b"SSH-2.0-OpenSSH_9.2\r\n",
        // SSLv2-compatible ClientHello header: 2-byte length with the high bit, then type 1.
        &[0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15],
        // Handshake content type but not a 3.x version.
        &[22, 2, 0],
        &[22],
    ] {
        let want = if buf.len() < 2 {
            Parsed::NeedMore
        } else {
            Parsed::NotTls
        };
        assert_eq!(parse(buf), want, "{buf:?}");
    }
    assert_eq!(parse(b""), Parsed::NeedMore);
    assert_eq!(parse(b"G"), Parsed::NotTls, "decided on the first byte");
}

#[test]
fn fragmented_over_records() {
    let hello = Hello::with_sni(b"frag.example");
    let message = handshake(1, &hello.body());
    let want = Parsed::Sni("frag.example".into());
    for chunk in [1, 2, 3, 4, 5, 40, message.len() / 2, message.len() - 1] {
        let buf = records(&message, chunk);
        assert_incremental(&buf, &want);
        assert_eq!(hello_len(&buf), Some(buf.len()), "chunk {chunk}");
    }
}

#[test]
fn trailing_records_do_not_matter() {
    let mut buf = records(&handshake(1, &Hello::with_sni(b"a.b").body()), 10);
    let end = buf.len();
    // Early data or garbage pipelined behind the hello belongs to the spliced stream.
    buf.extend([23, 3, 3, 0, 2, 0xff, 0xff, 0, 0, 0]);
    assert_eq!(parse(&buf), Parsed::Sni("a.b".into()));
    assert_eq!(hello_len(&buf), Some(end));
}

#[test]
fn large_padded_hello() {
    let mut hello = Hello::with_sni(b"big.example");
    hello
        .extensions
        .as_mut()
        .unwrap()
        .push((21, vec![0; 16 * 1024]));
    let message = handshake(1, &hello.body());
    assert_incremental(
        &records(&message, 1 << 14),
        &Parsed::Sni("big.example".into()),
    );
}

#[test]
fn record_framing_errors() {
    assert_eq!(malformed(&[22, 3, 1, 0x48, 0x01]), Malformed::RecordTooLong);
    assert_eq!(parse(&[22, 3, 1, 0x48, 0x00]), Parsed::NeedMore);
    assert_eq!(malformed(&[22, 3, 1, 0, 0]), Malformed::EmptyRecord);
    assert_eq!(malformed(&[22, 3, 5]), Malformed::BadRecordVersion);
    assert_eq!(
        parse(&[22, 3, 0, 0, 1]),
        Parsed::NeedMore,
        "SSL 3.0 record version"
    );

    let message = handshake(1, &Hello::with_sni(b"a").body());
    let two = records(&message, 10);
    let mut interleaved = two[..15].to_vec();
    interleaved.extend([21, 3, 3, 0, 2, 2, 40]);
    assert_eq!(malformed(&interleaved), Malformed::InterleavedRecord);
    let mut bad_second_version = two[..15].to_vec();
    bad_second_version.extend([22, 2, 0]);
    assert_eq!(malformed(&bad_second_version), Malformed::BadRecordVersion);
}

#[test]
fn handshake_header_errors() {
    // A ServerHello, decided from its first handshake byte.
    assert_eq!(malformed(&[22, 3, 3, 0, 90, 2]), Malformed::NotClientHello);
    assert_eq!(
        malformed(&[22, 3, 1, 0, 4, 1, 1, 0, 1]),
        Malformed::HelloTooLong
    );
    assert_eq!(parse(&[22, 3, 1, 0, 4, 1, 1, 0, 0]), Parsed::NeedMore);

    let body = Hello::with_sni(b"a").body();
    let mut message = handshake(1, &body);
    message.push(0);
    // Decided from the record header, before the extra byte arrives.
    let buf = records(&message, usize::MAX);
    assert_eq!(
        malformed(&buf[..buf.len() - 1]),
        Malformed::TrailingHandshakeData
    );
}

#[test]
fn length_errors() {
    let ok = Hello::with_sni(b"a.example");
    let mut odd_suites = ok.clone();
    odd_suites.suites.push(0);
    let mut no_suites = ok.clone();
    no_suites.suites.clear();
    let mut no_compression = ok.clone();
    no_compression.compression.clear();
    for h in [odd_suites, no_suites, no_compression] {
        assert_eq!(malformed(&h.bytes()), Malformed::BadLength);
    }

    let body = ok.body();
    // Message too short for its fixed fields, for the session id, for the extensions block.
    for cut in [10, 2 + 32 + 1 + 5, body.len() - 1] {
        let buf = records(&handshake(1, &body[..cut]), usize::MAX);
        assert_eq!(malformed(&buf), Malformed::BadLength, "cut at {cut}");
    }
    let mut trailing = body.clone();
    trailing.push(0);
    let buf = records(&handshake(1, &trailing), usize::MAX);
    assert_eq!(malformed(&buf), Malformed::BadLength);
}

#[test]
fn extension_errors() {
    // Extension data longer than the extensions block.
    let mut body = Hello::with_ext(vec![(EXT_SUPPORTED_GROUPS, vec![0, 2, 0, 0x1d])]).body();
    let n = body.len();
    body[n - 5] += 1;
    let buf = records(&handshake(1, &body), usize::MAX);
    assert_eq!(malformed(&buf), Malformed::BadExtension);

    let mut list_too_short = sni_data(&[(0, b"a.example")]);
    list_too_short[1] -= 1;
    let mut list_too_long = sni_data(&[(0, b"a.example")]);
    list_too_long[1] += 1;
    for data in [vec![], vec![0, 0], list_too_short, list_too_long] {
        let buf = Hello::with_ext(vec![(EXT_SERVER_NAME, data.clone())]).bytes();
        assert_eq!(malformed(&buf), Malformed::BadExtension, "{data:?}");
    }
}

#[test]
fn duplicate_extensions() {
    let groups = (EXT_SUPPORTED_GROUPS, vec![0, 2, 0, 0x1d]);
    let sni = (EXT_SERVER_NAME, sni_data(&[(0, b"a")]));
    for exts in [
        vec![groups.clone(), sni.clone(), groups.clone()],
        vec![sni.clone(), sni.clone()],
        vec![(0xffff, vec![]), (0xffff, vec![])],
    ] {
        let buf = Hello::with_ext(exts).bytes();
        assert_eq!(malformed(&buf), Malformed::DuplicateExtension);
    }
}

#[test]
fn bad_server_names() {
    let long = vec![b'a'; 256];
    for name in [
        &b""[..],
        &long,
        b"a b",
        b"a\0b",
        b"a\tb",
        b"a\x7f",
        b"caf\xc3\xa9.example",
    ] {
        let buf = Hello::with_sni(name).bytes();
        assert_eq!(malformed(&buf), Malformed::BadServerName, "{name:?}");
    }
    assert_eq!(
        parse(&Hello::with_sni(&long[..255]).bytes()),
        Parsed::Sni("a".repeat(255))
    );
    let two = sni_data(&[(0, b"a"), (0, b"b")]);
    let buf = Hello::with_ext(vec![(EXT_SERVER_NAME, two)]).bytes();
    assert_eq!(malformed(&buf), Malformed::BadServerName);
}

#[test]
fn labels_are_distinct_snake_case() {
    let all = [
        Malformed::RecordTooLong,
        Malformed::EmptyRecord,
        Malformed::BadRecordVersion,
        Malformed::InterleavedRecord,
        Malformed::NotClientHello,
        Malformed::HelloTooLong,
        Malformed::TrailingHandshakeData,
        Malformed::BadLength,
        Malformed::BadExtension,
        Malformed::DuplicateExtension,
        Malformed::BadServerName,
    ];
    let mut labels: Vec<_> = all.iter().map(|m| m.as_str()).collect();
    for l in &labels {
        assert!(
            l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{l}"
        );
    }
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels.len(), all.len());
    assert_eq!(Malformed::BadLength.to_string(), "bad_length");
}
