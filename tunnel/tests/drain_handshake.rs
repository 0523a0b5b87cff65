//! The drain handshake (issue 17): an agent that leaves a session keeps taking streams until
//! the server has said it opens no more, and only then sends GOAWAY. Here the test is the
//! server (an HTTP/2 client of its own), so it can open a stream at the worst moment: after
//! the agent announced it leaves, before the server acknowledged. An agent that sent GOAWAY at
//! the announcement (the old drain) refuses that stream, which with the real server cost the
//! CONNECT a second round trip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::Empty;
use hyper::client::conn::http2::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

fn get(uri: &str) -> Request<Empty<Bytes>> {
    Request::get(uri).body(Empty::new()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_sent_after_the_agent_announced_it_leaves_is_served() {
    let world = World::new();
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target_addr = target.local_addr().unwrap();
    tokio::spawn(async move {
        // Held open until the test ends, so the stream stays up until the test drops it.
        let mut held = Vec::new();
        while let Ok((tcp, _)) = target.accept().await {
            held.push(tcp);
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let acceptor = TlsAcceptor::from(world.pki.server_config(&world.server_cert, true, &["h2"]));
    let agent = TestAgent::start(world.loopback_agent(listener.local_addr().unwrap()));

    // The server's side of the session, as `server/session.rs` opens it.
    let (tcp, _) = listener.accept().await.unwrap();
    let tls = acceptor.accept(tcp).await.unwrap();
    let (mut send, conn): (SendRequest<Empty<Bytes>>, _) =
        hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(tls))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let leaving = send.send_request(get("http://isthmus-agent/drain"));
    let ping = send.send_request(get("http://isthmus-agent/ping")).await;
    assert_eq!(ping.unwrap().status(), StatusCode::OK);

    // The agent stops: it announces that it leaves this session.
    let stopping = tokio::spawn(agent.stop());
    let answer = tokio::time::timeout(DEADLINE, leaving).await.unwrap();
    assert_eq!(answer.unwrap().status(), StatusCode::OK, "/drain");

    // A full round trip after the announcement: a GOAWAY an agent sent with it has arrived
    // here by the time this answer has (it was written first on the connection).
    send.ready()
        .await
        .expect("the session still takes streams after the announcement");
    let ping = send.send_request(get("http://isthmus-agent/ping")).await;
    assert_eq!(
        ping.expect("a request after the announcement").status(),
        StatusCode::OK
    );
    // The stream that used to be refused: opened before the server acknowledged.
    let connect = Request::connect(target_addr.to_string())
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(connect).await;
    let resp = resp.expect("a CONNECT before the acknowledgement");
    assert_eq!(resp.status(), StatusCode::OK);
    let stream = hyper::upgrade::on(resp).await.unwrap();

    // The acknowledgement: now the agent drains (GOAWAY) and leaves once the stream ends.
    let acked = send.send_request(get("http://isthmus-agent/drained")).await;
    assert_eq!(acked.unwrap().status(), StatusCode::OK);
    drop(stream);
    tokio::time::timeout(DEADLINE, stopping)
        .await
        .expect("the agent drained and stopped")
        .unwrap();
    tokio::time::timeout(DEADLINE, conn)
        .await
        .expect("the session ended")
        .unwrap()
        .unwrap();
}
