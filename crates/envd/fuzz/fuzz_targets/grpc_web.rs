//! Fuzz target: see `e2b_envd::fuzzing::grpc_web`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    e2b_envd::fuzzing::grpc_web(data);
});
