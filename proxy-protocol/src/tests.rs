//! Byte-exact encodes against hand-written spec bytes, round trips, every prefix of a valid
//! header, and one test per `Invalid` reason.

use super::{encode_v1, encode_v2, parse, Addresses, Header, Parsed};

fn addrs(source: &str, destination: &str) -> Addresses {
    Addresses {
        source: source.parse().unwrap(),
        destination: destination.parse().unwrap(),
    }
}

fn v4() -> Addresses {
    addrs("192.0.2.1:56324", "198.51.100.7:443")
}

fn v6() -> Addresses {
    addrs("[2001:db8::1]:56324", "[2001:db8::2:1]:2379")
}

const SIG: &[u8] = b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a";

fn v2_tcp4_bytes() -> Vec<u8> {
    let mut b = SIG.to_vec();
    b.extend_from_slice(&[0x21, 0x11, 0x00, 0x0c]);
    b.extend_from_slice(&[192, 0, 2, 1, 198, 51, 100, 7]);
    b.extend_from_slice(&[0xdc, 0x04, 0x01, 0xbb]); // 56324, 443
    b
}

fn v2_tcp6_bytes() -> Vec<u8> {
    let mut b = SIG.to_vec();
    b.extend_from_slice(&[0x21, 0x21, 0x00, 0x24]);
    b.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    b.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1]);
    b.extend_from_slice(&[0xdc, 0x04, 0x09, 0x4b]); // 56324, 2379
    b
}

fn encoded(f: fn(&Addresses, &mut Vec<u8>), a: &Addresses) -> Vec<u8> {
    let mut out = b"keep".to_vec();
    f(a, &mut out);
    assert_eq!(out.get(..4), Some(&b"keep"[..]), "encoders append");
    out.split_off(4)
}

fn proxied(a: Addresses, len: usize) -> Parsed {
    Parsed::Header {
        header: Header::Proxied(a),
        len,
    }
}

/// Every strict prefix of `header` is `NeedMore`; the whole, and the whole plus payload, parse.
fn assert_prefixes_need_more(header: &[u8]) {
    for n in 0..header.len() {
        assert_eq!(
            parse(&header[..n]),
            Parsed::NeedMore,
            "prefix {n} of {header:?}"
        );
    }
}

#[test]
fn encode_v1_tcp4_exact() {
    let want = b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n";
    assert_eq!(encoded(encode_v1, &v4()), want);
}

#[test]
fn encode_v1_tcp6_exact() {
    let want = b"PROXY TCP6 2001:db8::1 2001:db8::2:1 56324 2379\r\n";
    assert_eq!(encoded(encode_v1, &v6()), want);
}

#[test]
fn encode_v1_mixed_families_maps_ipv4_into_tcp6() {
    let want = b"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2:1 56324 2379\r\n";
    let a = addrs("192.0.2.1:56324", "[2001:db8::2:1]:2379");
    assert_eq!(encoded(encode_v1, &a), want);
    let a = addrs("[2001:db8::2:1]:2379", "192.0.2.1:56324");
    let want = b"PROXY TCP6 2001:db8::2:1 ::ffff:192.0.2.1 2379 56324\r\n";
    assert_eq!(encoded(encode_v1, &a), want);
}

#[test]
fn encode_v2_tcp4_exact() {
    assert_eq!(encoded(encode_v2, &v4()), v2_tcp4_bytes());
}

#[test]
fn encode_v2_tcp6_exact() {
    assert_eq!(encoded(encode_v2, &v6()), v2_tcp6_bytes());
}

#[test]
fn encode_v2_mixed_families_uses_tcp6() {
    let a = addrs("192.0.2.1:1", "[::1]:2");
    let got = encoded(encode_v2, &a);
    let mut b = SIG.to_vec();
    b.extend_from_slice(&[0x21, 0x21, 0x00, 0x24]);
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]);
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    b.extend_from_slice(&[0, 1, 0, 2]);
    assert_eq!(got, b);
}

#[test]
fn round_trips_with_payload_and_prefixes() {
    for a in [v4(), v6(), addrs("0.0.0.0:0", "255.255.255.255:65535")] {
        for enc in [encode_v1 as fn(&Addresses, &mut Vec<u8>), encode_v2] {
            let header = encoded(enc, &a);
            assert_prefixes_need_more(&header);
            assert_eq!(parse(&header), proxied(a, header.len()));
            let mut with_payload = header.clone();
            with_payload.extend_from_slice(b"\x16\x03\x01\x02\x00\x01");
            assert_eq!(parse(&with_payload), proxied(a, header.len()));
        }
    }
}

