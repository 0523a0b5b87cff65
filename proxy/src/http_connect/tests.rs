//! The heads Gardener's vpn-shoot and OpenVPN really send, every prefix of them, and one test
//! per `Error` variant and `Malformed` reason.

use super::{parse, response, Error, Request};

const HEADER: &str = "X-Gardener-Destination";
const MAX: usize = 8192;

const GARDENER: &[u8] = b"CONNECT 10.0.0.1:1194 HTTP/1.1\r\nHost: 10.0.0.1:1194\r\nX-Gardener-Destination: outbound|1194||vpn-seed-server-0.shoot--foo--bar.svc.cluster.local\r\n\r\n";
const DESTINATION: &str = "outbound|1194||vpn-seed-server-0.shoot--foo--bar.svc.cluster.local";

fn ok(authority: &str, value: Option<&str>, head_len: usize) -> Result<Request, Error> {
    Ok(Request {
        authority: authority.to_owned(),
        header_value: value.map(str::to_owned),
        head_len,
    })
}

fn assert_prefixes_need_more(head: &[u8], header: &str) {
    for n in 0..head.len() {
        assert_eq!(
            parse(&head[..n], header, MAX),
            Err(Error::NeedMore),
            "prefix {n}"
        );
    }
}

#[test]
fn gardener_request() {
    let want = ok("10.0.0.1:1194", Some(DESTINATION), GARDENER.len());
    assert_eq!(parse(GARDENER, HEADER, MAX), want);
    assert_prefixes_need_more(GARDENER, HEADER);
}

#[test]
fn legacy_reversed_vpn_header() {
    let head = b"CONNECT kube-apiserver:443 HTTP/1.1\r\nReversed-VPN: outbound|1194||vpn-seed-server.shoot--a--b.svc.cluster.local\r\n\r\n";
    let want = ok(
        "kube-apiserver:443",
        Some("outbound|1194||vpn-seed-server.shoot--a--b.svc.cluster.local"),
        head.len(),
    );
    assert_eq!(parse(head, "Reversed-VPN", MAX), want);
    assert_prefixes_need_more(head, "Reversed-VPN");
}

#[test]
fn openvpn_style_request_with_extra_headers_and_odd_spacing() {
    let head = b"CONNECT [2001:db8::1]:1194 HTTP/1.0\nHost: [2001:db8::1]:1194\nUser-Agent: OpenVPN/2.6\nProxy-Authorization: Basic dTpw\nx-gardener-destination:\t  outbound|1194||vpn \t\nX-Empty:\n\n";
    let want = ok("[2001:db8::1]:1194", Some("outbound|1194||vpn"), head.len());
    assert_eq!(parse(head, HEADER, MAX), want);
    assert_prefixes_need_more(head, HEADER);
}

#[test]
fn header_name_is_case_insensitive() {
    for name in [
        "x-gardener-destination",
        "X-GARDENER-DESTINATION",
        "x-GaRdEnEr-DeStInAtIoN",
    ] {
        assert_eq!(
            parse(GARDENER, name, MAX),
            ok("10.0.0.1:1194", Some(DESTINATION), GARDENER.len())
        );
    }
}

#[test]
fn missing_routing_header_is_none() {
    let head = b"CONNECT etcd-0.etcd:2380 HTTP/1.1\r\n\r\n";
    assert_eq!(
        parse(head, HEADER, MAX),
        ok("etcd-0.etcd:2380", None, head.len())
    );
}

#[test]
fn pipelined_bytes_after_the_head_are_left_alone() {
    let mut buf = GARDENER.to_vec();
    buf.extend_from_slice(b"\x16\x03\x01\x00\x10more tunnel bytes\r\n\r\n");
    let want = ok("10.0.0.1:1194", Some(DESTINATION), GARDENER.len());
    assert_eq!(parse(&buf, HEADER, MAX), want);
}

#[test]
fn not_connect_is_decided_from_the_method() {
    assert_eq!(parse(b"G", HEADER, MAX), Err(Error::NotConnect));
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\n\r\n", HEADER, MAX),
        Err(Error::NotConnect)
    );
    assert_eq!(
        parse(b"CONNECTX a:1 HTTP/1.1\r\n\r\n", HEADER, MAX),
        Err(Error::NotConnect)
    );
    assert_eq!(
        parse(b"connect a:1 HTTP/1.1\r\n\r\n", HEADER, MAX),
        Err(Error::NotConnect)
    );
    assert_eq!(parse(b"CONNEC", HEADER, MAX), Err(Error::NeedMore));
    assert_eq!(
        parse(b"CONNEx-a: b\n\n", HEADER, MAX),
        Err(Error::NotConnect)
    );
    assert_eq!(
        parse(b"CONN:", HEADER, MAX),
        Err(Error::Malformed("request line"))
    );
}

#[test]
fn too_large() {
    assert_eq!(
        parse(GARDENER, HEADER, GARDENER.len() - 1),
        Err(Error::TooLarge)
    );
    let head_only = &GARDENER[..GARDENER.len() - 2];
    assert_eq!(parse(head_only, HEADER, 64), Err(Error::TooLarge));
    assert_eq!(parse(&GARDENER[..63], HEADER, 64), Err(Error::NeedMore));
    let want = ok("10.0.0.1:1194", Some(DESTINATION), GARDENER.len());
    assert_eq!(
        parse(GARDENER, HEADER, GARDENER.len()),
        want,
        "exactly max_head fits"
    );
}

