//! Runs a check twice: with rpcwire's kernels chosen by run-time CPU
//! detection (AVX2 on the fuzzing host), then with them turned off, so
//! that the same run covers rpcwire's SSE2 paths, which CPUs without AVX2
//! take and a fuzzing host with AVX2 never would otherwise (simdutf8 and
//! const-hex detect the CPU on their own and keep their AVX2 paths). A
//! failure in the second run only is one of those paths.

pub fn with_and_without_runtime_simd(check: impl Fn()) {
    for on in [true, false] {
        rpcwire::fuzzing_runtime_simd(on);
        check();
    }
    rpcwire::fuzzing_runtime_simd(true);
}
