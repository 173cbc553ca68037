//! Runs a check twice: with the kernels chosen by run-time CPU detection
//! (AVX2 on the fuzzing host), then with them turned off, so that the same
//! run covers the SSE2 paths of CPUs without AVX2 (which a fuzzing host
//! with AVX2 never takes otherwise). A failure in the second run only is
//! one of those paths.

pub fn with_and_without_runtime_simd(check: impl Fn()) {
    for on in [true, false] {
        rpcwire::fuzzing_runtime_simd(on);
        check();
    }
    rpcwire::fuzzing_runtime_simd(true);
}