#[test]
fn malformed() {
    let cases: &[(&[u8], &str)] = &[
        (b"\x16\x03\x01\x02\x00", "request line"),
        (b" CONNECT a:1 HTTP/1.1\r\n\r\n", "request line"),
        (b"CONNECT  a:1 HTTP/1.1\r\n\r\n", "request line"),
        (b"CONNECT a:1 HTTP/1.1 x\r\n\r\n", "request line"),
        (b"CONNECT a:1\r\n\r\n", "request line"),
        (b"CONNECT a:1\tHTTP/1.1\r\n\r\n", "request line"),
        (b"CONNECT a:1 HTTP/1.1\r\r\n\r\n", "request line"),
        (b"CONNECT \xc3\xa4:1 HTTP/1.1\r\n\r\n", "request line"),
        (b"CONNECT a:1 HTTP/2.0\r\n\r\n", "version"),
        (b"CONNECT a:1 http/1.1\r\n\r\n", "version"),
        (b"CONNECT a HTTP/1.1\r\n\r\n", "authority"),
        (b"CONNECT :443 HTTP/1.1\r\n\r\n", "authority"),
        (b"CONNECT a:0 HTTP/1.1\r\n\r\n", "authority"),
        (b"CONNECT a:65536 HTTP/1.1\r\n\r\n", "authority"),
        (b"CONNECT a:+1 HTTP/1.1\r\n\r\n", "authority"),
        (b"CONNECT ::1:443 HTTP/1.1\r\n\r\n", "authority"),
        (b"CONNECT [::g]:443 HTTP/1.1\r\n\r\n", "authority"),
        (b"CONNECT a/b:443 HTTP/1.1\r\n\r\n", "authority"),
        (b"CONNECT a:1 HTTP/1.1\r\nHost : a\r\n\r\n", "header name"),
        (b"CONNECT a:1 HTTP/1.1\r\n: a\r\n\r\n", "header name"),
        (b"CONNECT a:1 HTTP/1.1\r\nHost a\r\n\r\n", "header line"),
        (b"CONNECT a:1 HTTP/1.1\r\nA: b\r\n c\r\n\r\n", "obs-fold"),
        (b"CONNECT a:1 HTTP/1.1\r\nA: b\r\n\tc\r\n\r\n", "obs-fold"),
        (b"CONNECT a:1 HTTP/1.1\r\nA: b\x00c\r\n\r\n", "header value"),
        (b"CONNECT a:1 HTTP/1.1\r\nA: b\rc\r\n\r\n", "header value"),
        (b"CONNECT a:1 HTTP/1.1\r\nA: b\x7f\r\n\r\n", "header value"),
        (b"CONNECT a:1 HTTP/1.1\r\nx-gardener-destination: \xff\r\n\r\n", "header value"),
        (
            b"CONNECT a:1 HTTP/1.1\r\nX-Gardener-Destination: a\r\nx-gardener-destination: a\r\n\r\n",
            "duplicate routing header",
        ),
    ];
    for (input, why) in cases {
        let got = parse(input, HEADER, MAX);
        assert_eq!(
            got,
            Err(Error::Malformed(why)),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn non_ascii_in_other_header_values_is_obs_text() {
    let head = b"CONNECT a:1 HTTP/1.1\r\nUser-Agent: caf\xe9\r\n\r\n";
    assert_eq!(parse(head, HEADER, MAX), ok("a:1", None, head.len()));
}

#[test]
fn verdicts_on_prefixes_are_final() {
    let inputs: &[&[u8]] = &[
        GARDENER,
        b"CONNECT a:1 HTTP/1.1\r\nHost a\r\n\r\n",
        b"CONNECT a:1 HTTP/1.1\r\nA: 1\r\nA: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\n\r\n",
        // Found by the fuzzer: NotConnect on half of it, once Malformed on all of it.
        b"CONNEx-gardener-destination:  a \n\n",
        b"CONN:",
    ];
    for input in inputs {
        for max in [16, MAX] {
            let full = parse(input, "a", max);
            for n in 0..input.len() {
                let early = parse(&input[..n], "a", max);
                assert!(
                    early == Err(Error::NeedMore) || early == full,
                    "{n}: {early:?}"
                );
            }
        }
    }
}

#[test]
fn responses() {
    assert_eq!(
        response(200),
        b"HTTP/1.1 200 Connection established\r\n\r\n"
    );
    let close = "Connection: close\r\nContent-Length: 0\r\n\r\n";
    let want = |line: &str| format!("{line}\r\n{close}").into_bytes();
    assert_eq!(response(400), want("HTTP/1.1 400 Bad Request"));
    assert_eq!(
        response(431),
        want("HTTP/1.1 431 Request Header Fields Too Large")
    );
    assert_eq!(response(502), want("HTTP/1.1 502 Bad Gateway"));
    assert_eq!(response(503), want("HTTP/1.1 503 Service Unavailable"));
    let allow = format!("HTTP/1.1 405 Method Not Allowed\r\nAllow: CONNECT\r\n{close}");
    assert_eq!(response(405), allow.into_bytes());
    assert_eq!(response(0), want("HTTP/1.1 500 Internal Server Error"));
    assert_eq!(response(599), want("HTTP/1.1 599 Error"));
}
