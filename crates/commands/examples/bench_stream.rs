//! Placeholder; the benchmark comes next.
fn main() {}
