//! `import-spdk`'s converter on any input: JSON or not, any shape and any
//! values, it converts or fails with an error — never panics — and what it
//! returns parses as a configuration (it checks that itself; a failure here
//! would be a converter that returned what it had not checked).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmeof_target::config::TargetConfig;
use nvmeof_target::spdk::convert;

mod path_kind;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // What a key file holds is decided by the data too (no file system look-up).
    let read_key = |p: &std::path::Path| match p.as_os_str().len() % 3 {
        0 => Ok("DHHC-1:01:o8/jE9vGsSdaRVAfWmfEhzOZ8S7KkfTi8F/tg64x4BN8zoYw:".to_string()),
        1 => Ok(p.to_string_lossy().into_owned()),
        _ => Err("no such file".to_string()),
    };
    if let Ok(c) = convert(text, path_kind::kind, read_key) {
        assert!(TargetConfig::from_toml(&c.toml).is_ok());
    }
});
