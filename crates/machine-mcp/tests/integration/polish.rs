//! Paper cuts a newcomer met in the first hour (issue 17 item 7): each message says what to do.

use std::process::Command;

use crate::util::bin;

fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_relay_url_without_a_scheme_suggests_https() {
    for given in ["relay.example.com", "localhost:8750"] {
        let (code, err) = stderr_of(&["connect", "--relay", given]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains(&format!("did you mean https://{given}?")),
            "{given}: {err}"
        );
    }
    let (code, err) = stderr_of(&["connect", "--relay", "ftp://relay.example.com"]);
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn a_port_in_use_suggests_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let state = tempfile::tempdir().unwrap();
    let (code, err) = stderr_of(&[
        "relay",
        "serve",
        "--listen",
        &addr,
        "--store",
        state.path().join("relay.db").to_str().unwrap(),
        "--public-url",
        "https://relay.example.com",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("the port is in use"), "{err}");
    assert!(err.contains("--listen"), "{err}");
}