#[test]
fn v1_longest_line_is_accepted() {
    let ip = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let line = format!("PROXY TCP6 {ip} {ip} 65535 65535\r\n");
    assert_eq!(line.len(), 104);
    let a = addrs(&format!("[{ip}]:65535"), &format!("[{ip}]:65535"));
    assert_eq!(parse(line.as_bytes()), proxied(a, 104));
}

#[test]
fn v2_tlvs_are_covered_by_len() {
    let mut h = v2_tcp4_bytes();
    let tlvs = [0x01, 0x00, 0x02, b'h', b'2', 0x04, 0x00, 0x00]; // ALPN "h2", empty NOOP
    h[15] += tlvs.len() as u8;
    h.extend_from_slice(&tlvs);
    assert_prefixes_need_more(&h);
    let len = h.len();
    h.extend_from_slice(b"payload");
    assert_eq!(parse(&h), proxied(v4(), len));
}

#[test]
fn v2_local_is_local_whatever_the_family() {
    let mut h = SIG.to_vec();
    h.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
    assert_prefixes_need_more(&h);
    assert_eq!(
        parse(&h),
        Parsed::Header {
            header: Header::Local,
            len: 16
        }
    );
    let mut h = v2_tcp4_bytes();
    h[12] = 0x20;
    assert_eq!(
        parse(&h),
        Parsed::Header {
            header: Header::Local,
            len: 28
        }
    );
}

#[test]
fn v2_proxy_unspec_is_local() {
    let mut h = SIG.to_vec();
    h.extend_from_slice(&[0x21, 0x00, 0x00, 0x00]);
    assert_eq!(
        parse(&h),
        Parsed::Header {
            header: Header::Local,
            len: 16
        }
    );
}

#[test]
fn v1_unknown_is_local() {
    let h = b"PROXY UNKNOWN\r\n";
    assert_prefixes_need_more(h);
    assert_eq!(
        parse(h),
        Parsed::Header {
            header: Header::Local,
            len: h.len()
        }
    );
    let h = b"PROXY UNKNOWN ffff:: ffff:: 1 2\r\nGET";
    assert_eq!(
        parse(h),
        Parsed::Header {
            header: Header::Local,
            len: h.len() - 3
        }
    );
}

#[test]
fn absent_is_decided_from_the_first_byte_that_differs() {
    assert_eq!(parse(b""), Parsed::NeedMore);
    assert_eq!(parse(&[0x16]), Parsed::Absent, "TLS handshake record");
    assert_eq!(parse(b"G"), Parsed::Absent);
    assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Parsed::Absent);
    assert_eq!(parse(b"PO"), Parsed::Absent, "POST");
    assert_eq!(parse(b"PROXY"), Parsed::NeedMore);
    assert_eq!(parse(b"PROXYX"), Parsed::Absent);
}

