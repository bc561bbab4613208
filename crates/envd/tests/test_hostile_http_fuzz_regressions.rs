//! The fuzz targets' entry points (`e2b_envd::fuzzing`) on seed inputs and on every input the
//! fuzzer found crashing (each a regression test): they must not panic.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use e2b_envd::fuzzing;

fn envelope(flags: u8, msg: &[u8]) -> Vec<u8> {
    let mut v = vec![flags];
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

#[test]
fn connect_seeds() {
    let start = br#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"}},"stdin":false,"tag":"t"}"#;
    for input in [
        envelope(0, start),
        envelope(1, start),
        envelope(2, b"{}"),
        envelope(0, &[0x0a, 0x03, b'a', b'b', b'c']),
        vec![0, 0xff, 0xff, 0xff, 0xff],
        vec![],
        vec![0, 0, 0],
    ] {
        fuzzing::connect_envelope(&input);
    }
    for json in [
        &start[..],
        b"{\"path\":\"/tmp\",\"depth\":4294967295}",
        b"{\"process\":{\"pid\":-1}}",
        b"{\"signal\":\"SIGNAL_SIGKILL\",\"process\":{\"tag\":\"x\"}}",
        b"{\"input\":{\"stdin\":\"aGVsbG8=\"}}",
        b"[1,2",
        b"\"\\ud800\"",
        b"{\"process\":{\"cmd\":1e999}}",
    ] {
        fuzzing::connect_json(json);
    }
}

#[test]
fn files_range_seeds() {
    for (size, header) in [
        (100u64, "bytes=0-9"),
        (100, "bytes=-0"),
        (0, "bytes=-5"),
        (u64::MAX, "bytes=18446744073709551615-"),
        (10, "bytes=0-1,3-4,,-2"),
        (10, "gzip;q=NaN, identity;q=inf"),
        (10, "bytes=99999999999999999999999-"),
    ] {
        let mut input = size.to_le_bytes().to_vec();
        input.extend_from_slice(header.as_bytes());
        fuzzing::files_range(&input);
    }
}

#[test]
fn multipart_seeds() {
    let body = b"pre\r\n--fuzzboundary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\ndata\r\n--fuzzboundary--\r\n";
    for chunk in [1u8, 2, 7, 255] {
        let mut input = vec![chunk];
        input.extend_from_slice(body);
        fuzzing::multipart(&input);
        let mut many = vec![chunk];
        for _ in 0..20 {
            many.extend_from_slice(b"--fuzzboundary\r\n\r\nx\r\n");
        }
        fuzzing::multipart(&many);
    }
}

#[test]
fn resolve_path_seeds() {
    for p in [
        "",
        "~",
        "~/a/../../..",
        "~root",
        "a/b/../../../c",
        "/srv/root/../etc",
        "/./././",
        "//x",
        "/srv/root/x/..",
        "\0",
    ] {
        fuzzing::resolve_path(p.as_bytes());
    }
}

#[test]
fn grpc_web_seeds() {
    for input in [
        vec![0u8],
        vec![0, 0, 0, 0, 0, 0],
        vec![1, 0, 0, 0, 0, 2, 0x0a, 0x00],
        vec![2, b'A', b'A', b'A', b'A'],
        vec![3, b'!', b'!'],
        vec![0, 0x80, 0xff, 0xff, 0xff, 0xff],
    ] {
        fuzzing::grpc_web(&input);
    }
}