#[test]
fn v1_invalid() {
    let cases: &[(&[u8], &str)] = &[
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "v1 line without CR"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "v1 extra field"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "v1 missing field"),
        (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", "v1 extra field"),
        (b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", "v1 bad address"),
        (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "v1 bad address"),
        (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "v1 bad address"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "v1 bad port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", "v1 bad port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "v1 bad port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 \r\n", "v1 bad port"),
        (b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", "v1 bad protocol"),
        (b"PROXY \r\n", "v1 bad protocol"),
        (b"PROXY TCP4 1.2.3.\xff 5.6.7.8 1 2\r\n", "v1 not ascii"),
    ];
    for (input, why) in cases {
        assert_eq!(
            parse(input),
            Parsed::Invalid(why),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn v1_line_too_long_without_crlf() {
    let mut long = b"PROXY TCP6 ".to_vec();
    long.resize(106, b'1');
    assert_eq!(parse(&long), Parsed::NeedMore);
    long.push(b'1');
    assert_eq!(parse(&long), Parsed::Invalid("v1 line too long"));
    long.extend_from_slice(b"\r\n");
    assert_eq!(parse(&long), Parsed::Invalid("v1 line too long"));
}

#[test]
fn v2_invalid() {
    let with = |at: usize, byte: u8| {
        let mut h = v2_tcp4_bytes();
        h[at] = byte;
        h
    };
    assert_eq!(
        parse(b"\r\n\r\n\0\r\nQUIX"),
        Parsed::Invalid("v2 bad signature")
    );
    assert_eq!(parse(b"\r\r"), Parsed::Invalid("v2 bad signature"));
    assert_eq!(parse(&with(12, 0x11)), Parsed::Invalid("v2 bad version"));
    assert_eq!(parse(&with(12, 0x31)), Parsed::Invalid("v2 bad version"));
    assert_eq!(parse(&with(12, 0x22)), Parsed::Invalid("v2 bad command"));
    assert_eq!(
        parse(&with(13, 0x12)),
        Parsed::Invalid("v2 unsupported family")
    );
    assert_eq!(
        parse(&with(13, 0x31)),
        Parsed::Invalid("v2 unsupported family")
    );
    assert_eq!(parse(&with(15, 11)), Parsed::Invalid("v2 length too short"));
    let mut h6 = v2_tcp6_bytes();
    h6[15] = 35;
    // Decided from the 16 fixed bytes, without waiting for the announced body.
    assert_eq!(parse(&h6[..16]), Parsed::Invalid("v2 length too short"));
    h6[13] = 0x11;
    h6[15] = 12;
    let a = addrs("32.1.13.184:0", "0.0.0.0:0");
    assert_eq!(
        parse(&h6),
        proxied(a, 28),
        "a TCP4 header decides its own length"
    );
}

#[test]
fn verdicts_on_prefixes_are_final() {
    let mut inputs = vec![
        v2_tcp4_bytes(),
        v2_tcp6_bytes(),
        b"PROXY UNKNOWN\r\n".to_vec(),
    ];
    inputs.push(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 02\r\n".to_vec());
    for input in inputs {
        let full = parse(&input);
        for n in 0..input.len() {
            let early = parse(&input[..n]);
            assert!(
                early == Parsed::NeedMore || early == full,
                "{n}: {early:?} vs {full:?}"
            );
        }
    }
}

#[test]
fn v2_longer_than_the_cap_is_refused_from_the_fixed_bytes() {
    let mut h = v2_tcp4_bytes();
    let body = u16::try_from(super::V2_MAX_LEN - 16).unwrap();
    h[14..16].copy_from_slice(&body.to_be_bytes());
    // At the cap: waits for the body, then parses.
    assert_eq!(parse(&h), Parsed::NeedMore);
    assert_eq!(super::v2_len(&h), Some(super::V2_MAX_LEN));
    h.resize(super::V2_MAX_LEN, 0);
    assert_eq!(parse(&h), proxied(v4(), super::V2_MAX_LEN));
    // One byte more is refused from the 16 fixed bytes, whatever follows.
    h[14..16].copy_from_slice(&(body + 1).to_be_bytes());
    assert_eq!(parse(&h[..16]), Parsed::Invalid("v2 too long"));
    h[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(parse(&h[..16]), Parsed::Invalid("v2 too long"));
}

#[test]
fn detect_decides_at_the_signature() {
    use super::{detect, Detected};
    assert_eq!(detect(b""), Detected::NeedMore);
    assert_eq!(detect(&[0x16, 3, 1]), Detected::Absent);
    assert_eq!(detect(b"PROX"), Detected::NeedMore);
    assert_eq!(detect(b"PROXY "), Detected::Header);
    assert_eq!(detect(b"PROXY garbage"), Detected::Header);
    assert_eq!(detect(b"POST /"), Detected::Absent);
    assert_eq!(detect(&SIG[..11]), Detected::NeedMore);
    // The signature is enough: an announced 64 KiB body is not waited for.
    let mut h = SIG.to_vec();
    assert_eq!(detect(&h), Detected::Header);
    h.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
    assert_eq!(detect(&h), Detected::Header);
    assert_eq!(detect(b"\r\n\r\nX"), Detected::Absent);
    for n in 0..v2_tcp4_bytes().len() {
        let d = detect(&v2_tcp4_bytes()[..n]);
        assert!(d == Detected::NeedMore || d == Detected::Header, "{n}");
    }
}

#[test]
fn v2_len_reads_the_announced_length_only() {
    use super::v2_len;
    assert_eq!(v2_len(&v2_tcp4_bytes()), Some(28));
    assert_eq!(v2_len(&v2_tcp4_bytes()[..15]), None);
    assert_eq!(v2_len(&v2_tcp6_bytes()[..16]), Some(52));
    assert_eq!(v2_len(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"), None);
}
